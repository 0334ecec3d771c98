//! Push in memory: waves and the canary, the document trusted by its hash, the pin, a failing node, batches of 50 and polling once per command a round.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hostkeyctl::aws::AwsError;
use hostkeyctl::discovery::TargetSpec;
use hostkeyctl::dispatch::Deployed;
use hostkeyctl::dispatch::{CommandSpec, Dispatcher, Invocation, Pacing, PollStats, Progress, poll};
use hostkeyctl::ids::Program;
use hostkeyctl::rollout::{Push, PushError, PushRequest, install_command_line, push_version};
use hostkeyctl::ssm_document::{DEFAULT_NAME, Kind, ResolveError, Trust, content, sha256_hex};
use hostkeyctl::store::VersionSelector;
use hostkeyctl::testing::MemInvocations;
use hostkeyctl::testing::{MemDispatcher, MemFleet, MemoryStore};

use super::{current, options, pending_set, secret, world};

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

fn targets() -> Vec<TargetSpec> {
    vec!["tag:Role=login".parse().unwrap()]
}

fn program() -> Program {
    Program::parse("hostkeyctl").unwrap()
}

fn request<'a>(
    secret: &'a hostkeyctl::ids::SecretId,
    targets: &'a [TargetSpec],
    document: &'a str,
    program: &'a Program,
) -> PushRequest<'a> {
    PushRequest {
        secret,
        pin: None,
        targets,
        document,
        node_command: program,
        allow_other_clusters: false,
    }
}

/// The plan of a push of the current set to `tag:Role=login` through
/// hostkeyctl's install document, which must be one to send.
async fn planned(
    flow: &Push<'_, MemoryStore, MemFleet, MemDispatcher<'_, MemoryStore>>,
) -> hostkeyctl::rollout::PushPlan {
    let (secret, targets, program) = (secret(), targets(), program());
    flow.plan(&request(&secret, &targets, DEFAULT_NAME, &program))
        .await
        .unwrap()
}

fn push<'a>(
    store: &'a MemoryStore,
    fleet: &'a MemFleet,
    dispatcher: &'a MemDispatcher<'a, MemoryStore>,
) -> Push<'a, MemoryStore, MemFleet, MemDispatcher<'a, MemoryStore>> {
    Push {
        store,
        fleet,
        dispatcher,
    }
}

/// Regression (issue 26): a hostkeyctl-Install with one extra line ran it
/// on every node. The document is trusted by its hash: a changed one is
/// refused before anything is read or sent, and the pinned one is sent at
/// the version that was checked.
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_install_document_is_refused_and_nothing_is_sent() {
    let (store, fleet, _) = world(2).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let (secret, targets, program) = (secret(), targets(), program());
    let ours = content(Kind::Install, &program);
    dispatcher.deploy(DEFAULT_NAME, &ours);
    dispatcher.deploy(DEFAULT_NAME, &ours.replacen("set -eu", "set -eu\nid > /tmp/pwned", 1));
    let flow = push(&store, &fleet, &dispatcher);
    let refused = flow.plan(&request(&secret, &targets, DEFAULT_NAME, &program)).await;
    match &refused {
        Err(PushError::Document(ResolveError::Tampered { version, expected, .. })) => {
            assert_eq!((version.as_str(), expected.as_str()), ("2", sha256_hex(&ours).as_str()));
        }
        other => panic!("{other:?}"),
    }
    assert!(dispatcher.sent.lock().unwrap().is_empty());

    dispatcher.deploy(DEFAULT_NAME, &ours);
    let plan = planned(&flow).await;
    assert_eq!(plan.document.trust, Trust::Pinned);
    assert_eq!(plan.document.version.as_deref(), Some("3"));
    let outcome = flow.run(&plan, &options(0), &|_, _| {}).await.unwrap();
    assert!(outcome.all_ok(), "{:?}", outcome.results);
    assert_eq!(outcome.document, plan.document);
}

/// A document named on purpose goes out as it is, with its hash; where
/// hostkeyctl's own is not deployed, the push is refused: the shell
/// document (root on every node) goes out only when named.
#[tokio::test(flavor = "multi_thread")]
async fn a_custom_document_goes_out_with_its_hash_and_none_deployed_is_refused() {
    let (store, fleet, _) = world(1).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let (secret, targets, program) = (secret(), targets(), program());
    let flow = push(&store, &fleet, &dispatcher);
    let refused = flow.plan(&request(&secret, &targets, DEFAULT_NAME, &program)).await;
    assert!(
        matches!(&refused, Err(PushError::Document(ResolveError::NotDeployed { .. }))),
        "{refused:?}"
    );
    let named = flow
        .plan(&request(&secret, &targets, "AWS-RunShellScript", &program))
        .await
        .unwrap();
    assert_eq!(named.document.trust, Trust::Shell);
    let missing = flow.plan(&request(&secret, &targets, "site-Install", &program)).await;
    assert!(
        matches!(missing, Err(PushError::Document(ResolveError::Missing { .. }))),
        "{missing:?}"
    );
    dispatcher.deploy("site-Install", "{\"site\": true}");
    let custom = flow
        .plan(&request(&secret, &targets, "site-Install", &program))
        .await
        .unwrap();
    assert_eq!(custom.document.trust, Trust::Custom);
    assert_eq!(
        custom.document.sha256.as_deref(),
        Some(sha256_hex("{\"site\": true}").as_str())
    );
}

/// `--version-id`/`--stage` hold push to the stages: a pin on another
/// version than AWSCURRENT is refused, naming both.
#[tokio::test(flavor = "multi_thread")]
async fn a_pin_on_another_version_than_the_stages_is_refused() {
    let (store, fleet, current_id) = world(1).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let (secret, targets, program) = (secret(), targets(), program());
    let next = pending_set(&store).await;
    dispatcher.deploy(DEFAULT_NAME, &content(Kind::Install, &program));
    let flow = push(&store, &fleet, &dispatcher);
    let mut req = request(&secret, &targets, DEFAULT_NAME, &program);
    req.pin = Some(VersionSelector::VersionId(next.version_id.clone()));
    match flow.plan(&req).await {
        Err(PushError::Pinned {
            pinned,
            current,
            next: announced,
            ..
        }) => {
            assert_eq!((pinned, current), (next.version_id.clone(), current_id.clone()));
            assert!(announced.contains(next.version_id.as_str()), "{announced}");
        }
        other => panic!("{other:?}"),
    }
    req.pin = Some(VersionSelector::VersionId(current_id.clone()));
    let plan = flow.plan(&req).await.unwrap();
    assert_eq!(plan.desired.current.version_id, current_id);
    assert_eq!(plan.desired.next.map(|n| n.version_id), Some(next.version_id));
}

/// A node the agent cannot run on is reported with its error and the push
/// exits 3; the others converge.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_node_is_reported_and_the_others_converge() {
    let (store, fleet, _) = world(3).await;
    let next = pending_set(&store).await;
    fleet.nodes[1].faults.lock().unwrap().dispatch_fails = Some("agent offline".to_owned());
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let program = program();
    dispatcher.deploy(DEFAULT_NAME, &content(Kind::Install, &program));
    let flow = push(&store, &fleet, &dispatcher);
    let plan = planned(&flow).await;
    let outcome = flow.run(&plan, &options(0), &|_, _| {}).await.unwrap();
    let ok: Vec<bool> = outcome.results.iter().map(|r| r.ok).collect();
    assert_eq!(ok, [true, false, true]);
    assert_eq!(outcome.results[1].error.as_deref(), Some("agent offline"));
    assert_eq!(outcome.results[1].status, "Failed");
    assert!(fleet.nodes[0].offers(&next.document.keys) && fleet.nodes[2].offers(&next.document.keys));
    assert!(!fleet.nodes[1].offers(&next.document.keys));
    let status = hostkeyctl::exit::ExitStatus::status(&outcome);
    assert_eq!((status, status.code()), (hostkeyctl::exit::Status::Incomplete, 3));
}

/// A canary that installs lets the rest follow, in a second wave.
#[tokio::test(flavor = "multi_thread")]
async fn a_passing_canary_lets_the_rest_follow() {
    let (store, fleet, _) = world(3).await;
    let next = pending_set(&store).await;
    let version = current(&store).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(
        &dispatcher,
        &version,
        Some(&next),
        &fleet.instances(),
        &options(1),
        &|_, _| {},
    )
    .await
    .unwrap();
    assert!(outcome.all_ok(), "{:?}", outcome.results);
    assert_eq!(dispatcher.sent.lock().unwrap().len(), 2, "canary, then the rest");
    assert!(fleet.all_offer(&next.document.keys));
}

/// `push --dry-run`: the plan settles the document, the stages and the
/// nodes and sends nothing; the command line it would send names the
/// version and its fingerprints (never key material), and the next set's
/// when one is announced.
#[tokio::test(flavor = "multi_thread")]
async fn a_plan_names_the_nodes_and_the_command_line_and_sends_nothing() {
    let (store, fleet, _) = world(3).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let program = program();
    dispatcher.deploy(DEFAULT_NAME, &content(Kind::Install, &program));
    let flow = push(&store, &fleet, &dispatcher);
    let plan = planned(&flow).await;
    assert_eq!(plan.instances, fleet.instances());
    assert_eq!(plan.document.trust, Trust::Pinned);
    let version = &plan.desired.current;
    let line = install_command_line(&program, version, None, None).unwrap();
    assert!(line.contains(&format!("--version-id={}", version.version_id)), "{line}");
    for key in version.document.keys.keys() {
        assert!(line.contains(&format!("--expect={}", key.fingerprint())), "{line}");
        let private = key.reveal_private_openssh();
        let body = private.lines().nth(1).unwrap();
        assert!(!line.contains(body), "key material in the command line");
    }
    assert!(plan.desired.next.is_none() && !line.contains("--next-version-id"));

    let next = pending_set(&store).await;
    let plan = planned(&flow).await;
    assert_eq!(
        plan.desired.next.as_ref().map(|n| &n.version_id),
        Some(&next.version_id)
    );
    let line = install_command_line(&program, &plan.desired.current, plan.desired.next.as_ref(), None).unwrap();
    assert!(
        line.contains(&format!("--next-version-id={}", next.version_id)),
        "{line}"
    );
    assert!(dispatcher.sent.lock().unwrap().is_empty(), "a plan sent a command");
}

/// Targets that match no node are refused before anything is sent, with
/// what was asked for.
#[tokio::test(flavor = "multi_thread")]
async fn targets_that_match_nothing_are_refused_and_nothing_is_sent() {
    let (store, fleet, _) = world(2).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let (secret, program) = (secret(), program());
    dispatcher.deploy(DEFAULT_NAME, &content(Kind::Install, &program));
    let flow = push(&store, &fleet, &dispatcher);
    let nowhere: Vec<TargetSpec> = vec!["tag:Role=batch".parse().unwrap()];
    let refused = flow.plan(&request(&secret, &nowhere, DEFAULT_NAME, &program)).await;
    match refused {
        Err(PushError::Discovery(e)) => assert!(e.to_string().contains("Role=batch"), "{e}"),
        other => panic!("{other:?}"),
    }
    let none: Vec<TargetSpec> = vec![];
    let refused = flow.plan(&request(&secret, &none, DEFAULT_NAME, &program)).await;
    assert!(matches!(refused, Err(PushError::Discovery(_))), "{refused:?}");
    assert!(dispatcher.sent.lock().unwrap().is_empty());
}

/// Forwards to a dispatcher and records the size of every command sent
/// and of every wait.
struct Batches<'a, D> {
    inner: &'a D,
    sent: std::sync::Mutex<Vec<usize>>,
    waited: std::sync::Mutex<Vec<usize>>,
}

impl<D: Dispatcher> Dispatcher for Batches<'_, D> {
    async fn send(&self, spec: &CommandSpec, ids: &[String]) -> Result<Vec<(String, Vec<String>)>, AwsError> {
        self.sent.lock().unwrap().push(ids.len());
        self.inner.send(spec, ids).await
    }

    async fn wait(
        &self,
        commands: &[(String, Vec<String>)],
        deadline: Instant,
        progress: Progress<'_>,
    ) -> Result<(BTreeMap<String, Invocation>, PollStats), AwsError> {
        self.waited.lock().unwrap().push(commands.len());
        self.inner.wait(commands, deadline, progress).await
    }

    async fn cancel(&self, command_id: &str) -> Result<(), AwsError> {
        self.inner.cancel(command_id).await
    }

    async fn document(&self, name: &str) -> Result<Option<Deployed>, AwsError> {
        self.inner.document(name).await
    }

    async fn document_content(&self, name: &str, version: &str) -> Result<Option<String>, AwsError> {
        self.inner.document_content(name, version).await
    }
}

/// 120 nodes: three commands of at most 50 instances (SSM's limit), all
/// waited for together, every node reported.
#[tokio::test(flavor = "multi_thread")]
async fn a_push_to_120_nodes_sends_three_commands_and_waits_for_them_together() {
    let (store, _, _) = world(0).await;
    let fleet = MemFleet::new(120, &super::ALGS).unwrap();
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let counting = Batches {
        inner: &dispatcher,
        sent: Default::default(),
        waited: Default::default(),
    };
    let version = current(&store).await;
    let outcome = push_version(&counting, &version, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    assert!(outcome.all_ok(), "{:?}", outcome.results.iter().find(|r| !r.ok));
    assert_eq!(outcome.results.len(), 120);
    assert_eq!(*counting.sent.lock().unwrap(), [50, 50, 20]);
    assert_eq!(
        *counting.waited.lock().unwrap(),
        [3],
        "one wait over the three commands"
    );
    assert!(fleet.all_serve(&version.document.keys));
}

/// Polling reads each unfinished command once a round, never each
/// instance, and stops reading a command once it is done: three commands
/// (50, 50 and 20 instances), one done at the first read, the others at
/// the third, is 1 + 3 + 3 reads, at most 3 a round.
#[tokio::test]
async fn polling_reads_each_unfinished_command_once_a_round() {
    let ids = |c: usize, n: usize| (0..n).map(|i| format!("i-{c:08x}{i:09x}")).collect::<Vec<_>>();
    let commands: Vec<(String, Vec<String>)> = [(1, 50, 1), (2, 50, 3), (3, 20, 3)]
        .iter()
        .map(|&(c, n, _)| (format!("c{c}"), ids(c, n)))
        .collect();
    // SSM as it answers while commands run: each command in progress for
    // its first reads.
    let source = MemInvocations::default();
    for (c, n, reads) in [(1, 50, 1), (2, 50, 3), (3, 20, 3)] {
        source.succeeding(&format!("c{c}"), ids(c, n), reads - 1);
    }
    let pacing = Pacing {
        first_poll: Duration::from_millis(1),
        visibility_grace: Duration::from_secs(30),
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (states, stats) = poll(&source, &commands, deadline, &|_, _| {}, pacing).await.unwrap();
    assert_eq!(states.len(), 120);
    assert!(states.values().all(|i| i.status == "Success"));
    assert_eq!(
        (stats.rounds, stats.list_calls, stats.max_calls_per_round),
        (3, 7, 3),
        "{stats:?}"
    );
}
