//! Admission's flow in memory (the target group and the launch hook as
//! doubles, the nodes as [`MemFleet`]): what the bed's ELB cannot show,
//! since moto keeps one registration per target id where Elastic Load
//! Balancing keeps one per id and port.

use std::sync::Arc;

use hostkeyctl::admission::{Admission, AdmissionRequest, Decision, GroupSpec, Serving};
use hostkeyctl::discovery::TargetSpec;
use hostkeyctl::exit::Status;
use hostkeyctl::scan::{ScanAlgorithm, ScanPolicy};
use hostkeyctl::testing::{MemFleet, MemHooks, MemTargetGroups, MemoryStore};

use super::{current, secret, world};

/// A fleet of `nodes` serving the set, its fingerprint tags written, and
/// the nodes' addresses.
async fn serving(nodes: usize) -> (MemoryStore, Arc<MemFleet>, Vec<String>) {
    let (store, fleet, _) = world(nodes).await;
    let set = current(&store).await;
    hostkeyctl::store::tag_fingerprints(&store, &secret(), &set.version_id, &set.document.keys)
        .await
        .unwrap();
    let addresses = fleet
        .instances()
        .iter()
        .map(|i| i.private_ip.clone().unwrap())
        .collect();
    (store, fleet, addresses)
}

fn request() -> AdmissionRequest {
    AdmissionRequest {
        secret: secret(),
        group: GroupSpec::TargetGroup("arn:aws:elasticloadbalancing:us-east-1:111122223333:targetgroup/login/0".into()),
        cluster: vec![TargetSpec::Tag {
            key: "Role".into(),
            value: "login".into(),
        }],
        port: 22,
        max_drain: None,
        dry_run: false,
        lifecycle: None,
    }
}

/// A3: a node registered on a second port is judged there too: the port
/// that refuses (or serves other keys) is named, and the node is not
/// reported as serving the set.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_registered_on_two_ports_is_judged_on_both() {
    let (store, fleet, a) = serving(3).await;
    let groups = MemTargetGroups::ip(
        "login",
        22,
        &[
            (&a[0], 22, "healthy"),
            (&a[1], 22, "healthy"),
            (&a[2], 22, "healthy"),
            (&a[2], 2022, "healthy"),
        ],
    );
    let admission = Admission {
        store: &store,
        fleet: &*fleet,
        groups: &groups,
        hooks: None::<&MemHooks>,
        prober: fleet.clone(),
        policy: ScanPolicy::from_options(8, 2, 1, 1, ScanAlgorithm::ALL.to_vec()),
    };
    let report = admission.run(&request()).await.unwrap();
    let twice = report.nodes.iter().find(|p| p.observed.target_id == a[2]).unwrap();
    assert!(
        matches!(&twice.observed.serving, Serving::Unknown(why) if why.starts_with("port 2022: ")),
        "{twice:?}"
    );
    for once in report.nodes.iter().filter(|p| p.observed.target_id != a[2]) {
        assert_eq!(once.observed.serving, Serving::Set, "{once:?}");
        assert_eq!(once.decision, Decision::Keep);
    }
    assert_eq!(report.status(), Status::Incomplete);
}
