//! Unattended rotation that cannot be turned against the fleet, in memory:
//! events that are no rotation Secrets Manager started change nothing; a
//! set is promoted only once it has been announced for the minimum overlap
//! and every node was seen serving it; the revocation never names a set a
//! node may serve; a rollback goes through the same overlap.

use std::sync::Arc;
use std::time::Duration;

use super::{Parts, current, secret, sign_current_with, timer, timer_on, world};
use hostkeyctl::ids::VersionId;
use hostkeyctl::keyset::{HostKey, KeyAlgorithm, KeySet};
use hostkeyctl::rotation::{FleetMode, Gate, LambdaStep, MinOverlap, Outcome, Report, Request, RotationError};
use hostkeyctl::store::{STAGE_CURRENT, STAGE_NEXT, STAGE_PENDING, STAGE_PREVIOUS, SecretStore, VersionSelector};
use hostkeyctl::testing::{MemFleet, MemoryStore};

const STEPS: [LambdaStep; 4] = [
    LambdaStep::CreateSecret,
    LambdaStep::SetSecret,
    LambdaStep::TestSecret,
    LambdaStep::FinishSecret,
];

/// One step as the function runs it, with `gate` (its clock the store's).
async fn step(
    store: &MemoryStore,
    fleet: &Arc<MemFleet>,
    min_overlap: MinOverlap,
    s: LambdaStep,
    token: &VersionId,
    mode: FleetMode,
) -> Result<String, RotationError> {
    let mut parts = Parts::new(fleet, store);
    parts.gate = Gate {
        min_overlap,
        trust_timers: false,
        now: store.now(),
        retire_for: std::time::Duration::from_secs(3_600),
    };
    parts.rotation(store, fleet, None).scheduled_step(s, token, mode).await
}

/// A whole scheduled rotation: Secrets Manager's staging, then the steps
/// (the nodes' timers after each, on a pull fleet); the first error.
async fn scheduled(
    store: &MemoryStore,
    fleet: &Arc<MemFleet>,
    min_overlap: MinOverlap,
    mode: FleetMode,
) -> Result<VersionId, RotationError> {
    let token = VersionId::random();
    store.stage_rotation(&secret(), &token, false)?;
    for s in STEPS {
        step(store, fleet, min_overlap, s, &token, mode).await?;
        if mode == FleetMode::Pull {
            timer(fleet, store).await;
        }
    }
    Ok(token)
}

async fn keys_of(store: &MemoryStore, label: &str) -> KeySet {
    let v = store.holder(&secret(), label).unwrap();
    store.keys_of(&secret(), &v).unwrap()
}

/// `schedule enable`'s announcement, at the store's clock.
async fn announce(store: &MemoryStore, fleet: &Arc<MemFleet>) -> VersionId {
    let mut parts = Parts::new(fleet, store);
    parts.gate.now = store.now();
    parts
        .rotation(store, fleet, None)
        .announce_after(&current(store).await, hostkeyctl::rotation::FleetMode::Push)
        .await
        .unwrap()
}

/// What each node serves and how often it was reloaded: to show that an
/// event installed nothing anywhere.
fn nodes_state(fleet: &MemFleet) -> Vec<(String, usize)> {
    fleet
        .nodes
        .iter()
        .map(|n| (format!("{:?}", n.served()), n.reloads()))
        .collect()
}

/// Steps with an AWSPREVIOUS, a deprecated or a random token (a forged
/// event, or one of a rotation given up long ago): refused, saying what
/// the token is; no stage moves and nothing is installed anywhere.
#[tokio::test(flavor = "multi_thread")]
async fn events_with_an_old_or_unknown_token_change_nothing_and_say_why() {
    let (store, fleet, _) = world(2).await;
    let zero = MinOverlap::Exactly(Duration::ZERO);
    announce(&store, &fleet).await;
    timer(&fleet, &store).await;
    for _ in 0..2 {
        scheduled(&store, &fleet, zero, FleetMode::Push).await.unwrap();
    }
    let previous = store.holder(&secret(), STAGE_PREVIOUS).unwrap();
    let deprecated = store
        .stages(&secret())
        .into_iter()
        .find(|(_, labels)| labels.is_empty())
        .map(|(v, _)| v)
        .expect("a deprecated version");
    let (stages, nodes) = (store.stages(&secret()), nodes_state(&fleet));
    for (what, token) in [
        ("AWSPREVIOUS", previous),
        ("retired (deprecated)", deprecated),
        ("no version of this secret", VersionId::random()),
    ] {
        for s in STEPS {
            let outcome = step(&store, &fleet, zero, s, &token, FleetMode::Push).await;
            if s == LambdaStep::TestSecret && what.starts_with("no version") {
                // RotateImmediately false's check of the configuration.
                assert!(outcome.unwrap().contains("a check of the configuration"));
                continue;
            }
            let e = outcome.unwrap_err().to_string();
            assert!(
                e.contains("is not AWSPENDING") && e.contains("Nothing was changed"),
                "{what} {s}: {e}"
            );
        }
        assert_eq!(store.stages(&secret()), stages, "{what}: a stage moved");
        assert_eq!(nodes_state(&fleet), nodes, "{what}: something was installed");
    }
}

/// A forged finishSecret whose token is AWSPENDING of a manual rotation in
/// flight (other keys than a scheduled rotation stages): refused, and the
/// manual rotation keeps its AWSPENDING.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_event_naming_a_manual_rotation_in_flight_changes_nothing() {
    let (store, fleet, _) = world(2).await;
    let overlap = Request {
        phase: hostkeyctl::rotation::Phase::Overlap { resume: false },
        ..Request::default()
    };
    super::rotate(&store, &fleet, &store, overlap).await.unwrap();
    let manual = store.holder(&secret(), STAGE_PENDING).unwrap();
    let (stages, nodes) = (store.stages(&secret()), nodes_state(&fleet));
    let zero = MinOverlap::Exactly(Duration::ZERO);
    for s in STEPS {
        let e = step(&store, &fleet, zero, s, &manual, FleetMode::Push)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("holds other keys") && e.contains("Nothing was changed"),
            "{s}: {e}"
        );
    }
    assert_eq!(store.stages(&secret()), stages);
    assert_eq!(nodes_state(&fleet), nodes);
}

/// The announced set is promoted only once it has been announced for the
/// minimum overlap (24 h without a schedule): a rotation right after the
/// announcement is refused before it stages anything, gives Secrets
/// Manager's staging back, and the one a day later promotes it.
#[tokio::test(flavor = "multi_thread")]
async fn the_announced_set_waits_for_the_minimum_overlap() {
    let (store, fleet, original) = world(2).await;
    announce(&store, &fleet).await;
    timer(&fleet, &store).await;
    let announced = keys_of(&store, STAGE_NEXT).await;
    let e = scheduled(&store, &fleet, MinOverlap::Auto, FleetMode::Pull)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("createSecret failed") && e.contains("clients are given 1d 0h") && e.contains("--min-overlap 0"),
        "{e}"
    );
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(original));
    assert_eq!(
        store.holder(&secret(), STAGE_PENDING),
        None,
        "the staging was not given back"
    );
    store.advance(25 * 3600);
    scheduled(&store, &fleet, MinOverlap::Auto, FleetMode::Pull)
        .await
        .unwrap();
    assert_eq!(keys_of(&store, STAGE_CURRENT).await, announced);
}

/// A pull fleet where one node's timer is stopped: that node never served
/// the announced set, so finishSecret refuses, naming it, and AWSCURRENT
/// stays; once its timer runs, the next rotation promotes.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_timer_stopped_holds_the_promotion_back_by_name() {
    let (store, fleet, original) = world(3).await;
    let zero = MinOverlap::Exactly(Duration::ZERO);
    announce(&store, &fleet).await;
    assert_eq!(timer_on(&fleet, &store, &[0, 2]).await, [Some(0); 2]);
    let token = VersionId::random();
    store.stage_rotation(&secret(), &token, false).unwrap();
    for s in &STEPS[..3] {
        step(&store, &fleet, zero, *s, &token, FleetMode::Pull).await.unwrap();
        timer_on(&fleet, &store, &[0, 2]).await;
    }
    let e = step(&store, &fleet, zero, LambdaStep::FinishSecret, &token, FleetMode::Pull)
        .await
        .unwrap_err()
        .to_string();
    let name = |i: usize| fleet.nodes[i].instance.name.clone().unwrap();
    assert!(e.contains("1 of 3 node(s)") && e.contains(&name(1)), "{e}");
    assert!(!e.contains(&name(0)) && !e.contains(&name(2)), "{e}");
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(original));
    assert_eq!(store.holder(&secret(), STAGE_PENDING), None);
    assert_eq!(timer(&fleet, &store).await, [Some(0); 3]);
    let promoted = scheduled(&store, &fleet, zero, FleetMode::Pull).await.unwrap();
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(promoted));
}

/// An event for another fleet's secret is refused before any call.
#[test]
fn an_event_for_another_secret_is_refused_naming_both() {
    let ours =
        hostkeyctl::ids::SecretId::parse("arn:aws:secretsmanager:us-east-1:111122223333:secret:hostkeys/a-AbCdEf")
            .unwrap();
    let theirs = "arn:aws:secretsmanager:us-east-1:111122223333:secret:hostkeys/b-AbCdEf";
    let e = hostkeyctl::rotation::check_event_secret(&ours, theirs)
        .unwrap_err()
        .to_string();
    assert!(e.contains(ours.as_str()) && e.contains(theirs), "{e}");
}

/// With certificates, the revocation after a scheduled rotation names the
/// retired set alone: never the announced set (HOSTKEYCTL_NEXT), which the
/// next rotation promotes, nor AWSCURRENT.
#[tokio::test(flavor = "multi_thread")]
async fn the_revocation_never_names_the_announced_set() {
    let (store, fleet, _) = world(1).await;
    let ca = hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let first = sign_current_with(&store, &ca, &["login.test"], 7 * 86_400).await;
    let parts = Parts::new(&fleet, &store);
    let rotation = parts.rotation(&store, &fleet, Some(&ca));
    for n in 1..=3 {
        rotation
            .announce_after(&current(&store).await, hostkeyctl::rotation::FleetMode::Push)
            .await
            .unwrap();
        timer(&fleet, &store).await;
        let token = VersionId::random();
        store.stage_rotation(&secret(), &token, false).unwrap();
        for s in STEPS {
            rotation.scheduled_step(s, &token, FleetMode::Pull).await.unwrap();
            timer(&fleet, &store).await;
        }
        let live: Vec<_> = [STAGE_CURRENT, STAGE_NEXT]
            .into_iter()
            .filter_map(|l| store.holder(&secret(), l))
            .flat_map(|v| {
                store
                    .keys_of(&secret(), &v)
                    .unwrap()
                    .keys()
                    .map(|k| k.fingerprint().clone())
                    .collect::<Vec<_>>()
            })
            .collect();
        let retired = hostkeyctl::revocation::retired(&store, &secret(), hostkeyctl::certificate::now_unix())
            .await
            .unwrap();
        for r in &retired {
            assert!(
                !live.contains(&r.fingerprint),
                "rotation {n}: {} is live and revoked",
                r.fingerprint
            );
        }
        if n == 1 {
            let first_keys: Vec<_> = first.document.keys.keys().map(|k| k.fingerprint().clone()).collect();
            assert!(
                retired.iter().all(|r| first_keys.contains(&r.fingerprint)),
                "{retired:?}"
            );
            assert_eq!(retired.len(), first_keys.len());
        }
    }
}

/// `rotate --rollback`: the first run announces the previous keys again
/// (the nodes offer them), a run before the overlap is held back, a run
/// after promotes them and the fingerprint tags follow.
#[tokio::test(flavor = "multi_thread")]
async fn a_rollback_goes_through_the_same_overlap_as_any_rotation() {
    let (store, fleet, original) = world(2).await;
    let original_keys = store.keys_of(&secret(), &original).unwrap();
    super::rotate(&store, &fleet, &store, Request::default()).await.unwrap();
    let rolled_away = keys_of(&store, STAGE_CURRENT).await;
    let run = |gate_overlap: MinOverlap| {
        let store = &store;
        let fleet = &fleet;
        async move {
            let mut parts = Parts::new(fleet, store);
            parts.gate = Gate {
                min_overlap: gate_overlap,
                trust_timers: false,
                now: store.now(),
                retire_for: std::time::Duration::from_secs(3_600),
            };
            let rotation = parts.rotation(store, fleet, None);
            let mut report = Report::new(secret());
            let request = Request {
                phase: hostkeyctl::rotation::Phase::Rollback { force: false },
                ..Request::default()
            };
            rotation.run(request, &mut report).await
        }
    };
    assert_eq!(run(MinOverlap::Auto).await.unwrap(), Outcome::OverlapStarted);
    let pending = store.holder(&secret(), STAGE_PENDING).unwrap();
    assert_eq!(store.keys_of(&secret(), &pending).unwrap(), original_keys);
    assert!(
        fleet.all_offer(&original_keys),
        "the nodes do not offer the previous keys"
    );
    let e = run(MinOverlap::Auto).await.unwrap_err();
    assert!(matches!(e, RotationError::Held(_)), "{e}");
    assert_eq!(keys_of(&store, STAGE_CURRENT).await, rolled_away);
    store.advance(25 * 3600);
    assert_eq!(run(MinOverlap::Auto).await.unwrap(), Outcome::Rotated);
    assert_eq!(keys_of(&store, STAGE_CURRENT).await, original_keys);
    assert!(fleet.all_serve(&original_keys));
    let info = store.describe(&secret()).await.unwrap();
    let (tagged, _) = info.tagged_fingerprints().unwrap().unwrap();
    assert_eq!(Some(tagged), store.holder(&secret(), STAGE_CURRENT));
    let current = store
        .get(
            &secret(),
            &VersionSelector::Stage(hostkeyctl::store::stage(STAGE_CURRENT)),
        )
        .await
        .unwrap();
    assert_eq!(current.document.keys, original_keys);
}
