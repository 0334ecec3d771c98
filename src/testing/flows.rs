//! The flows against the in-memory doubles: rotation interrupted at every
//! store call, rollout waves, install's rollback, SSM's visibility grace,
//! Secrets Manager's stage rules. No root, sshd, AWS emulator or network.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Fault, Faulty, MemDispatcher, MemFleet, MemoryStore};
use crate::aws::AwsError;
use crate::commands::install::exit_status;
use crate::dispatch::{Invocation, InvocationSource, Pacing, poll};
use crate::document::SecretDocument;
use crate::exit::Status;
use crate::ids::{SecretId, StageLabel, VersionId};
use crate::install::{InstallReport, InstallResult};
use crate::keyset::{KeyAlgorithm, KeySet};
use crate::rollout::{PushOptions, push_version};
use crate::rotation::{Outcome, Report, Request, Rotation, RotationError, Step};
use crate::store::{
    CreateRequest, STAGE_CURRENT, STAGE_PENDING, STAGE_PREVIOUS, SecretStore, StoreError, StoredVersion,
    VersionSelector, stage,
};

pub(super) const ALGS: [KeyAlgorithm; 2] = [KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa];

pub(super) fn secret() -> SecretId {
    SecretId::parse("hk").unwrap()
}

pub(super) fn options(canary: usize) -> PushOptions {
    PushOptions {
        document: Some(crate::ssm_document::SentDocument::shell()),
        node_command: crate::ids::Program::parse("hostkeyctl").unwrap(),
        max_concurrency: "100%".to_owned(),
        max_errors: "0".to_owned(),
        timeout: Duration::from_secs(60),
        canary,
        region: None,
    }
}

/// A secret with a fresh set, and a fleet whose nodes all serve it.
pub(super) async fn world(nodes: usize) -> (MemoryStore, Arc<MemFleet>, VersionId) {
    let store = MemoryStore::new();
    let keys = KeySet::generate(&ALGS, 2048).unwrap();
    let document = SecretDocument::new(keys);
    let (_, version) = store
        .create(&CreateRequest {
            name: &secret(),
            document: &document,
            description: "test",
            tags: &[],
            kms_key_id: None,
        })
        .await
        .unwrap();
    let fleet = Arc::new(MemFleet::new(nodes, &ALGS).unwrap());
    let current = current(&store).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let pushed = push_version(&dispatcher, &current, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    assert!(pushed.all_ok(), "{:?}", pushed.results);
    assert!(fleet.all_serve(&current.document.keys));
    (store, fleet, version)
}

pub(super) async fn current(store: &impl SecretStore) -> StoredVersion {
    store
        .get(&secret(), &VersionSelector::Stage(stage(STAGE_CURRENT)))
        .await
        .unwrap()
}

/// Every regular file in `dir` with its bytes, sorted by name: for checking
/// that nothing was written.
pub(super) fn dir_contents(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

/// A new set stored as AWSPENDING, read back.
pub(super) async fn pending_set(store: &MemoryStore) -> StoredVersion {
    let doc = SecretDocument::new(KeySet::generate(&ALGS, 2048).unwrap());
    let id = store
        .put_version(&secret(), &doc, &VersionId::random(), &[stage(STAGE_PENDING)])
        .await
        .unwrap();
    store.get(&secret(), &VersionSelector::VersionId(id)).await.unwrap()
}

pub(super) async fn rotate(
    store: &impl SecretStore,
    fleet: &Arc<MemFleet>,
    dispatcher_store: &impl SecretStore,
    request: Request,
) -> Result<Outcome, RotationError> {
    rotate_with_ca(store, fleet, dispatcher_store, request, None).await
}

/// [`rotate`] with `--ca-secret-id`'s CA.
pub(super) async fn rotate_with_ca(
    store: &impl SecretStore,
    fleet: &Arc<MemFleet>,
    dispatcher_store: &impl SecretStore,
    request: Request,
    ca: Option<&crate::keyset::HostKey>,
) -> Result<Outcome, RotationError> {
    let instances = fleet.instances();
    let push = options(1);
    let dispatcher = MemDispatcher::new(fleet, dispatcher_store);
    let rotation = Rotation {
        store,
        dispatcher: &dispatcher,
        prober: fleet.clone(),
        secret: &secret(),
        instances: &instances,
        push: &push,
        port: 22,
        progress: &|_, _| {},
        say: &|_| {},
        ca,
    };
    rotation.run(request, &mut Report::new(secret())).await
}

/// Checks, at every move of AWSCURRENT, that every node already serves the
/// version it moves to: AWSCURRENT never moves before the test step passed.
struct Watch<'a, S> {
    inner: &'a S,
    fleet: &'a MemFleet,
}

impl<S: SecretStore> SecretStore for Watch<'_, S> {
    async fn create(&self, req: &CreateRequest<'_>) -> Result<(SecretId, VersionId), StoreError> {
        self.inner.create(req).await
    }
    async fn get(&self, s: &SecretId, v: &VersionSelector) -> Result<StoredVersion, StoreError> {
        self.inner.get(s, v).await
    }
    async fn describe(&self, s: &SecretId) -> Result<crate::store::SecretInfo, StoreError> {
        self.inner.describe(s).await
    }
    async fn put_version(
        &self,
        s: &SecretId,
        d: &SecretDocument,
        t: &VersionId,
        l: &[StageLabel],
    ) -> Result<VersionId, StoreError> {
        assert!(
            !l.iter().any(|l| l.as_str() == STAGE_CURRENT),
            "a new version was made AWSCURRENT directly"
        );
        self.inner.put_version(s, d, t, l).await
    }
    async fn move_stage(
        &self,
        s: &SecretId,
        label: &StageLabel,
        to: Option<&VersionId>,
        from: Option<&VersionId>,
    ) -> Result<(), StoreError> {
        if label.as_str() == STAGE_CURRENT
            && let Some(to) = to
        {
            let target = self.inner.get(s, &VersionSelector::VersionId(to.clone())).await?;
            assert!(
                self.fleet.all_offer(&target.document.keys),
                "AWSCURRENT moved to {to} before every node loaded it"
            );
        }
        self.inner.move_stage(s, label, to, from).await
    }
    async fn tag(&self, s: &SecretId, t: &[(String, String)]) -> Result<(), StoreError> {
        self.inner.tag(s, t).await
    }
}

/// Runs a rotation to the end after an interruption: resume if one is in
/// flight (or was finishing); if none is and AWSCURRENT already moved, the
/// rotation had finished; else start again.
async fn complete(store: &MemoryStore, fleet: &Arc<MemFleet>, original: &VersionId) -> Outcome {
    let watched = Watch {
        inner: store,
        fleet: fleet.as_ref(),
    };
    let resume = Request {
        resume: true,
        ..Request::default()
    };
    match rotate(&watched, fleet, store, resume).await {
        Ok(outcome) => outcome,
        Err(RotationError::Refused(m)) if m.contains("no rotation in flight") => {
            if store.holder(&secret(), STAGE_CURRENT).as_ref() != Some(original) {
                // Killed after finish moved every stage: the stages are
                // right; `push` (as the refusal says) converges the nodes.
                let now = current(store).await;
                let dispatcher = MemDispatcher::new(fleet, store);
                let pushed = push_version(&dispatcher, &now, None, &fleet.instances(), &options(0), &|_, _| {})
                    .await
                    .unwrap();
                assert!(pushed.all_ok(), "{:?}", pushed.results);
                return Outcome::Completed;
            }
            rotate(&watched, fleet, store, Request::default()).await.unwrap()
        }
        Err(e) => panic!("resume failed: {e}"),
    }
}

pub(super) fn assert_rotated(store: &MemoryStore, fleet: &MemFleet, original: &VersionId, what: &str) {
    let s = secret();
    let current = store.holder(&s, STAGE_CURRENT).unwrap();
    assert_ne!(&current, original, "{what}: AWSCURRENT did not move");
    assert_eq!(
        store.holder(&s, STAGE_PREVIOUS).as_ref(),
        Some(original),
        "{what}: the old set is lost"
    );
    assert_eq!(store.holder(&s, STAGE_PENDING), None, "{what}: AWSPENDING left behind");
    let labelled: Vec<_> = store.stages(&s).into_iter().filter(|(_, l)| !l.is_empty()).collect();
    assert_eq!(labelled.len(), 2, "{what}: {labelled:?}");
    let rt = tokio::runtime::Handle::current();
    let keys = tokio::task::block_in_place(|| rt.block_on(store.get(&s, &VersionSelector::VersionId(current.clone()))))
        .unwrap()
        .document
        .keys;
    assert!(fleet.all_serve(&keys), "{what}: a node does not serve AWSCURRENT");
    let info = tokio::task::block_in_place(|| rt.block_on(store.describe(&s))).unwrap();
    let (tagged, _) = info.tagged_fingerprints().unwrap().unwrap();
    assert_eq!(tagged, current, "{what}: the tags are not of AWSCURRENT");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rotation_interrupted_at_every_store_call_resumes_to_the_same_end() {
    // An uninterrupted run, for the number of store calls and the end state.
    let (store, fleet, original) = world(3).await;
    let counting = Faulty::counting(&store);
    let watched = Watch {
        inner: &counting,
        fleet: fleet.as_ref(),
    };
    assert_eq!(
        rotate(&watched, &fleet, &store, Request::default()).await.unwrap(),
        Outcome::Rotated
    );
    assert_rotated(&store, &fleet, &original, "uninterrupted");
    let calls = counting.log().len();
    assert!(calls >= 6, "{:?}", counting.log());

    for at in 1..=calls {
        for fault in [Fault::Fail, Fault::CrashAfter] {
            let what = format!("{fault:?} at store call {at}");
            let (store, fleet, original) = world(3).await;
            let faulty = Faulty::new(&store, at, None, fault);
            let watched = Watch {
                inner: &faulty,
                fleet: fleet.as_ref(),
            };
            let first = rotate(&watched, &fleet, &store, Request::default()).await;
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

#[tokio::test]
async fn the_fleet_double_discovers_by_tag_and_instance_id() {
    use crate::discovery::{Fleet, TargetSpec};
    let fleet = MemFleet::new(3, &[KeyAlgorithm::Ed25519]).unwrap();
    let login: TargetSpec = "tag:Role=login".parse().unwrap();
    assert_eq!(fleet.discover(std::slice::from_ref(&login)).await.unwrap().len(), 3);
    let one: TargetSpec = fleet.nodes[1].instance.instance_id.parse().unwrap();
    let found = fleet.discover(&[login, one]).await.unwrap();
    assert_eq!(found, vec![fleet.nodes[1].instance.clone()]);
    let compute: TargetSpec = "tag:Role=compute".parse().unwrap();
    assert!(fleet.discover(&[compute]).await.is_err());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_canary_stops_the_wave() {
    let (store, fleet, _) = world(4).await;
    fleet.nodes[0].faults.lock().unwrap().dispatch_fails = Some("agent offline".to_owned());
    let version = current(&store).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &version, None, &fleet.instances(), &options(1), &|_, _| {})
        .await
        .unwrap();
    assert!(!outcome.all_ok());
    assert_eq!(outcome.results[0].status, "Failed");
    assert_eq!(outcome.results[0].error.as_deref(), Some("agent offline"));
    for r in &outcome.results[1..] {
        assert_eq!(r.status, "NotSent", "{r:?}");
        assert!(r.error.as_deref().unwrap().contains("canary"), "{r:?}");
    }
    assert_eq!(
        dispatcher.sent.lock().unwrap().len(),
        1,
        "only the canary wave was sent"
    );
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
        abort: true,
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
    let pushed = push_version(&dispatcher, &now, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    assert!(pushed.all_ok());
    assert!(fleet.all_serve(&now.document.keys));
    assert!(!fleet.nodes[1].offers(&pending_keys));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_reload_rolls_back_and_a_dead_sshd_is_exit_5() {
    let (store, fleet, _) = world(2).await;
    let pending = pending_set(&store).await;
    let before = current(&store).await;
    fleet.nodes[0].faults.lock().unwrap().reload_fails = true;
    fleet.nodes[1].faults.lock().unwrap().dies_on_reload = true;
    let on_disk = dir_contents(&fleet.nodes[0].ssh_dir);
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &pending, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    let reports: Vec<InstallReport> = outcome
        .results
        .iter()
        .map(|r| {
            let inv = dispatcher_invocation(&dispatcher, &r.instance_id);
            InstallReport::from_output(&inv.stdout).unwrap()
        })
        .collect();
    assert_eq!(reports[0].result, InstallResult::RolledBack, "{:?}", reports[0].error);
    assert_eq!(exit_status(&reports[0]), Status::Incomplete);
    assert_eq!(
        dir_contents(&fleet.nodes[0].ssh_dir),
        on_disk,
        "the rollback is byte-identical"
    );
    assert!(fleet.nodes[0].serves(&before.document.keys));
    assert_eq!(reports[1].result, InstallResult::RollbackFailed, "{:?}", reports[1]);
    assert_eq!(exit_status(&reports[1]), Status::RollbackFailed);
    assert_eq!(exit_status(&reports[1]).code(), 5);
    assert!(!outcome.all_ok());
}

pub(super) fn dispatcher_invocation<S: SecretStore>(d: &MemDispatcher<'_, S>, id: &str) -> Invocation {
    let rt = tokio::runtime::Handle::current();
    let commands = vec![("x".to_owned(), vec![id.to_owned()])];
    let (states, _) = tokio::task::block_in_place(|| {
        rt.block_on(crate::dispatch::Dispatcher::wait(
            d,
            &commands,
            Instant::now(),
            &|_, _| {},
        ))
    })
    .unwrap();
    states[id].clone()
}

#[tokio::test]
async fn a_reused_client_token_is_idempotent_for_the_same_set_and_refused_for_another() {
    let (store, _, _) = world(0).await;
    let token = VersionId::random();
    let doc = SecretDocument::new(KeySet::generate(&ALGS, 2048).unwrap());
    let pending = [stage(STAGE_PENDING)];
    let first = store.put_version(&secret(), &doc, &token, &pending).await.unwrap();
    assert_eq!(
        store.put_version(&secret(), &doc, &token, &pending).await.unwrap(),
        first
    );
    let other = SecretDocument::new(KeySet::generate(&ALGS, 2048).unwrap());
    assert!(matches!(
        store.put_version(&secret(), &other, &token, &pending).await,
        Err(StoreError::TokenConflict { .. })
    ));
}

#[tokio::test]
async fn stage_moves_follow_secrets_managers_rules() {
    let (store, _, original) = world(0).await;
    let doc = SecretDocument::new(KeySet::generate(&ALGS, 2048).unwrap());
    let a = store
        .put_version(&secret(), &doc, &VersionId::random(), &[stage(STAGE_PENDING)])
        .await
        .unwrap();
    let doc2 = SecretDocument::new(KeySet::generate(&ALGS, 2048).unwrap());
    let b = store
        .put_version(
            &secret(),
            &doc2,
            &VersionId::random(),
            &[StageLabel::parse("mine").unwrap()],
        )
        .await
        .unwrap();
    // Claiming a label another version holds, without RemoveFromVersionId,
    // is refused (the basis for an atomic claim of AWSPENDING).
    let refused = store.move_stage(&secret(), &stage(STAGE_PENDING), Some(&b), None).await;
    match refused {
        Err(StoreError::LabelHeld { holder, .. }) => assert_eq!(holder, Some(a.clone())),
        other => panic!("{other:?}"),
    }
    // RemoveFromVersionId must hold the label.
    assert!(
        store
            .move_stage(&secret(), &stage(STAGE_PENDING), Some(&b), Some(&original))
            .await
            .is_err()
    );
    store
        .move_stage(&secret(), &stage(STAGE_PENDING), Some(&b), Some(&a))
        .await
        .unwrap();
    assert_eq!(store.holder(&secret(), STAGE_PENDING), Some(b.clone()));
    // Moving AWSCURRENT puts AWSPREVIOUS on the version that held it.
    store
        .move_stage(&secret(), &stage(STAGE_CURRENT), Some(&b), Some(&original))
        .await
        .unwrap();
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(b));
    assert_eq!(store.holder(&secret(), STAGE_PREVIOUS), Some(original));
}

/// An SSM that does not show a fresh command for its first reads.
struct LateSsm {
    hidden_reads: std::sync::atomic::AtomicUsize,
}

impl InvocationSource for LateSsm {
    async fn list(&self, command_id: &str, calls: &mut usize) -> Result<Vec<Invocation>, AwsError> {
        *calls += 1;
        if self.hidden_reads.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) > 0 {
            return Err(AwsError::NotFound {
                action: "ssm:ListCommandInvocations",
                resource: command_id.to_owned(),
                message: "InvalidCommandId".to_owned(),
            });
        }
        Ok(vec![Invocation {
            instance_id: "i-00000000000000001".to_owned(),
            command_id: command_id.to_owned(),
            status: "Success".to_owned(),
            response_code: Some(0),
            stdout: String::new(),
            stderr: String::new(),
        }])
    }
}

#[tokio::test]
async fn a_command_ssm_does_not_show_yet_is_waited_for_within_the_grace_only() {
    let commands = vec![("c1".to_owned(), vec!["i-00000000000000001".to_owned()])];
    let pacing = Pacing {
        first_poll: Duration::from_millis(1),
        visibility_grace: Duration::from_secs(30),
    };
    let late = LateSsm { hidden_reads: 2.into() };
    let deadline = Instant::now() + Duration::from_secs(30);
    let (states, stats) = poll(&late, &commands, deadline, &|_, _| {}, pacing).await.unwrap();
    assert_eq!(states["i-00000000000000001"].status, "Success");
    assert_eq!(stats.rounds, 3, "two unseen reads, then the answer");
    let no_grace = Pacing {
        visibility_grace: Duration::ZERO,
        ..pacing
    };
    let late = LateSsm { hidden_reads: 1.into() };
    assert!(matches!(
        poll(&late, &commands, deadline, &|_, _| {}, no_grace).await,
        Err(AwsError::NotFound { .. })
    ));
}
