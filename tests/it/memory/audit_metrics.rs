//! The audit's metrics when CloudWatch refuses them ("fail the Nth
//! call", src/testing's `MemMetrics`).

use hostkeyctl::testing::MemDispatcher;

use super::audit::{request, run};
use super::world;

/// CloudWatch's PutMetricData failing: the audit's report and exit stand,
/// a warning says the metrics were not published and why, and nothing is
/// put; once it answers, every datum goes under the namespace.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_cloudwatch_refuses_are_a_warning_and_the_audit_stands() {
    use hostkeyctl::audit::metrics::{Destinations, publish};
    let (store, fleet, _) = world(2).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let report = run(&store, &fleet, &dispatcher, &request(None, false)).await.unwrap();
    let sink = hostkeyctl::testing::MemMetrics::default();
    sink.faults.fail_nth("cloudwatch:PutMetricData", 1);
    let to = Destinations {
        file: None,
        cloudwatch: Some(("HostKeys", Some(&sink))),
        in_lambda: false,
    };
    let now = time::OffsetDateTime::now_utc();
    let (_, warnings) = publish(&report, std::time::Duration::from_secs(1), now, &to).await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("cloudwatch:PutMetricData") && warnings[0].contains("the audit's result stands"),
        "{warnings:?}"
    );
    assert!(sink.put.lock().unwrap().is_empty());
    assert_eq!(report.conclusion, hostkeyctl::audit::Conclusion::Consistent);
    let (_, warnings) = publish(&report, std::time::Duration::from_secs(1), now, &to).await;
    assert!(warnings.is_empty(), "{warnings:?}");
    let put = sink.put.lock().unwrap();
    assert!(!put.is_empty() && put.iter().all(|(ns, _)| ns == "HostKeys"));
}
