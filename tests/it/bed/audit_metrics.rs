//! The audit's metrics on the test bed (issue 29): a Prometheus textfile,
//! CloudWatch as the auditor role, and the embedded metric format in Lambda.

use crate::common::bed::{BedOptions, SECRET, TARGETS, TestBed};

/// `ListMetrics` of `namespace` in the emulator's CloudWatch (the SDK's
/// CBOR protocol, as the bed): (metric name, dimension names).
async fn cloudwatch_metrics(bed: &TestBed, namespace: &str) -> Vec<(String, Vec<String>)> {
    let cw = aws_sdk_cloudwatch::Client::new(&bed.sdk_config(1).await);
    let out = cw.list_metrics().namespace(namespace).send().await.unwrap();
    out.metrics()
        .iter()
        .map(|m| {
            (
                m.metric_name().unwrap_or_default().to_owned(),
                m.dimensions()
                    .iter()
                    .map(|d| d.name().unwrap_or_default().to_owned())
                    .collect(),
            )
        })
        .collect()
}

/// `GetMetricData`: the maximum of `NodesNotOk` over the last 10 minutes.
async fn nodes_not_ok(bed: &TestBed, namespace: &str) -> Vec<f64> {
    use aws_sdk_cloudwatch::types::{Metric, MetricDataQuery, MetricStat};
    let cw = aws_sdk_cloudwatch::Client::new(&bed.sdk_config(1).await);
    let now = std::time::SystemTime::now();
    let query = MetricDataQuery::builder()
        .id("notok")
        .metric_stat(
            MetricStat::builder()
                .metric(Metric::builder().namespace(namespace).metric_name("NodesNotOk").build())
                .period(600)
                .stat("Maximum")
                .build(),
        )
        .build();
    let out = cw
        .get_metric_data()
        .metric_data_queries(query)
        .start_time((now - std::time::Duration::from_secs(600)).into())
        .end_time((now + std::time::Duration::from_secs(60)).into())
        .send()
        .await
        .unwrap();
    out.metric_data_results()[0].values().to_vec()
}

/// Issue 29: the audit's metrics, as a textfile Prometheus's parser reads
/// and in the emulator's CloudWatch (as the auditor role, IAM enforced),
/// follow what it found: every node and sample ok, then one node whose key
/// was changed by hand. Dimensions are verdicts only.
#[tokio::test(flavor = "multi_thread")]
async fn audit_metrics_reach_a_textfile_and_cloudwatch() {
    let (bed, _) = TestBed::converged(BedOptions::default());
    let prom = bed.dir().join("audit.prom");
    let path = prom.display().to_string();
    let namespace = "hostkeyctl/test";
    let args = |namespace| {
        let mut args: Vec<&str> = "audit --output json --lb lb:hp-login --samples 6"
            .split_whitespace()
            .collect();
        args.extend([
            "--secret-id",
            SECRET,
            "--metrics-file",
            &path,
            "--cloudwatch",
            namespace,
        ]);
        args.extend(TARGETS);
        args
    };
    let value = |name: &str, label: Option<(&str, &str)>| {
        let samples = crate::common::support::prometheus_samples(&prom);
        samples
            .iter()
            .find(|(n, labels, _)| n == name && label.is_none_or(|(k, v)| labels[k] == v))
            .map(|(_, _, v)| *v)
            .unwrap_or_else(|| panic!("no {name} {label:?} in {samples:?}"))
    };

    let run = bed.run(&args(namespace));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    assert_eq!(value("hostkeyctl_audit_nodes", Some(("verdict", "ok"))), 3.0);
    assert_eq!(value("hostkeyctl_audit_nodes", Some(("verdict", "mismatch"))), 0.0);
    assert_eq!(value("hostkeyctl_audit_nodes_not_ok", None), 0.0);
    assert_eq!(value("hostkeyctl_audit_lb_samples", Some(("verdict", "ok"))), 18.0);
    assert_eq!(value("hostkeyctl_audit_consistent", None), 1.0);
    assert!(value("hostkeyctl_audit_duration_seconds", None) > 0.0);
    let metrics = cloudwatch_metrics(&bed, namespace).await;
    for name in ["NodesNotOk", "Nodes", "LbSamples", "AuditDuration"] {
        assert!(metrics.iter().any(|(n, _)| n == name), "{name} not in {metrics:?}");
    }
    assert!(
        metrics.iter().flat_map(|(_, dims)| dims).all(|d| d == "Verdict"),
        "a dimension other than the verdict: {metrics:?}"
    );
    let values = nodes_not_ok(&bed, namespace).await;
    assert!(!values.is_empty() && values.iter().all(|v| *v == 0.0), "{values:?}");

    // Someone regenerates node 2's ed25519 key by hand (sshd re-executes
    // for each connection, so it serves the new key at once).
    crate::common::bed::change_ed25519_key_by_hand(&bed.state.nodes[1]);
    let run = bed.run(&args(namespace));
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert_eq!(value("hostkeyctl_audit_nodes", Some(("verdict", "mismatch"))), 1.0);
    assert_eq!(value("hostkeyctl_audit_nodes_not_ok", None), 1.0);
    // Every sample through the balancer is judged, one verdict each.
    let samples = value("hostkeyctl_audit_lb_samples", Some(("verdict", "ok")))
        + value("hostkeyctl_audit_lb_samples", Some(("verdict", "mismatch")));
    assert_eq!(samples, 18.0);
    assert_eq!(value("hostkeyctl_audit_consistent", None), 0.0);
    let values = nodes_not_ok(&bed, namespace).await;
    assert!(values.contains(&1.0), "the alarm's metric saw the drift: {values:?}");

    // In Lambda: the same metrics in the embedded metric format on stdout,
    // one document per line, and no PutMetricData.
    let in_lambda = "hostkeyctl/lambda";
    let run = bed.run_env(
        &args(in_lambda),
        &[("AWS_LAMBDA_FUNCTION_NAME".to_owned(), "hostkeyctl-audit".to_owned())],
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let documents: Vec<serde_json::Value> = run
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|d| d.get("_aws").is_some())
        .collect();
    let not_ok: Vec<&serde_json::Value> = documents.iter().filter(|d| d.get("NodesNotOk").is_some()).collect();
    assert_eq!(not_ok.len(), 1, "{}", run.stdout);
    assert_eq!(not_ok[0]["NodesNotOk"], 1.0);
    assert_eq!(not_ok[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"], in_lambda);
    assert!(
        documents
            .iter()
            .any(|d| d["Verdict"] == "mismatch" && d["Nodes"] == 1.0),
        "{}",
        run.stdout
    );
    assert!(
        cloudwatch_metrics(&bed, in_lambda).await.is_empty(),
        "PutMetricData in Lambda"
    );
}
