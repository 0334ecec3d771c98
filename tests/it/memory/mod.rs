//! The in-memory tier: the flows (rotation, push, audit, sign, install)
//! against the doubles of `hostkeyctl::testing`, crashed, raced and
//! faulted at every step. No root, sshd, AWS emulator or network; plain
//! `cargo test` runs it. The bed tier runs the same flows against the real
//! parts.

mod admission;
mod association;
mod audit;
mod audit_metrics;
mod ca_init;
mod clients;
mod doctor;
mod document;
mod doubles;
mod enrolment;
mod enrolment_faults;
mod enrolment_host;
mod enrolment_patch;
mod enrolment_signer;
mod install;
mod install_certificates;
mod install_kex;
mod install_lock;
mod model;
mod policies;
mod push;
mod revocation;
mod rotation;
mod schedule;
mod scheduled;
mod sign;
mod status;
mod trust;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hostkeyctl::dispatch::Invocation;
use hostkeyctl::document::SecretDocument;
use hostkeyctl::ids::{SecretId, VersionId};
use hostkeyctl::keyset::{KeyAlgorithm, KeySet};
use hostkeyctl::rollout::{PushOptions, push_version};
use hostkeyctl::rotation::{Outcome, Report, Request, Rotation, RotationError};
use hostkeyctl::store::{
    CreateRequest, STAGE_CURRENT, STAGE_PENDING, STAGE_PREVIOUS, SecretStore, StoredVersion, VersionSelector, stage,
};
use hostkeyctl::testing::{Action, Call, Hooked, MemDispatcher, MemFleet, MemoryStore, Op};

pub const ALGS: [KeyAlgorithm; 2] = [KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa];

pub fn secret() -> SecretId {
    SecretId::parse("hk").unwrap()
}

pub fn options(canary: usize) -> PushOptions {
    PushOptions {
        document: Some(hostkeyctl::ssm_document::SentDocument::shell()),
        node_command: hostkeyctl::ids::Program::parse("hostkeyctl").unwrap(),
        max_concurrency: "100%".to_owned(),
        max_errors: "0".to_owned(),
        timeout: Duration::from_secs(60),
        canary,
        region: None,
    }
}

/// A secret with a fresh set, and a fleet whose nodes all serve it.
pub async fn world(nodes: usize) -> (MemoryStore, Arc<MemFleet>, VersionId) {
    let store = MemoryStore::new();
    let version = new_secret(&store, &secret(), &ALGS).await;
    let fleet = Arc::new(MemFleet::new(nodes, &ALGS).unwrap());
    let current = current(&store).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let pushed = push_all(&dispatcher, &fleet, &current).await;
    assert!(pushed.all_ok(), "{:?}", pushed.results);
    assert!(fleet.all_serve(&current.document.keys));
    (store, fleet, version)
}

/// A new secret `name` in `store`, holding a set of `algorithms`: its first
/// version.
pub async fn new_secret(store: &impl SecretStore, name: &SecretId, algorithms: &[KeyAlgorithm]) -> VersionId {
    let document = SecretDocument::new(KeySet::generate(algorithms, 2048).unwrap());
    let (_, version) = store
        .create(&CreateRequest {
            name,
            document: &document,
            description: "test",
            tags: &[],
            kms_key_id: None,
        })
        .await
        .unwrap();
    version
}

pub async fn current(store: &impl SecretStore) -> StoredVersion {
    store
        .get(&secret(), &VersionSelector::Stage(stage(STAGE_CURRENT)))
        .await
        .unwrap()
}

/// Every regular file in `dir` with its bytes, sorted by name: for checking
/// that nothing was written.
pub fn dir_contents(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
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
pub async fn pending_set(store: &MemoryStore) -> StoredVersion {
    let doc = SecretDocument::new(KeySet::generate(&ALGS, 2048).unwrap());
    let id = store
        .put_version(&secret(), &doc, &VersionId::random(), &[stage(STAGE_PENDING)])
        .await
        .unwrap();
    store.get(&secret(), &VersionSelector::VersionId(id)).await.unwrap()
}

pub async fn rotate(
    store: &impl SecretStore,
    fleet: &Arc<MemFleet>,
    dispatcher_store: &impl SecretStore,
    request: Request,
) -> Result<Outcome, RotationError> {
    rotate_with_ca(store, fleet, dispatcher_store, request, None).await
}

/// [`rotate`] with `--ca-secret-id`'s CA.
pub async fn rotate_with_ca(
    store: &impl SecretStore,
    fleet: &Arc<MemFleet>,
    dispatcher_store: &impl SecretStore,
    request: Request,
    ca: Option<&hostkeyctl::certificate::CaKey>,
) -> Result<Outcome, RotationError> {
    rotate_inner(store, fleet, dispatcher_store, request, ca, false).await.0
}

/// [`rotate_with_ca`], with the rotation's report and, as `rotate` adds it,
/// the revocation of what it retired.
pub async fn rotate_reporting(
    store: &impl SecretStore,
    fleet: &Arc<MemFleet>,
    dispatcher_store: &impl SecretStore,
    request: Request,
    ca: Option<&hostkeyctl::certificate::CaKey>,
) -> (Result<Outcome, RotationError>, Report) {
    rotate_inner(store, fleet, dispatcher_store, request, ca, true).await
}

/// What a rotation over the doubles borrows: the fleet's instances, the
/// push options and the SSM double.
pub struct Parts<'a, S: SecretStore> {
    instances: Vec<hostkeyctl::discovery::Instance>,
    push: hostkeyctl::rollout::PushOptions,
    dispatcher: MemDispatcher<'a, S>,
    /// The promotion gate: no minimum overlap unless a test sets one (the
    /// flows' own tests of the overlap set it).
    pub gate: hostkeyctl::rotation::Gate,
}

impl<'a, S: SecretStore> Parts<'a, S> {
    /// The parts for `fleet`, its SSM double reading `dispatcher_store`.
    pub fn new(fleet: &'a Arc<MemFleet>, dispatcher_store: &'a S) -> Self {
        Parts {
            instances: fleet.instances(),
            push: options(1),
            dispatcher: MemDispatcher::new(fleet, dispatcher_store),
            gate: hostkeyctl::rotation::Gate {
                min_overlap: hostkeyctl::rotation::MinOverlap::Exactly(Duration::ZERO),
                trust_timers: false,
                now: hostkeyctl::rotation::gate::unix_now(),
                retire_for: std::time::Duration::from_secs(3_600),
            },
        }
    }

    /// A rotation of the test secret over `store`.
    pub fn rotation<'b, St: SecretStore>(
        &'b self,
        store: &'b St,
        fleet: &Arc<MemFleet>,
        ca: Option<&'b hostkeyctl::certificate::CaKey>,
    ) -> Rotation<'b, St, MemDispatcher<'a, S>, MemFleet> {
        Rotation {
            store,
            dispatcher: &self.dispatcher,
            prober: fleet.clone(),
            secret: secret_ref(),
            instances: &self.instances,
            push: &self.push,
            port: 22,
            progress: &|_, _| {},
            say: &|_| {},
            ca,
            gate: self.gate,
        }
    }
}

/// The test secret's id, for as long as a rotation borrows it.
fn secret_ref() -> &'static SecretId {
    static SECRET: std::sync::OnceLock<SecretId> = std::sync::OnceLock::new();
    SECRET.get_or_init(secret)
}

async fn rotate_inner(
    store: &impl SecretStore,
    fleet: &Arc<MemFleet>,
    dispatcher_store: &impl SecretStore,
    request: Request,
    ca: Option<&hostkeyctl::certificate::CaKey>,
    revocation: bool,
) -> (Result<Outcome, RotationError>, Report) {
    let parts = Parts::new(fleet, dispatcher_store);
    let rotation = parts.rotation(store, fleet, ca);
    let mut report = Report::new(secret());
    let outcome = rotation.run(request, &mut report).await;
    if let (true, Ok(done)) = (revocation, &outcome) {
        report.revocation = rotation.revocation(*done).await.unwrap();
    }
    (outcome, report)
}

/// The hook that checks, at every move of AWSCURRENT, that every node
/// already serves the version it moves to (AWSCURRENT never moves before
/// the test step passed), and that no version is made AWSCURRENT directly;
/// then decides as `then` does.
pub fn watch<'a>(
    store: &'a MemoryStore,
    fleet: &'a MemFleet,
    then: impl Fn(&Call<'_>) -> Action<'a> + Send + Sync + 'a,
) -> impl Fn(&Call<'_>) -> Action<'a> + Send + Sync + 'a {
    move |call| {
        assert!(
            !call.stages.iter().any(|l| l.as_str() == STAGE_CURRENT),
            "a new version was made AWSCURRENT directly"
        );
        if call.op == Op::MoveStage
            && call.label.is_some_and(|l| l.as_str() == STAGE_CURRENT)
            && let Some(to) = call.to
        {
            let keys = store.keys_of(&secret(), to).expect("the version moved to exists");
            // A copy of the current set (a renewal, a first scheduled
            // rotation with nothing announced) changes no key.
            let copy = store
                .holder(&secret(), STAGE_CURRENT)
                .and_then(|c| store.keys_of(&secret(), &c))
                .is_some_and(|c| c == keys);
            assert!(
                copy || fleet.all_offer(&keys),
                "AWSCURRENT moved to {to} before every node loaded it"
            );
        }
        then(call)
    }
}

/// Runs a rotation to the end after an interruption: `--resume` finishes
/// what a killed run started (with nothing in flight, it converges the
/// nodes to AWSCURRENT); if AWSCURRENT never moved and nothing was in
/// flight, the run was killed before its create took hold, and the
/// rotation starts again.
pub async fn complete(store: &MemoryStore, fleet: &Arc<MemFleet>, original: &VersionId) -> Outcome {
    let watched = Hooked::new(store, watch(store, fleet.as_ref(), |_| Action::Pass));
    let resume = Request {
        phase: hostkeyctl::rotation::Phase::Resume,
        ..Request::default()
    };
    let in_flight = store.holder(&secret(), STAGE_PENDING).is_some();
    let outcome = rotate(&watched, fleet, store, resume)
        .await
        .unwrap_or_else(|e| panic!("resume failed: {e}"));
    if !in_flight && store.holder(&secret(), STAGE_CURRENT).as_ref() == Some(original) {
        assert!(
            fleet.all_serve(&current(store).await.document.keys),
            "the resume did not converge"
        );
        return rotate(&watched, fleet, store, Request::default()).await.unwrap();
    }
    outcome
}

pub fn assert_rotated(store: &MemoryStore, fleet: &MemFleet, original: &VersionId, what: &str) {
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

/// `version` pushed to every node of `fleet` through `dispatcher`, no
/// canary, no next set: what came of it.
pub async fn push_all<S: SecretStore>(
    dispatcher: &MemDispatcher<'_, S>,
    fleet: &MemFleet,
    version: &StoredVersion,
) -> hostkeyctl::rollout::PushOutcome {
    push_version(dispatcher, version, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap()
}

/// Node 0's sshd_config with `extra` after it, then a new set pushed: the
/// install is refused with exit 2 and writes nothing. Returns its error.
pub async fn refused_with_config(store: &MemoryStore, fleet: &MemFleet, extra: &str) -> String {
    let node = &fleet.nodes[0];
    let config = node.ssh_dir.join("sshd_config");
    let text = std::fs::read_to_string(&config).unwrap() + extra;
    std::fs::write(&config, text).unwrap();
    let before = dir_contents(&node.ssh_dir);
    let next = pending_set(store).await;
    let dispatcher = MemDispatcher::new(fleet, store);
    let outcome = push_all(&dispatcher, fleet, &next).await;
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    assert_eq!(inv.response_code, Some(2), "{:?}", outcome.results);
    assert_eq!(dir_contents(&node.ssh_dir), before, "something was written");
    outcome.results[0].error.clone().unwrap_or_default()
}

pub fn dispatcher_invocation<S: SecretStore>(d: &MemDispatcher<'_, S>, id: &str) -> Invocation {
    let rt = tokio::runtime::Handle::current();
    let commands = vec![("x".to_owned(), vec![id.to_owned()])];
    let (states, _) = tokio::task::block_in_place(|| {
        rt.block_on(hostkeyctl::dispatch::Dispatcher::wait(
            d,
            &commands,
            Instant::now(),
            &|_, _| {},
        ))
    })
    .unwrap();
    states[id].clone()
}

/// Stores `document` as a new AWSCURRENT version.
pub async fn make_current(store: &MemoryStore, document: &SecretDocument) -> VersionId {
    store
        .put_version(&secret(), document, &VersionId::random(), &[stage(STAGE_CURRENT)])
        .await
        .unwrap()
}

/// Stores `document` again as a new AWSPENDING version, as a renewal
/// (`sign` during an overlap) does.
pub async fn renew_pending(store: &MemoryStore, document: &SecretDocument) -> VersionId {
    store
        .put_version(&secret(), document, &VersionId::random(), &[stage(STAGE_PENDING)])
        .await
        .unwrap()
}

/// A signed copy of the current set, stored as AWSCURRENT.
pub async fn sign_current(store: &MemoryStore, principals: &[&str], valid_for: u64) -> StoredVersion {
    let ca = hostkeyctl::certificate::CaKey::from(
        hostkeyctl::keyset::HostKey::generate(hostkeyctl::keyset::KeyAlgorithm::Ed25519, 0).unwrap(),
    );
    sign_current_with(store, &ca, principals, valid_for).await
}

/// [`sign_current`] with a given CA.
pub async fn sign_current_with(
    store: &MemoryStore,
    ca: &hostkeyctl::certificate::CaKey,
    principals: &[&str],
    valid_for: u64,
) -> StoredVersion {
    let current = current(store).await;
    let signer = hostkeyctl::certificate::Signer {
        ca: ca.clone(),
        principals: principals
            .iter()
            .map(|p| hostkeyctl::certificate::Principal::parse(p).unwrap())
            .collect(),
        validity: valid_for,
        serial: 1,
        signer: "test".to_owned(),
    };
    let token = VersionId::random();
    let mut document = current.document.clone();
    document.certificates = signer.sign(&document.keys, &token).unwrap();
    let id = store
        .put_version(&secret(), &document, &token, &[stage(STAGE_CURRENT)])
        .await
        .unwrap();
    store.get(&secret(), &VersionSelector::VersionId(id)).await.unwrap()
}

/// Runs the nodes' timer: `hostkeyctl install --secret-id hk` (no version)
/// on every node, as docs/bootstrap.md's unit does. Returns the exit codes.
pub async fn timer(fleet: &MemFleet, store: &MemoryStore) -> Vec<Option<i32>> {
    run_line(fleet, store, "hostkeyctl install --secret-id=hk --quiet")
        .await
        .iter()
        .map(|i| i.response_code)
        .collect()
}

/// Runs a shell command line on every node as the SSM agent would, and
/// returns each node's invocation, in node order.
pub async fn run_line(fleet: &MemFleet, store: &MemoryStore, line: &str) -> Vec<Invocation> {
    let all: Vec<usize> = (0..fleet.nodes.len()).collect();
    run_line_on(fleet, store, line, &all).await
}

/// The nodes' timer on the nodes numbered `nodes` alone (the others' are
/// stopped). Returns their exit codes.
pub async fn timer_on(fleet: &MemFleet, store: &MemoryStore, nodes: &[usize]) -> Vec<Option<i32>> {
    run_line_on(fleet, store, "hostkeyctl install --secret-id=hk --quiet", nodes)
        .await
        .iter()
        .map(|i| i.response_code)
        .collect()
}

/// [`run_line`] on the nodes numbered `nodes`.
pub async fn run_line_on(fleet: &MemFleet, store: &MemoryStore, line: &str, nodes: &[usize]) -> Vec<Invocation> {
    use hostkeyctl::dispatch::{CommandSpec, Dispatcher};
    let dispatcher = MemDispatcher::new(fleet, store);
    let spec = CommandSpec {
        document: hostkeyctl::ssm_document::RUN_SHELL_SCRIPT.to_owned(),
        document_version: None,
        parameters: None,
        command_line: line.to_owned(),
        comment: "test".to_owned(),
        max_concurrency: "100%".to_owned(),
        max_errors: "100%".to_owned(),
        execution_timeout: std::time::Duration::from_secs(60),
    };
    let ids: Vec<String> = nodes
        .iter()
        .map(|i| fleet.nodes[*i].instance.instance_id.clone())
        .collect();
    let sent = dispatcher.send(&spec, &ids).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (states, _) = dispatcher.wait(&sent, deadline, &|_, _| {}).await.unwrap();
    ids.iter().map(|id| states[id].clone()).collect()
}

/// Every node is exactly where the stages say: serves AWSCURRENT, and
/// offers AWSPENDING as extra keys when one is announced (else none).
pub async fn assert_desired(store: &MemoryStore, fleet: &MemFleet, what: &str) {
    let desired = hostkeyctl::store::desired_state(store, &secret()).await.unwrap();
    for node in &fleet.nodes {
        let name = &node.instance.instance_id;
        assert!(
            node.serves(&desired.current.document.keys),
            "{what}: {name} does not serve AWSCURRENT"
        );
        match &desired.next {
            Some(next) => assert!(
                node.offers(&next.document.keys),
                "{what}: {name} does not offer AWSPENDING"
            ),
            None => {
                let leftovers = std::fs::read_dir(&node.ssh_dir)
                    .unwrap()
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("hostkeyctl_next_"))
                    .count();
                assert_eq!(leftovers, 0, "{what}: {name} still offers a dropped next set");
            }
        }
    }
}
