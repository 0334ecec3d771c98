//! `status` in memory ([`hostkeyctl::status::Overview`] over the doubles):
//! one version with its fingerprints, a rotation announced, and with
//! targets, the nodes that do not serve AWSCURRENT by name.

use hostkeyctl::discovery::TargetSpec;
use hostkeyctl::scan::ScanPolicy;
use hostkeyctl::status::{Overview, StatusReport};
use hostkeyctl::testing::{MemFleet, MemoryStore};

use super::{current, pending_set, secret, world};

pub(crate) async fn status(
    store: &MemoryStore,
    fleet: &std::sync::Arc<MemFleet>,
    targets: &[TargetSpec],
) -> StatusReport {
    Overview {
        store,
        fleet: fleet.as_ref(),
        prober: fleet.clone(),
        policy: ScanPolicy::default(),
    }
    .run(&secret(), targets, 22)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn status_shows_each_version_its_stages_and_the_nodes_not_serving_current() {
    let (store, fleet, first) = world(3).await;
    let set = current(&store).await;
    let steady = status(&store, &fleet, &[]).await;
    assert_eq!(steady.versions.len(), 1, "{steady:?}");
    let v = &steady.versions[0];
    assert_eq!(
        (&v.version_id, v.stages.as_slice()),
        (&first, &["AWSCURRENT".to_owned()][..])
    );
    let fingerprints: Vec<String> = v.keys.iter().map(|k| k.fingerprint.to_string()).collect();
    let expected: Vec<String> = set.document.keys.keys().map(|k| k.fingerprint().to_string()).collect();
    assert_eq!(fingerprints, expected);
    assert!(v.keys.iter().all(|k| !k.public_key.contains("PRIVATE")));
    assert_eq!(
        (steady.rotation_in_flight.as_ref(), steady.phase.state),
        (None, "steady")
    );
    assert!(steady.converged.is_none(), "no targets, no scan");
    let text = steady.table(None);
    assert!(text.contains("AWSCURRENT") && text.contains(&expected[0]), "{text}");
    assert!(text.contains("phase    steady"), "{text}");
    assert_eq!(steady.user_notice.phase, hostkeyctl::notice::Phase::Steady);
    assert!(text.contains("notice for users"), "{text}");

    // A next set announced: the rotation is in flight.
    let next = pending_set(&store).await;
    let announced = status(&store, &fleet, &[]).await;
    assert_eq!(announced.versions.len(), 2);
    assert_eq!(announced.rotation_in_flight.as_ref(), Some(&next.version_id));
    assert_eq!(announced.phase.state, "announced");
    assert_eq!(announced.user_notice.phase, hostkeyctl::notice::Phase::Announced);
    assert!(
        announced.table(None).contains("ssh_config"),
        "the notice names what Windows users attach"
    );
    let text = announced.table(None);
    assert!(
        text.contains(&format!("version {} is AWSPENDING", next.version_id)),
        "{text}"
    );

    // A renewal stores the announced set again (sign during an overlap,
    // issue 27): the overlap's clock goes on, it does not restart.
    let since = announced.phase.since.clone();
    assert!(since.is_some(), "{announced:?}");
    let renewed = super::renew_pending(&store, &next.document).await;
    let later = status(&store, &fleet, &[]).await;
    assert_eq!(later.rotation_in_flight.as_ref(), Some(&renewed));
    assert_eq!(later.phase.since, since, "the renewal restarted the overlap's clock");

    // With targets: the node that does not answer is named.
    fleet.nodes[1].stop();
    let targets = vec!["tag:Role=login".parse::<TargetSpec>().unwrap()];
    let scanned = status(&store, &fleet, &targets).await;
    let converged = scanned.converged.unwrap();
    assert_eq!((converged.nodes, converged.serving_current), (3, 2));
    let stopped = fleet.instances()[1].name.clone().unwrap();
    assert_eq!(converged.not_converged, [stopped]);
}
