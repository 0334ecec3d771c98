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
        allow_other_clusters: false,
        lifecycle: None,
    }
}

/// A3: a node registered on a second port is judged there too: an entry
/// per registration, each at its port (the one that refuses here is not
/// reported as serving the set), and only its own port would leave.
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
    let at = |port: u16| {
        report
            .nodes
            .iter()
            .find(|p| p.observed.target_id == a[2] && p.observed.port == Some(port))
            .unwrap_or_else(|| panic!("no entry for {} port {port}: {:?}", a[2], report.nodes))
    };
    assert!(
        matches!(at(2022).observed.serving, Serving::Unknown(_)),
        "{:?}",
        at(2022)
    );
    assert!(at(2022).observed.name.ends_with("(port 2022)"), "{:?}", at(2022));
    assert_eq!(at(22).observed.serving, Serving::Set);
    for p in &report.nodes {
        assert_eq!(p.decision, Decision::Keep, "{p:?}");
    }
    assert_eq!(report.status(), Status::Incomplete);
    assert!(groups.deregistered.lock().unwrap().is_empty());
}
