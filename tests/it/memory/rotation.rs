//! Rotation in memory: interrupted at every store call, raced by a second rotation, aborted with a failed node, signed like the current set, and the nodes' timers run between every step.

use super::assert_desired;
use super::assert_rotated;
use super::complete;
use super::current;
use super::rotate;
use super::secret;
use super::sign_current;
use super::sign_current_with;
use super::timer;
use super::watch;
use super::world;
use hostkeyctl::rotation::Outcome;
use hostkeyctl::rotation::Step;
use hostkeyctl::rotation::{Phase, Request};
use hostkeyctl::store::STAGE_CURRENT;
use hostkeyctl::store::STAGE_PENDING;
use hostkeyctl::store::SecretStore;
use hostkeyctl::store::VersionSelector;
use hostkeyctl::testing::Action;
use hostkeyctl::testing::Fault;
use hostkeyctl::testing::Hooked;
use hostkeyctl::testing::MemDispatcher;
use hostkeyctl::testing::Op;
use hostkeyctl::testing::fault_at;

#[tokio::test(flavor = "multi_thread")]
async fn a_rotation_interrupted_at_every_store_call_resumes_to_the_same_end() {
    // An uninterrupted run, for the number of store calls and the end state.
    let (store, fleet, original) = world(3).await;
    let counting = Hooked::new(&store, watch(&store, fleet.as_ref(), |_| Action::Pass));
    assert_eq!(
        rotate(&counting, &fleet, &store, Request::default()).await.unwrap(),
        Outcome::Rotated
    );
    assert_rotated(&store, &fleet, &original, "uninterrupted");
    let calls = counting.log().len();
    assert!(calls >= 6, "{:?}", counting.log());

    for at in 1..=calls {
        for fault in [Fault::Fail, Fault::CrashAfter] {
            let what = format!("{fault:?} at store call {at}");
            let (store, fleet, original) = world(3).await;
            let faulty = Hooked::new(
                &store,
                watch(&store, fleet.as_ref(), move |call| fault_at(call, at, None, fault)),
            );
            let first = rotate(&faulty, &fleet, &store, Request::default()).await;
            assert!(faulty.fired(), "{what}: the fault never fired");
            assert!(first.is_err(), "{what}: the run went on after the fault: {first:?}");
            if store.holder(&secret(), STAGE_CURRENT).as_ref() != Some(&original) {
                // Interrupted inside finish, after AWSCURRENT moved: it moved
                // only after every node loaded the new set (Watch checked it).
                assert!(fleet.all_offer(&current(&store).await.document.keys), "{what}");
            }
            let outcome = complete(&store, &fleet, &original).await;
            assert!(
                matches!(outcome, Outcome::Rotated | Outcome::Completed),
                "{what}: {outcome:?}"
            );
            assert_rotated(&store, &fleet, &original, &what);
            assert!(store.version_count(&secret()) <= 3, "{what}: versions piled up");
        }
    }
}

/// An abort is a stage move, then convergence: AWSPENDING comes off first
/// (so no timer keeps offering the dropped set), and a node that fails to
/// converge is reported and brought back by the next push (or its timer).
#[tokio::test(flavor = "multi_thread")]
async fn an_abort_moves_the_stages_first_and_a_failed_node_converges_later() {
    let (store, fleet, original) = world(2).await;
    let stop = Request {
        stop_after: Some(Step::Set),
        ..Request::default()
    };
    assert_eq!(
        rotate(&store, &fleet, &store, stop).await.unwrap(),
        Outcome::StoppedAfterSet
    );
    let pending = store.holder(&secret(), STAGE_PENDING).unwrap();
    let pending_keys = store
        .get(&secret(), &VersionSelector::VersionId(pending))
        .await
        .unwrap()
        .document
        .keys;
    assert!(
        fleet.all_offer(&pending_keys),
        "set did not load the new set everywhere"
    );
    fleet.nodes[1].faults.lock().unwrap().dispatch_fails = Some("unreachable".to_owned());
    let abort = Request {
        phase: hostkeyctl::rotation::Phase::Abort,
        ..Request::default()
    };
    assert_eq!(
        rotate(&store, &fleet, &store, abort).await.unwrap(),
        Outcome::AbortPushFailed
    );
    assert_eq!(store.holder(&secret(), STAGE_PENDING), None, "the stages moved first");
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(original.clone()));
    assert!(!fleet.nodes[0].offers(&pending_keys), "node 1 converged: no next keys");
    assert!(fleet.nodes[1].offers(&pending_keys), "node 2 was unreachable");
    assert_eq!(
        rotate(&store, &fleet, &store, abort).await.unwrap(),
        Outcome::NothingToAbort
    );
    fleet.nodes[1].faults.lock().unwrap().dispatch_fails = None;
    let now = current(&store).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let pushed = super::push_all(&dispatcher, &fleet, &now).await;
    assert!(pushed.all_ok());
    assert!(fleet.all_serve(&now.document.keys));
    assert!(!fleet.nodes[1].offers(&pending_keys));
}

/// Regression (hardening finding 9): the in-flight check was not atomic and
/// PutSecretValue silently took AWSPENDING from the other admin's version.
/// Two rotations started together, 20 times: exactly one proceeds, the
/// other is refused naming it, and the stages and the fleet end consistent.
#[tokio::test(flavor = "multi_thread")]
async fn two_rotations_started_together_never_both_proceed() {
    for round in 0..20 {
        let (store, fleet, original) = world(2).await;
        // Each rotation waits after its first read of the stages until the
        // other has made it too: both plan from the same stages.
        let barrier = tokio::sync::Barrier::new(2);
        let gate = || {
            Hooked::new(&store, |call| match (call.op, call.nth) {
                (Op::DescribeVersions, 1) => Action::WaitAfter(&barrier),
                _ => Action::Pass,
            })
        };
        let (a, b) = (gate(), gate());
        let (ra, rb) = tokio::join!(
            rotate(&a, &fleet, &store, Request::default()),
            rotate(&b, &fleet, &store, Request::default())
        );
        let outcomes = [&ra, &rb];
        let won = outcomes.iter().filter(|r| matches!(r, Ok(Outcome::Rotated))).count();
        assert_eq!(won, 1, "round {round}: {ra:?} / {rb:?}");
        let lost = outcomes.iter().find_map(|r| r.as_ref().err()).unwrap().to_string();
        assert!(
            lost.contains("another rotation claimed AWSPENDING first") || lost.contains("another rotation finished"),
            "round {round}: {lost}"
        );
        assert_rotated(&store, &fleet, &original, &format!("round {round}"));
        let claims = store
            .stages(&secret())
            .into_iter()
            .flat_map(|(_, l)| l)
            .filter(|l| l.starts_with(hostkeyctl::store::claim::CLAIM_PREFIX))
            .count();
        assert_eq!(claims, 0, "round {round}: a claim label was left behind");
    }
}

/// Certificates (issue 17): a rotation of a signed set without the CA is
/// refused before anything is stored; a new set without certificates would
/// lock out clients that trust only the CA.
#[tokio::test(flavor = "multi_thread")]
async fn rotating_a_signed_set_without_the_ca_is_refused_and_stores_nothing() {
    let (store, fleet, _) = world(1).await;
    let signed = sign_current(&store, &["login.test"], 86_400).await;
    let versions = store.stages(&secret()).len();
    let refused = super::rotate(&store, &fleet, &store, Request::default()).await;
    let Err(hostkeyctl::rotation::RotationError::Refused(message)) = refused else {
        panic!("not refused: {refused:?}");
    };
    assert!(message.contains("--ca-secret-id"), "{message}");
    assert_eq!(store.stages(&secret()).len(), versions, "a version was stored");
    assert_eq!(
        store.holder(&secret(), hostkeyctl::store::STAGE_CURRENT),
        Some(signed.version_id)
    );
}

/// Certificates (issue 17): `rotate --ca-secret-id` signs the new set like
/// the current one (same principals, same validity length, next serial),
/// and every node serves the new certificates once it is promoted.
#[tokio::test(flavor = "multi_thread")]
async fn a_rotation_signs_the_new_set_like_the_current_one() {
    let (store, fleet, _) = world(2).await;
    let ca = hostkeyctl::certificate::CaKey::from(
        hostkeyctl::keyset::HostKey::generate(hostkeyctl::keyset::KeyAlgorithm::Ed25519, 0).unwrap(),
    );
    let day = 86_400;
    let signed = sign_current_with(&store, &ca, &["login.test", "alias.test"], 30 * day).await;
    let outcome = super::rotate_with_ca(&store, &fleet, &store, Request::default(), Some(&ca))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rotated);
    assert_rotated(&store, &fleet, &signed.version_id, "signed rotation");
    let now = super::current(&store).await;
    assert_ne!(now.document.keys, signed.document.keys);
    assert_eq!(now.document.certificates.len(), now.document.keys.len());
    for cert in now.document.certificates.values() {
        assert_eq!(cert.serial(), 2);
        assert_eq!(cert.valid_principals(), ["login.test", "alias.test"]);
        assert_eq!(hostkeyctl::certificate::ca_fingerprint(cert), ca.fingerprint());
        let length = cert.valid_before() - cert.valid_after();
        assert!(
            length.abs_diff(30 * day + hostkeyctl::certificate::BACKDATE_SECS) < 120,
            "{length}"
        );
    }
    for node in &fleet.nodes {
        let served = node.served_certificates();
        assert_eq!(
            served.len(),
            now.document.certificates.len(),
            "{}",
            node.instance.instance_id
        );
    }
}

/// Issue 14: the timer's plain install and a rotation never disagree. A
/// timer run on every node between every pair of steps leaves every node
/// exactly where the stages say (it used to drop the overlap's next keys
/// and move nodes off the set step's AWSPENDING).
#[tokio::test(flavor = "multi_thread")]
async fn a_timer_between_every_step_never_moves_a_node_off_the_stages() {
    use hostkeyctl::rotation::{Phase, Request, Step};
    let (store, fleet, _) = world(3).await;
    assert_eq!(timer(&fleet, &store).await, [Some(0); 3]);
    assert_desired(&store, &fleet, "before").await;
    let step = |phase: Phase, stop_after: Option<Step>| Request {
        phase,
        stop_after,
        ..Request::default()
    };
    for (request, pushed, what) in [
        (
            step(Phase::Overlap { resume: false }, Some(Step::Create)),
            false,
            "announced",
        ),
        (step(Phase::Overlap { resume: true }, None), true, "overlap started"),
        (step(Phase::Finish, Some(Step::Set)), true, "finish stopped after set"),
        (step(Phase::Finish, Some(Step::Test)), true, "finish stopped after test"),
        (step(Phase::Finish, None), true, "rotated"),
    ] {
        rotate(&store, &fleet, &store, request).await.unwrap();
        if pushed {
            assert_desired(&store, &fleet, what).await;
        }
        assert_eq!(timer(&fleet, &store).await, [Some(0); 3], "{what}");
        assert_desired(&store, &fleet, &format!("{what}, then the timer")).await;
    }
}

/// After a kill at every store call of a rotation, a timer run puts every
/// node where the stages say, and the rotation then completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_timer_after_a_kill_at_every_step_follows_the_stages() {
    use hostkeyctl::rotation::Request;
    let (store, fleet, _) = world(2).await;
    let counting = Hooked::counting(&store);
    rotate(&counting, &fleet, &store, Request::default()).await.unwrap();
    let calls = counting.log().len();
    for at in 1..=calls {
        let what = format!("killed after store call {at}");
        let (store, fleet, _) = world(2).await;
        let faulty = Hooked::fault_at(&store, at, None, Fault::CrashAfter);
        assert!(
            rotate(&faulty, &fleet, &store, Request::default()).await.is_err(),
            "{what}"
        );
        assert_eq!(timer(&fleet, &store).await, [Some(0); 2], "{what}");
        assert_desired(&store, &fleet, &what).await;
    }
}

/// `--stop-after` stops after each step with the stages saying so; each
/// `--resume` goes on from the stages alone, and AWSCURRENT moves only at
/// the end.
#[tokio::test(flavor = "multi_thread")]
async fn stopping_after_each_step_then_resuming_completes_the_rotation() {
    let (store, fleet, original) = world(2).await;
    let mut outcomes = Vec::new();
    for (i, step) in [Step::Create, Step::Set, Step::Test].into_iter().enumerate() {
        let request = Request {
            phase: if i > 0 { Phase::Resume } else { Phase::New },
            stop_after: Some(step),
            ..Request::default()
        };
        outcomes.push(rotate(&store, &fleet, &store, request).await.unwrap());
        assert_eq!(
            store.holder(&secret(), STAGE_CURRENT),
            Some(original.clone()),
            "{step:?}: AWSCURRENT moved early"
        );
        assert!(
            store.holder(&secret(), STAGE_PENDING).is_some(),
            "{step:?}: no rotation in flight"
        );
    }
    assert_eq!(
        outcomes,
        [
            Outcome::StoppedAfterCreate,
            Outcome::StoppedAfterSet,
            Outcome::StoppedAfterTest
        ]
    );
    let resume = Request {
        phase: hostkeyctl::rotation::Phase::Resume,
        ..Request::default()
    };
    assert_eq!(rotate(&store, &fleet, &store, resume).await.unwrap(), Outcome::Rotated);
    assert_rotated(&store, &fleet, &original, "resumed");
}

/// A rotation started while one is in flight is refused, naming the
/// announced set's age: when the set was made, which a renewal (sign
/// during an overlap stores the set again as a new version) keeps.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_rotation_is_refused_with_the_announced_sets_own_age() {
    let (store, fleet, _) = world(1).await;
    let next = super::pending_set(&store).await;
    super::renew_pending(&store, &next.document).await;
    let refused = super::rotate(&store, &fleet, &store, Request::default()).await;
    let Err(hostkeyctl::rotation::RotationError::Refused(message)) = refused else {
        panic!("not refused: {refused:?}");
    };
    let age = hostkeyctl::rotation::age(Some(&next.document.created));
    assert!(message.contains(&format!("({age})")), "{message}, expected {age}");
}

/// `rotate` without a phase flag, when clients are given an overlap (the
/// default), announces the new set as `--overlap` does and says how to
/// finish: nothing is promoted, every node offers both sets. A pull fleet
/// announces too. Only `--min-overlap 0` rotates at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_rotation_without_a_phase_flag_announces_by_default() {
    let (store, fleet, _) = world(2).await;
    let before = store.holder(&secret(), STAGE_CURRENT);
    let mut parts = super::Parts::new(&fleet, &store);
    parts.gate.min_overlap = hostkeyctl::rotation::MinOverlap::Exactly(std::time::Duration::from_secs(86_400));
    let rotation = parts.rotation(&store, &fleet, None);
    let mut report = hostkeyctl::rotation::Report::new(secret());
    let outcome = rotation.run(Request::default(), &mut report).await.unwrap();
    assert_eq!(outcome, Outcome::OverlapStarted, "{report:?}");
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), before, "promoted at once");
    let pending = store.holder(&secret(), STAGE_PENDING).expect("announced");
    let said = report.steps.join("\n");
    assert!(
        said.contains("no phase flag") && said.contains("`rotate --finish`") && said.contains("1d"),
        "{said}"
    );
    let desired = hostkeyctl::store::desired_state(&store, &secret()).await.unwrap();
    assert_eq!(desired.next.map(|n| n.version_id), Some(pending));
    assert_desired(&store, &fleet, "announced by default").await;

    // What `rotate` prints: the notice for users of the announcement.
    let (store, fleet, _) = world(1).await;
    let mut parts = super::Parts::new(&fleet, &store);
    parts.gate.min_overlap = hostkeyctl::rotation::MinOverlap::Exactly(std::time::Duration::from_secs(86_400));
    let report = parts
        .rotation(&store, &fleet, None)
        .rotate(Request::default())
        .await
        .unwrap();
    let notice = report.user_notice.expect("a notice for users");
    assert_eq!(notice.phase, hostkeyctl::notice::Phase::Announced);

    // A pull fleet: the first of its two runs, without --overlap.
    let (store, fleet, _) = world(1).await;
    let parts = super::Parts::new(&fleet, &store);
    let rotation = parts.rotation(&store, &fleet, None);
    let mut report = hostkeyctl::rotation::Report::new(secret());
    let pull = Request {
        pull: Some(std::time::Duration::ZERO),
        ..Request::default()
    };
    assert_eq!(rotation.run(pull, &mut report).await.unwrap(), Outcome::Announced);
}

/// `rotate --pull --finish --wait 0`.
fn pull_finish() -> Request {
    Request {
        pull: Some(std::time::Duration::ZERO),
        phase: hostkeyctl::rotation::Phase::Finish,
        ..Request::default()
    }
}

/// Two nodes of a pull fleet whose timers serve an announced set (`rotate
/// --pull`, then a timer run).
async fn announced_on_a_pull_fleet() -> (
    hostkeyctl::testing::MemoryStore,
    std::sync::Arc<hostkeyctl::testing::MemFleet>,
) {
    let (store, fleet, _) = world(2).await;
    let announce = Request {
        pull: Some(std::time::Duration::ZERO),
        ..Request::default()
    };
    assert_eq!(
        rotate(&store, &fleet, &store, announce).await.unwrap(),
        Outcome::Announced
    );
    timer(&fleet, &store).await;
    (store, fleet)
}

/// A pull promotion whose nodes have not installed it when the wait ends
/// is `converging` (exit 0), not a failure: the stages are done, the
/// timers install it, and every node still offers the new set meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_pull_promotion_still_converging_is_not_a_failure() {
    use hostkeyctl::exit::ExitStatus as _;
    let (store, fleet) = announced_on_a_pull_fleet().await;
    let promoted = rotate(&store, &fleet, &store, pull_finish()).await.unwrap();
    assert_eq!(promoted, Outcome::Converging);
    assert_eq!(promoted.status(), hostkeyctl::exit::Status::Success);
    timer(&fleet, &store).await;
    assert_desired(&store, &fleet, "after the timers").await;
}

/// A pull promotion with a node the run cannot reach when the wait ends is
/// not converging but not converged (exit 3): the run cannot know that
/// node's timer will install it.
#[tokio::test(flavor = "multi_thread")]
async fn a_pull_promotion_with_a_node_out_of_reach_is_not_converged() {
    use hostkeyctl::exit::ExitStatus as _;
    let (store, fleet) = announced_on_a_pull_fleet().await;
    let hooked = hostkeyctl::testing::Hooked::new(&store, |call| {
        if call.label.is_some_and(|l| l.as_str() == STAGE_CURRENT) {
            fleet.nodes[1].stop();
        }
        hostkeyctl::testing::Action::Pass
    });
    let promoted = rotate(&hooked, &fleet, &store, pull_finish()).await.unwrap();
    assert_eq!(promoted, Outcome::NotConverged);
    assert_eq!(promoted.status(), hostkeyctl::exit::Status::Incomplete);
}
