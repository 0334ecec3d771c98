//! `doctor` over the doubles (src/testing): a fleet in order, then each
//! outside call failing in turn. An AWS error on one check is that
//! check's finding, naming the call, and never the end of the others.

use std::collections::BTreeSet;

use hostkeyctl::admission::GroupSpec;
use hostkeyctl::discovery::TargetSpec;
use hostkeyctl::doctor::{Diagnosis, Doctor, DoctorRequest, Level};
use hostkeyctl::ids::Program;
use hostkeyctl::ssm_document::publish::{Names, publish};
use hostkeyctl::ssm_document::{CHECK_NAME, CONVERGE_NAME, DEFAULT_NAME};
use hostkeyctl::testing::{MemDispatcher, MemFunctions, MemManagedInstances, MemTargetGroups};

use super::{current, secret, world};

const GROUP: &str = "arn:aws:elasticloadbalancing:us-east-1:111122223333:targetgroup/login/0";

/// The checks a diagnosis made, by name.
fn checks(d: &Diagnosis) -> BTreeSet<&'static str> {
    d.findings.iter().map(|f| f.check).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_failing_call_is_its_checks_finding_and_the_others_still_run() {
    let (store, fleet, _) = world(3).await;
    let set = current(&store).await;
    hostkeyctl::store::tag_fingerprints(&store, &secret(), &set.version_id, &set.document.keys)
        .await
        .unwrap();
    let program = Program::parse("hostkeyctl").unwrap();
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let names = Names {
        install: DEFAULT_NAME,
        check: CHECK_NAME,
        converge: CONVERGE_NAME,
    };
    publish(&dispatcher, names, &program).await.unwrap();
    let managed = MemManagedInstances::default();
    let addresses: Vec<String> = fleet
        .instances()
        .iter()
        .map(|i| i.private_ip.clone().unwrap())
        .collect();
    for i in fleet.instances() {
        managed.register(&i.instance_id, "Online", Some("3.3.1000.0"));
    }
    let groups = MemTargetGroups::ip(
        "login",
        22,
        &addresses
            .iter()
            .map(|a| (a.as_str(), 22, "healthy"))
            .collect::<Vec<_>>(),
    );
    let functions = MemFunctions::default();
    let doctor = Doctor {
        store: &store,
        fleet: &*fleet,
        dispatcher: &dispatcher,
        managed: &managed,
        balancers: &groups,
        functions: &functions,
    };
    let (s, targets, group) = (
        secret(),
        vec![TargetSpec::Tag {
            key: "Role".into(),
            value: "login".into(),
        }],
        GroupSpec::TargetGroup(GROUP.into()),
    );
    let req = DoctorRequest {
        secret: &s,
        targets: &targets,
        node_command: &program,
        allow_other_clusters: false,
        target_group: Some(&group),
        port: 22,
        stack: None,
    };
    let baseline = doctor.diagnose(&req).await;
    let all = checks(&baseline);
    assert!(all.len() >= 5, "{baseline:#?}");
    assert!(!format!("{baseline:?}").contains("injected"), "{baseline:#?}");
    // (the call, the double that fails it, the checks that need its answer)
    let faults = [
        ("ssm:DescribeInstanceInformation", &managed.faults, &["node"][..]),
        (
            "elasticloadbalancing:DescribeTargetGroupAttributes",
            &groups.faults,
            &[][..],
        ),
        ("ssm:DescribeDocument", &dispatcher.faults, &["node"][..]),
        ("ec2:DescribeInstances", &fleet.faults, &["ssm", "node", "balancer"][..]),
    ];
    for (op, faults, needs) in faults {
        faults.fail_from(op, faults.count(op) + 1);
        let d = doctor.diagnose(&req).await;
        let named = d.findings.iter().find(|f| f.message.contains(op));
        assert!(
            named.is_some_and(|f| f.level != Level::Ok && f.fix.is_some()),
            "{op}: no finding names it: {d:#?}"
        );
        let missing: Vec<&str> = all
            .difference(&checks(&d))
            .copied()
            .filter(|c| !needs.contains(c))
            .collect();
        assert!(missing.is_empty(), "{op}: checks {missing:?} did not run: {d:#?}");
        // The outage ends: the next run is the baseline again.
        faults.clear();
        let again = doctor.diagnose(&req).await;
        assert_eq!(checks(&again), all, "{op}");
    }
}
