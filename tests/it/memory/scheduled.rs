//! Scheduled rotation in memory: Secrets Manager's four steps, as the
//! rotation function runs them after Secrets Manager staged the token as
//! AWSPENDING on an empty version (`MemoryStore::stage_rotation`), three
//! rotations in a row (push and pull), interrupted at every store call, a
//! failed step that the next scheduled rotation gets past, and events that
//! are no rotation Secrets Manager started.

use std::sync::Arc;

use super::{Parts, assert_desired, current, secret, timer, watch, world};
use hostkeyctl::ids::VersionId;
use hostkeyctl::keyset::KeySet;
use hostkeyctl::rotation::{FleetMode, LambdaStep, RotationError};
use hostkeyctl::store::{STAGE_CURRENT, STAGE_NEXT, STAGE_PENDING, SecretStore, VersionSelector};
use hostkeyctl::testing::{Action, Fault, Hooked, MemFleet, MemoryStore, fault_at};

const STEPS: [LambdaStep; 4] = [
    LambdaStep::CreateSecret,
    LambdaStep::SetSecret,
    LambdaStep::TestSecret,
    LambdaStep::FinishSecret,
];

/// One step, as the rotation function runs it.
async fn step(
    store: &impl SecretStore,
    fleet: &Arc<MemFleet>,
    dispatcher_store: &impl SecretStore,
    step: LambdaStep,
    token: &VersionId,
    mode: FleetMode,
) -> Result<String, RotationError> {
    let parts = Parts::new(fleet, dispatcher_store);
    let rotation = parts.rotation(store, fleet, None);
    rotation.scheduled_step(step, token, mode).await
}

/// A step that must fail: its error, as the function's log shows it.
async fn refused(
    store: &MemoryStore,
    fleet: &Arc<MemFleet>,
    s: LambdaStep,
    token: &VersionId,
    mode: FleetMode,
) -> String {
    step(store, fleet, store, s, token, mode).await.unwrap_err().to_string()
}

/// What `schedule enable` does first: announce a set.
async fn announce(store: &MemoryStore, fleet: &Arc<MemFleet>) -> VersionId {
    let parts = Parts::new(fleet, store);
    let rotation = parts.rotation(store, fleet, None);
    rotation
        .announce_after(&current(store).await, FleetMode::Push)
        .await
        .unwrap()
}

async fn keys(store: &MemoryStore, label: &str) -> KeySet {
    let v = store.holder(&secret(), label).unwrap();
    store
        .get(&secret(), &VersionSelector::VersionId(v))
        .await
        .unwrap()
        .document
        .keys
}

/// A rotation's four steps, in order, with the nodes' timers after each
/// on a pull fleet.
async fn rotation(
    store: &MemoryStore,
    fleet: &Arc<MemFleet>,
    token: &VersionId,
    mode: FleetMode,
) -> Result<(), RotationError> {
    store.stage_rotation(&secret(), token, false)?;
    let watched = Hooked::new(store, watch(store, fleet.as_ref(), |_| Action::Pass));
    for s in STEPS {
        step(&watched, fleet, store, s, token, mode).await?;
        if mode == FleetMode::Pull {
            assert_eq!(timer(fleet, store).await, vec![Some(0); fleet.nodes.len()], "{s}");
        }
        // On a push fleet, setSecret is what installs a set nobody
        // announced (the first rotation).
        if mode == FleetMode::Pull || s != LambdaStep::CreateSecret {
            assert_desired(store, fleet, &format!("after {s}")).await;
        }
    }
    Ok(())
}

/// Each rotation promotes exactly the set every node offered for the
/// interval before it (what clients with UpdateHostKeys learned), and
/// announces another: nodes serve AWSCURRENT plus one set, always.
#[tokio::test(flavor = "multi_thread")]
async fn three_scheduled_rotations_promote_what_the_nodes_offered_for_an_interval() {
    for mode in [FleetMode::Push, FleetMode::Pull] {
        let (store, fleet, _) = world(3).await;
        announce(&store, &fleet).await;
        assert_eq!(timer(&fleet, &store).await, [Some(0); 3]);
        assert_desired(&store, &fleet, "announced").await;
        for n in 1..=3 {
            let what = format!("{mode:?} rotation {n}");
            let offered = keys(&store, STAGE_NEXT).await;
            assert!(fleet.all_offer(&offered), "{what}: the announced set is not offered");
            let before = store.holder(&secret(), STAGE_CURRENT).unwrap();
            let token = VersionId::random();
            rotation(&store, &fleet, &token, mode).await.unwrap();
            assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(token.clone()), "{what}");
            assert_eq!(
                keys(&store, STAGE_CURRENT).await,
                offered,
                "{what}: promoted another set"
            );
            assert_eq!(store.holder(&secret(), STAGE_PENDING), None, "{what}");
            assert_ne!(keys(&store, STAGE_NEXT).await, offered, "{what}: nothing new announced");
            assert_eq!(
                store.holder(&secret(), hostkeyctl::store::STAGE_PREVIOUS),
                Some(before),
                "{what}"
            );
            // Every step again under the same token changes nothing.
            let stages = store.stages(&secret());
            for s in STEPS {
                step(&store, &fleet, &store, s, &token, mode).await.unwrap();
            }
            assert_eq!(store.stages(&secret()), stages, "{what}: a retried step moved a stage");
            assert!(store.version_count(&secret()) <= 2 + 3 * n, "{what}: versions piled up");
        }
    }
}

/// The first scheduled rotation of a secret nobody announced a set for
/// (a stack's schedule that nobody followed with `schedule enable`)
/// changes no key: it promotes a copy of the current set and announces
/// the next, which the rotation after promotes.
#[tokio::test(flavor = "multi_thread")]
async fn with_nothing_announced_the_first_rotation_changes_no_key_and_announces() {
    for mode in [FleetMode::Push, FleetMode::Pull] {
        let (store, fleet, original) = world(2).await;
        let before = keys(&store, STAGE_CURRENT).await;
        let token = VersionId::random();
        rotation(&store, &fleet, &token, mode).await.unwrap();
        assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(token), "{mode:?}");
        assert_eq!(keys(&store, STAGE_CURRENT).await, before, "{mode:?}: a key changed");
        assert!(fleet.all_serve(&before), "{mode:?}: a node serves other keys");
        assert_eq!(
            store.holder(&secret(), hostkeyctl::store::STAGE_PREVIOUS),
            Some(original)
        );
        let announced = keys(&store, STAGE_NEXT).await;
        assert_ne!(announced, before, "{mode:?}: nothing announced");
        assert_eq!(timer(&fleet, &store).await, [Some(0); 2]);
        rotation(&store, &fleet, &VersionId::random(), mode).await.unwrap();
        assert_eq!(keys(&store, STAGE_CURRENT).await, announced, "{mode:?}");
    }
}

/// A crash or refusal at every store call of a rotation: AWSCURRENT never
/// moves before every node offers the set (`watch`), the nodes' timers
/// keep every node on the stages, and retrying the steps under the same
/// token (or, after a failed step gave it up, the next scheduled rotation)
/// promotes the announced set.
#[tokio::test(flavor = "multi_thread")]
async fn a_scheduled_rotation_interrupted_at_every_store_call_completes() {
    let calls = {
        let (store, fleet, _) = world(2).await;
        announce(&store, &fleet).await;
        let counting = Hooked::counting(&store);
        let token = VersionId::random();
        store.stage_rotation(&secret(), &token, false).unwrap();
        for s in STEPS {
            step(&counting, &fleet, &store, s, &token, FleetMode::Push)
                .await
                .unwrap();
        }
        counting.log().len()
    };
    assert!(calls >= 12, "{calls}");
    for at in 1..=calls {
        for fault in [Fault::Fail, Fault::CrashAfter] {
            let what = format!("{fault:?} at store call {at}");
            let (store, fleet, _) = world(2).await;
            announce(&store, &fleet).await;
            assert_eq!(timer(&fleet, &store).await, [Some(0); 2]);
            let announced = keys(&store, STAGE_NEXT).await;
            let token = VersionId::random();
            store.stage_rotation(&secret(), &token, false).unwrap();
            let faulty = Hooked::new(
                &store,
                watch(&store, fleet.as_ref(), move |call| fault_at(call, at, None, fault)),
            );
            let mut failed = None;
            for s in STEPS {
                if let Err(e) = step(&faulty, &fleet, &store, s, &token, FleetMode::Push).await {
                    failed = Some((s, e));
                    break;
                }
            }
            assert!(faulty.fired(), "{what}: the fault never fired");
            let Some((failed_step, _)) = failed else {
                panic!("{what}: the steps went on after the fault")
            };
            // The nodes' timers put every node where the stages say.
            assert_eq!(timer(&fleet, &store).await, [Some(0); 2], "{what}");
            assert_desired(&store, &fleet, &what).await;
            // Secrets Manager retries the failed step, then the rest.
            let retried = async {
                let start = STEPS.iter().position(|s| *s == failed_step).unwrap();
                for s in &STEPS[start..] {
                    step(&store, &fleet, &store, *s, &token, FleetMode::Push).await?;
                }
                Ok::<_, RotationError>(())
            }
            .await;
            if let Err(e) = retried {
                // Given up (AWSPENDING taken off): the next scheduled
                // rotation is not refused and completes.
                assert_eq!(store.holder(&secret(), STAGE_PENDING), None, "{what}: {e}");
                rotation(&store, &fleet, &VersionId::random(), FleetMode::Push)
                    .await
                    .unwrap_or_else(|e| panic!("{what}: the next rotation failed: {e}"));
            }
            assert_eq!(keys(&store, STAGE_CURRENT).await, announced, "{what}");
            assert_eq!(store.holder(&secret(), STAGE_PENDING), None, "{what}");
            assert_ne!(keys(&store, STAGE_NEXT).await, announced, "{what}");
            assert_desired(&store, &fleet, &format!("{what}, completed")).await;
        }
    }
}

/// A step that fails for a node (its install fails) gives the rotation up
/// without moving AWSCURRENT; the next scheduled rotation completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_set_step_leaves_the_next_rotation_free_to_complete() {
    let (store, fleet, original) = world(2).await;
    announce(&store, &fleet).await;
    assert_eq!(timer(&fleet, &store).await, [Some(0); 2]);
    let announced = keys(&store, STAGE_NEXT).await;
    let token = VersionId::random();
    store.stage_rotation(&secret(), &token, false).unwrap();
    step(
        &store,
        &fleet,
        &store,
        LambdaStep::CreateSecret,
        &token,
        FleetMode::Push,
    )
    .await
    .unwrap();
    fleet.nodes[1].faults.lock().unwrap().dispatch_fails = Some("agent down".to_owned());
    let e = refused(&store, &fleet, LambdaStep::SetSecret, &token, FleetMode::Push).await;
    assert!(
        e.contains("setSecret failed") && e.contains("AWSPENDING was taken off"),
        "{e}"
    );
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(original.clone()));
    assert_eq!(store.holder(&secret(), STAGE_PENDING), None);
    // Secrets Manager's retry of a later step is refused, saying why.
    let e = refused(&store, &fleet, LambdaStep::FinishSecret, &token, FleetMode::Push).await;
    assert!(e.contains("is not AWSPENDING"), "{e}");
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(original));
    // The nodes still serve the announced set; the next rotation promotes it.
    assert_desired(&store, &fleet, "given up").await;
    fleet.nodes[1].faults.lock().unwrap().dispatch_fails = None;
    rotation(&store, &fleet, &VersionId::random(), FleetMode::Push)
        .await
        .unwrap();
    assert_eq!(keys(&store, STAGE_CURRENT).await, announced);
}

/// A manual rotation in flight (AWSPENDING on its set): Secrets Manager
/// refuses to start a rotation, and a createSecret event sent anyway is
/// refused, naming it and what to run; nothing is stored.
#[tokio::test(flavor = "multi_thread")]
async fn create_secret_refuses_while_a_manual_rotation_is_in_flight() {
    let (store, fleet, _) = world(2).await;
    let overlap = hostkeyctl::rotation::Request {
        phase: hostkeyctl::rotation::Phase::Overlap { resume: false },
        ..Default::default()
    };
    super::rotate(&store, &fleet, &store, overlap).await.unwrap();
    let versions = store.version_count(&secret());
    assert!(store.stage_rotation(&secret(), &VersionId::random(), false).is_err());
    let e = refused(
        &store,
        &fleet,
        LambdaStep::CreateSecret,
        &VersionId::random(),
        FleetMode::Pull,
    )
    .await;
    assert!(
        e.contains("another rotation is in flight") && e.contains("--abort"),
        "{e}"
    );
    assert_eq!(store.version_count(&secret()), versions);
}

/// A manual `rotate` promotes the announced set too, and announces the
/// next on a secret with a schedule: the schedule and `rotate` are one
/// protocol.
#[tokio::test(flavor = "multi_thread")]
async fn a_manual_rotation_promotes_the_announced_set_and_announces_the_next() {
    let (store, fleet, _) = world(2).await;
    announce(&store, &fleet).await;
    let announced = keys(&store, STAGE_NEXT).await;
    let outcome = super::rotate(&store, &fleet, &store, Default::default()).await.unwrap();
    assert_eq!(outcome, hostkeyctl::rotation::Outcome::Rotated);
    assert_eq!(keys(&store, STAGE_CURRENT).await, announced);
    assert_ne!(keys(&store, STAGE_NEXT).await, announced);
    assert_desired(&store, &fleet, "rotated by hand").await;
}

/// A finish that moved AWSCURRENT and died before announcing, never
/// retried: the next rotation finds nothing announced, so it promotes a
/// copy (no client sees a change) and announces; the one after promotes
/// that set. No rotation promotes a set nobody announced.
#[tokio::test(flavor = "multi_thread")]
async fn a_finish_that_never_announced_is_followed_by_a_rotation_that_changes_no_key() {
    let (store, fleet, _) = world(2).await;
    announce(&store, &fleet).await;
    assert_eq!(timer(&fleet, &store).await, [Some(0); 2]);
    let token = VersionId::random();
    store.stage_rotation(&secret(), &token, false).unwrap();
    for s in &STEPS[..3] {
        step(&store, &fleet, &store, *s, &token, FleetMode::Pull).await.unwrap();
    }
    // The announcement is the finish's only PutSecretValue: refused.
    let refusing = Hooked::new(&store, |call| {
        if call.op == hostkeyctl::testing::Op::PutVersion {
            Action::Fault(Fault::Fail)
        } else {
            Action::Pass
        }
    });
    assert!(
        step(
            &refusing,
            &fleet,
            &store,
            LambdaStep::FinishSecret,
            &token,
            FleetMode::Pull
        )
        .await
        .is_err()
    );
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(token.clone()));
    let promoted = keys(&store, STAGE_CURRENT).await;
    assert_eq!(timer(&fleet, &store).await, [Some(0); 2]);
    rotation(&store, &fleet, &VersionId::random(), FleetMode::Pull)
        .await
        .unwrap();
    assert_eq!(
        keys(&store, STAGE_CURRENT).await,
        promoted,
        "a set nobody announced was promoted"
    );
    let announced = keys(&store, STAGE_NEXT).await;
    assert_ne!(announced, promoted);
    assert_eq!(timer(&fleet, &store).await, [Some(0); 2]);
    rotation(&store, &fleet, &VersionId::random(), FleetMode::Pull)
        .await
        .unwrap();
    assert_eq!(keys(&store, STAGE_CURRENT).await, announced);
}

/// RotateSecret with RotateImmediately false: Secrets Manager runs
/// testSecret alone, with a token no version has; it is a check of the
/// configuration that changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn test_secret_with_an_unknown_token_checks_the_configuration() {
    let (store, fleet, _) = world(2).await;
    let stages = store.stages(&secret());
    let done = step(
        &store,
        &fleet,
        &store,
        LambdaStep::TestSecret,
        &VersionId::random(),
        FleetMode::Push,
    )
    .await
    .unwrap();
    assert!(done.contains("a check of the configuration"), "{done}");
    assert_eq!(store.stages(&secret()), stages);
}

/// After a scheduled promotion on a pull fleet, a node whose timer
/// installed it keeps offering the set it retired, which the nodes not
/// converged yet still sign with: an `UpdateHostKeys` client that logs in
/// there keeps those keys. For an hour (`RETIRING_SECONDS`), during which
/// the retired set is a set nodes may serve (never revoked, in every
/// client's file); then the announced one. A promotion with no minimum
/// overlap (a leaked key) offers the retired set not a minute longer.
#[tokio::test(flavor = "multi_thread")]
async fn after_a_promotion_nodes_offer_the_retired_set_for_an_hour_then_the_announced_one() {
    use hostkeyctl::document::RETIRING_SECONDS;
    use hostkeyctl::rotation::MinOverlap;
    use hostkeyctl::store::{same_keys, servable};
    let (store, fleet, _) = world(3).await;
    announce(&store, &fleet).await;
    timer(&fleet, &store).await;
    store.advance(3_600);
    let retired = keys(&store, STAGE_CURRENT).await;
    let token = VersionId::random();
    store.stage_rotation(&secret(), &token, false).unwrap();
    let mut parts = Parts::new(&fleet, &store);
    parts.gate.min_overlap = MinOverlap::Exactly(std::time::Duration::from_secs(60));
    parts.gate.now = store.now();
    for s in STEPS {
        parts
            .rotation(&store, &fleet, None)
            .scheduled_step(s, &token, FleetMode::Pull)
            .await
            .unwrap();
        timer(&fleet, &store).await;
    }
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(token));
    let next = keys(&store, STAGE_NEXT).await;
    let in_sets = |s: &hostkeyctl::store::Servable, k: &KeySet| s.sets().any(|v| same_keys(&v.document.keys, k));
    assert!(fleet.all_offer(&retired), "a converged node dropped the retired set");
    assert!(!fleet.nodes.iter().any(|n| n.offers(&next)), "three sets served");
    assert_desired(&store, &fleet, "retiring").await;
    let during = servable(&store, &secret()).await.unwrap();
    assert!(
        in_sets(&during, &retired),
        "the retired set is not among the served ones"
    );
    assert!(
        !during.never_revoked().any(|v| same_keys(&v.document.keys, &retired)),
        "the retired set could not be revoked at once (a leak answered by a rotation)"
    );
    let phase = super::status::status(&store, &fleet, &[]).await.phase;
    assert!(
        phase.retiring_until.is_some(),
        "status does not show the hour: {phase:?}"
    );
    forged_retirings_are_ignored(&store, &retired).await;
    assert_eq!(
        during.others().count(),
        2,
        "a client's file lacks the retired or the next set"
    );

    store.advance(RETIRING_SECONDS);
    timer(&fleet, &store).await;
    assert!(
        fleet.all_offer(&next),
        "the announced set is not offered after the hour"
    );
    assert_desired(&store, &fleet, "after the hour").await;
    assert!(!in_sets(&servable(&store, &secret()).await.unwrap(), &retired));
    let phase = super::status::status(&store, &fleet, &[]).await.phase;
    assert!(
        phase.retiring_until.is_none(),
        "status shows an hour that has ended: {phase:?}"
    );

    // A push fleet's promotion (converged by its push, and nothing pushes
    // after the hour): nothing retiring.
    store.advance(3_600);
    let token = VersionId::random();
    store.stage_rotation(&secret(), &token, false).unwrap();
    parts.gate.now = store.now();
    for s in STEPS {
        let rotation = parts.rotation(&store, &fleet, None);
        rotation.scheduled_step(s, &token, FleetMode::Push).await.unwrap();
    }
    assert!(servable(&store, &secret()).await.unwrap().retiring.is_none());
    assert_desired(&store, &fleet, "after a push fleet's promotion").await;

    // An immediate promotion (no minimum overlap): nothing retiring.
    let token = VersionId::random();
    store.stage_rotation(&secret(), &token, false).unwrap();
    parts.gate.min_overlap = MinOverlap::Exactly(std::time::Duration::ZERO);
    parts.gate.now = store.now();
    for s in STEPS {
        let rotation = parts.rotation(&store, &fleet, None);
        rotation.scheduled_step(s, &token, FleetMode::Pull).await.unwrap();
        timer(&fleet, &store).await;
    }
    let after = servable(&store, &secret()).await.unwrap();
    assert!(
        after.retiring.is_none(),
        "an immediate promotion still offers the leaked set"
    );
    assert!(fleet.all_offer(&keys(&store, STAGE_NEXT).await));
}

/// A `retiring` a promotion never writes is ignored: one naming a version
/// that is not AWSPREVIOUS, or offered longer than two hours after its
/// announcement. `retired` is AWSPREVIOUS's keys, offered as retiring now.
async fn forged_retirings_are_ignored(store: &MemoryStore, retired: &KeySet) {
    use hostkeyctl::document::{Retiring, SecretDocument};
    use hostkeyctl::store::servable;
    let next = store.holder(&secret(), STAGE_NEXT).unwrap();
    let holder = store
        .get(&secret(), &VersionSelector::VersionId(next.clone()))
        .await
        .unwrap();
    let previous = holder.document.retiring.clone().unwrap();
    let oldest = store
        .stages(&secret())
        .into_iter()
        .map(|(id, _)| id)
        .find(|id| *id != previous.version_id && *id != next)
        .unwrap();
    let forge = |retiring: Retiring| {
        let mut doc: SecretDocument = holder.document.clone();
        doc.retiring = Some(retiring);
        doc
    };
    let far = Retiring {
        version_id: previous.version_id.clone(),
        until: store.now() + 30 * 86_400,
    };
    let other = Retiring {
        version_id: oldest,
        until: previous.until,
    };
    for (what, doc) in [("a month long", forge(far)), ("not AWSPREVIOUS", forge(other))] {
        let token = VersionId::random();
        let label = hostkeyctl::ids::StageLabel::parse(STAGE_NEXT).unwrap();
        store
            .put_version(&secret(), &doc, &token, std::slice::from_ref(&label))
            .await
            .unwrap();
        let s = servable(store, &secret()).await.unwrap();
        assert!(s.retiring.is_none(), "a forged retiring ({what}) is offered");
        store
            .move_stage(&secret(), &label, Some(&next), Some(&token))
            .await
            .unwrap();
    }
    let s = servable(store, &secret()).await.unwrap();
    assert!(
        s.retiring
            .is_some_and(|r| hostkeyctl::store::same_keys(&r.document.keys, retired))
    );
}
