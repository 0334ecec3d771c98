//! The rotation protocol against a model: random sequences of scheduled
//! steps (with Secrets Manager's staging, retries and crashes at every
//! store call), events that are no rotation (forged tokens: AWSPREVIOUS,
//! deprecated, random, another fleet's versions, a manual rotation's),
//! manual `rotate --pull` runs (overlap, finish, abort, rollback), nodes'
//! timers that run or stop, and clock jumps. After every event, and at
//! every move of AWSCURRENT, the invariants:
//!
//! 1. AWSCURRENT moves to other keys only when they have been announced
//!    (labelled AWSPENDING or HOSTKEYCTL_NEXT, without a break) for the
//!    minimum overlap, and every node serves them (as its extra set);
//! 2. no call names another fleet's secret;
//! 3. no key of a set a node may serve (AWSCURRENT, AWSPENDING,
//!    HOSTKEYCTL_NEXT) is revoked;
//! 4. the stages stay resumable: one AWSCURRENT, and after each sequence a
//!    clean `--abort`, a first rotation with nothing announced (it
//!    completes, keeps AWSCURRENT's keys and announces the next; in every
//!    fourth sequence), and one
//!    scheduled rotation a day after an announcement promote that
//!    announcement.
//!
//! `HOSTKEYCTL_MODEL_SEQUENCES` sets how many sequences (10,000 in an
//! optimised build, what `make test` runs; 300 in a debug build);
//! `HOSTKEYCTL_MODEL_SEED=N` replays the one sequence a failure names.

mod resume;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use super::{options, secret, sign_current_with};
use hostkeyctl::discovery::Instance;
use hostkeyctl::ids::{SecretId, VersionId};
use hostkeyctl::keyset::{HostKey, KeyAlgorithm, KeySet};
use hostkeyctl::rotation::{FleetMode, Gate, LambdaStep, MinOverlap, Report, Request, Rotation};
use hostkeyctl::scan::{Answer, Handshake, Hello, Prober, ScanAlgorithm, ScanError, Served};
use hostkeyctl::store::{STAGE_CURRENT, STAGE_NEXT, STAGE_PENDING, STAGE_PREVIOUS, SecretStore, servable};
use hostkeyctl::testing::{Action, Call, Fault, Hooked, MemDispatcher, MemFleet, MemoryStore, Op};

const ALGS: [KeyAlgorithm; 1] = [KeyAlgorithm::Ed25519];
const NODES: usize = 3;
const DAY: i64 = 86_400;
/// The minimum overlap with no schedule (`MinOverlap::Auto`).
const MIN_OVERLAP: i64 = DAY;
const STEPS: [LambdaStep; 4] = [
    LambdaStep::CreateSecret,
    LambdaStep::SetSecret,
    LambdaStep::TestSecret,
    LambdaStep::FinishSecret,
];

/// A set of keys, as the model names it.
type Keys = Vec<String>;

fn ident(keys: &KeySet) -> Keys {
    keys.keys().map(|k| k.fingerprint().to_string()).collect()
}

/// A login node: what its sshd serves, and whether its timer runs.
struct Node {
    address: String,
    current: KeySet,
    next: Option<KeySet>,
    timer: bool,
}

/// The nodes, answering handshakes as sshd does: the first key of the
/// type, and the extra set's word in the banner.
#[derive(Default)]
struct Nodes(Mutex<Vec<Node>>);

impl Nodes {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Node>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Prober for Nodes {
    async fn handshake(&self, to: Handshake<'_>) -> Answer {
        let (host, algorithm) = (to.host, to.algorithm);
        let nodes = self.lock();
        let Some(node) = nodes.iter().find(|n| n.address == host) else {
            return Answer::unreached(ScanError::Refused);
        };
        let mut banner = "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u7".to_owned();
        if let Some(next) = &node.next {
            banner.push(' ');
            banner.push_str(&next.next_marker());
        }
        let key = node
            .current
            .keys()
            .find(|k| ScanAlgorithm::for_managed(k.algorithm()) == algorithm)
            .map(|k| k.public_key().clone());
        Answer {
            served: key
                .map(Served::Key)
                .ok_or(ScanError::NotOffered("no such key".to_owned())),
            hello: Some(Hello {
                banner,
                host_key_algorithms: vec!["ssh-ed25519".to_owned()],
                kex_algorithms: vec!["sntrup761x25519-sha512@openssh.com".to_owned()],
            }),
            connected: true,
        }
    }
}

/// When each set the stages name began to be named without a break.
#[derive(Default)]
struct Ghost(Mutex<BTreeMap<Keys, i64>>);

/// One sequence's world.
struct World {
    store: MemoryStore,
    other: SecretId,
    ca: hostkeyctl::certificate::CaKey,
    nodes: Arc<Nodes>,
    instances: Vec<Instance>,
    empty: Arc<MemFleet>,
    ghost: Ghost,
    violations: Mutex<Vec<String>>,
    /// Moves of AWSCURRENT to other keys (the events exercise the gate).
    promotions: Mutex<usize>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl World {
    async fn new(empty: Arc<MemFleet>) -> Self {
        let store = MemoryStore::new();
        let ca = hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
        for name in ["hk", "other"] {
            super::new_secret(&store, &SecretId::parse(name).unwrap(), &ALGS).await;
        }
        let signed = sign_current_with(&store, &ca, &["login.test"], 365 * 86_400).await;
        let nodes = (0..NODES)
            .map(|i| Node {
                address: format!("127.201.0.{}", 11 + i),
                current: signed.document.keys.clone(),
                next: None,
                timer: true,
            })
            .collect::<Vec<_>>();
        let instances = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| Instance {
                instance_id: format!("i-{:017x}", i + 1),
                private_ip: Some(n.address.clone()),
                name: Some(format!("node-{i}")),
                clusters: Vec::new(),
            })
            .collect();
        let world = World {
            store,
            other: SecretId::parse("other").unwrap(),
            ca,
            nodes: Arc::new(Nodes(Mutex::new(nodes))),
            instances,
            empty,
            ghost: Ghost::default(),
            violations: Mutex::new(Vec::new()),
            promotions: Mutex::new(0),
        };
        world.update_ghost();
        world
    }

    fn keys_at(&self, label: &str) -> Option<KeySet> {
        let v = self.store.holder(&secret(), label)?;
        self.store.keys_of(&secret(), &v)
    }

    /// Records which sets the stages name now (invariant 1's clock).
    fn update_ghost(&self) {
        let named: Vec<Keys> = [STAGE_CURRENT, STAGE_PENDING, STAGE_NEXT]
            .into_iter()
            .filter_map(|l| self.keys_at(l))
            .map(|k| ident(&k))
            .collect();
        let now = self.store.now();
        let mut ghost = lock(&self.ghost.0);
        ghost.retain(|k, _| named.contains(k));
        for k in named {
            ghost.entry(k).or_insert(now);
        }
    }

    fn violation(&self, what: String) {
        lock(&self.violations).push(what);
    }

    /// Invariant 1, at a move of AWSCURRENT to `to`.
    fn check_promotion(&self, to: &VersionId) {
        let Some(keys) = self.store.keys_of(&secret(), to) else {
            return;
        };
        let Some(current) = self.keys_at(STAGE_CURRENT) else {
            return;
        };
        if ident(&keys) == ident(&current) {
            return;
        }
        let now = self.store.now();
        *lock(&self.promotions) += 1;
        match lock(&self.ghost.0).get(&ident(&keys)) {
            None => self.violation(format!("AWSCURRENT moved to {to}, a set never announced")),
            Some(since) if now - since < MIN_OVERLAP => self.violation(format!(
                "AWSCURRENT moved to {to}, announced {} s before (less than the minimum overlap)",
                now - since
            )),
            Some(_) => {}
        }
        for (i, node) in self.nodes.lock().iter().enumerate() {
            let serves = node.next.as_ref().is_some_and(|n| ident(n) == ident(&keys));
            if !serves {
                self.violation(format!("AWSCURRENT moved to {to} while node {i} did not serve it"));
            }
        }
    }

    /// The hook of every call: invariant 1 at AWSCURRENT's moves, and the
    /// fault this event injects.
    fn hook<'a>(&'a self, fault: Option<(usize, Fault)>) -> impl Fn(&Call<'_>) -> Action<'a> + Send + Sync + 'a {
        move |call| {
            if call.op == Op::MoveStage
                && call.label.is_some_and(|l| l.as_str() == STAGE_CURRENT)
                && let Some(to) = call.to
            {
                self.check_promotion(to);
            }
            if call.stages.iter().any(|l| l.as_str() == STAGE_CURRENT) {
                self.violation("a version was made AWSCURRENT directly".to_owned());
            }
            match fault {
                Some((at, f)) if call.total == at => Action::Fault(f),
                _ => Action::Pass,
            }
        }
    }

    /// Each node whose timer runs installs what the stages say.
    async fn timers(&self) {
        let Ok(servable) = servable(&self.store, &secret()).await else {
            return;
        };
        let (current, next) = servable.split();
        for node in self.nodes.lock().iter_mut().filter(|n| n.timer) {
            node.current = current.document.keys.clone();
            node.next = next.as_ref().map(|n| n.document.keys.clone());
        }
    }

    /// Invariants 2 to 4 after an event.
    async fn check(&self, hooked: &Hooked<'_, MemoryStore>) {
        if hooked.secrets().iter().any(|s| s.as_str() != "hk") {
            self.violation(format!("a call named another secret: {:?}", hooked.secrets()));
        }
        let stages = self.store.stages(&secret());
        let currents = stages
            .iter()
            .filter(|(_, l)| l.iter().any(|l| l == STAGE_CURRENT))
            .count();
        if currents != 1 {
            self.violation(format!("{currents} versions are AWSCURRENT"));
        }
        let live: Vec<String> = [STAGE_CURRENT, STAGE_PENDING, STAGE_NEXT]
            .into_iter()
            .filter_map(|l| self.keys_at(l))
            .flat_map(|k| ident(&k))
            .collect();
        match hostkeyctl::revocation::retired(&self.store, &secret(), hostkeyctl::certificate::now_unix()).await {
            Ok(retired) => {
                for r in retired.iter().filter(|r| live.contains(&r.fingerprint.to_string())) {
                    self.violation(format!("{} is revoked, and a node may serve it", r.fingerprint));
                }
            }
            Err(e) => self.violation(format!("the revocation could not be listed: {e}")),
        }
        self.update_ghost();
    }

    fn rotation<'r, 'w: 'r>(
        &'w self,
        store: &'r Hooked<'w, MemoryStore>,
        dispatcher: &'r MemDispatcher<'w, MemoryStore>,
        push: &'r hostkeyctl::rollout::PushOptions,
    ) -> Rotation<'r, Hooked<'w, MemoryStore>, MemDispatcher<'w, MemoryStore>, Nodes> {
        Rotation {
            store,
            dispatcher,
            prober: self.nodes.clone(),
            secret: secret_ref(),
            instances: &self.instances,
            push,
            port: 22,
            progress: &|_, _| {},
            say: &|_| {},
            ca: Some(&self.ca),
            gate: Gate {
                min_overlap: MinOverlap::Auto,
                trust_timers: false,
                now: self.store.now(),
                retire_for: std::time::Duration::from_secs(3_600),
            },
        }
    }
}

fn secret_ref() -> &'static SecretId {
    static SECRET: std::sync::OnceLock<SecretId> = std::sync::OnceLock::new();
    SECRET.get_or_init(secret)
}

/// A token a forged event names.
fn forged_token(world: &World, rng: &mut Xoshiro256PlusPlus) -> VersionId {
    let ours = world.store.stages(&secret());
    let theirs = world.store.stages(&world.other);
    let pick = |list: &[(VersionId, Vec<String>)], rng: &mut Xoshiro256PlusPlus| {
        (!list.is_empty()).then(|| list[rng.random_range(0..list.len())].0.clone())
    };
    let labelled = |label: &str| {
        ours.iter()
            .find(|(_, l)| l.iter().any(|x| x == label))
            .map(|(v, _)| v.clone())
    };
    let deprecated: Vec<_> = ours.iter().filter(|(_, l)| l.is_empty()).cloned().collect();
    match rng.random_range(0..5) {
        0 => labelled(STAGE_PREVIOUS),
        1 => pick(&deprecated, rng),
        2 => pick(&theirs, rng),
        3 => labelled(STAGE_PENDING),
        _ => None,
    }
    .unwrap_or_else(VersionId::random)
}

/// A scheduled rotation: Secrets Manager's staging, then the steps; a
/// failed step is retried once, or the rest skipped.
async fn scheduled_event<S: SecretStore, D: hostkeyctl::dispatch::Dispatcher>(
    world: &World,
    rotation: &Rotation<'_, S, D, Nodes>,
    rng: &mut Xoshiro256PlusPlus,
) -> String {
    let token = VersionId::random();
    let staged = world.store.stage_rotation(&secret(), &token, false);
    let mut done = vec![format!("staged {}", staged.is_ok())];
    if staged.is_ok() {
        for s in STEPS {
            let mut outcome = rotation.scheduled_step(s, &token, FleetMode::Pull).await;
            if outcome.is_err() && rng.random_bool(0.5) {
                outcome = rotation.scheduled_step(s, &token, FleetMode::Pull).await;
            }
            done.push(format!("{s} {}", if outcome.is_ok() { "ok" } else { "failed" }));
            if outcome.is_err() {
                break;
            }
        }
    }
    format!("scheduled: {}", done.join(", "))
}

/// One random event.
async fn event(world: &World, rng: &mut Xoshiro256PlusPlus, log: &mut Vec<String>) {
    let fault = rng.random_bool(0.3).then(|| {
        (
            rng.random_range(1..40),
            if rng.random_bool(0.5) {
                Fault::Fail
            } else {
                Fault::CrashAfter
            },
        )
    });
    let hooked = Hooked::new(&world.store, world.hook(fault));
    let dispatcher = MemDispatcher::new(&world.empty, &world.store);
    let push = options(0);
    let rotation = world.rotation(&hooked, &dispatcher, &push);
    let pull = Some(Duration::ZERO);
    let kind = rng.random_range(0..14);
    let what = match kind {
        0..=2 => {
            world.timers().await;
            "timers".to_owned()
        }
        3 => {
            let i = rng.random_range(0..NODES);
            let mut nodes = world.nodes.lock();
            nodes[i].timer = !nodes[i].timer;
            format!("node {i}'s timer {}", if nodes[i].timer { "on" } else { "off" })
        }
        4 | 5 => {
            let hours = [1, 12, 25, 24 * 30][rng.random_range(0..4)];
            world.store.advance(hours * 3600);
            format!("{hours} h pass")
        }
        6 => format!(
            "announce: {:?}",
            rotation
                .announce_after(&super::current(&world.store).await, FleetMode::Push)
                .await
                .map(|_| ())
        ),
        7..=9 => scheduled_event(world, &rotation, rng).await,
        10 if rng.random_bool(0.25) => {
            // An event for another fleet's secret, handled as the function
            // handles one: whose secret first, then the step on the
            // secret the event names (one it may act on).
            let token = forged_token(world, rng);
            let named = world.other.clone();
            match hostkeyctl::rotation::check_event_secret(secret_ref(), named.as_str()) {
                Err(_) => "an event for another secret: refused".to_owned(),
                Ok(()) => {
                    let mut theirs = world.rotation(&hooked, &dispatcher, &push);
                    theirs.secret = &named;
                    let outcome = theirs
                        .scheduled_step(LambdaStep::FinishSecret, &token, FleetMode::Pull)
                        .await;
                    format!("an event for another secret: acted on ({})", outcome.is_ok())
                }
            }
        }
        10 => {
            let token = forged_token(world, rng);
            let s = STEPS[rng.random_range(0..4)];
            let outcome = rotation.scheduled_step(s, &token, FleetMode::Pull).await;
            format!("forged {s} {token}: {}", if outcome.is_ok() { "ok" } else { "refused" })
        }
        _ => {
            let request = match rng.random_range(0..4) {
                0 => Request {
                    phase: hostkeyctl::rotation::Phase::Overlap { resume: false },
                    pull,
                    ..Request::default()
                },
                1 => Request {
                    phase: hostkeyctl::rotation::Phase::Finish,
                    pull,
                    ..Request::default()
                },
                2 => Request {
                    phase: hostkeyctl::rotation::Phase::Abort,
                    pull,
                    ..Request::default()
                },
                _ => Request {
                    phase: hostkeyctl::rotation::Phase::Rollback { force: false },
                    pull,
                    ..Request::default()
                },
            };
            let mut report = Report::new(secret());
            let outcome = rotation.run(request, &mut report).await;
            format!(
                "rotate {request:?}: {:?}",
                outcome.map_err(|e| e.to_string().lines().next().unwrap_or_default().to_owned())
            )
        }
    };
    log.push(format!("{what} (fault {fault:?})"));
    world.check(&hooked).await;
}

/// One sequence: the promotions its random events made, or what broke.
async fn sequence(seed: u64, empty: Arc<MemFleet>) -> Result<usize, String> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let world = World::new(empty).await;
    let mut log = Vec::new();
    let events = rng.random_range(8..24);
    for _ in 0..events {
        event(&world, &mut rng, &mut log).await;
        if !lock(&world.violations).is_empty() {
            break;
        }
    }
    let promotions = *lock(&world.promotions);
    if lock(&world.violations).is_empty()
        && let Err(e) = resume::resumable(&world, seed.is_multiple_of(4)).await
    {
        world.violation(format!("not resumable: {e}"));
    }
    let violations = lock(&world.violations).clone();
    if violations.is_empty() {
        return Ok(promotions);
    }
    Err(format!(
        "seed {seed} (replay: HOSTKEYCTL_MODEL_SEED={seed}): {}\n  events:\n    {}",
        violations.join("; "),
        log.join("\n    ")
    ))
}

/// `part` of `parts` of the sequences (seeds split into ranges), so the
/// optimised run's 10,000 spread over the test threads.
async fn sequences(part: u64, parts: u64) {
    let empty = Arc::new(MemFleet::new(0, &ALGS).unwrap());
    if let Some(seed) = std::env::var("HOSTKEYCTL_MODEL_SEED").ok().and_then(|s| s.parse().ok()) {
        if part == 0 {
            sequence(seed, empty).await.unwrap();
        }
        return;
    }
    let default = if cfg!(debug_assertions) { 300 } else { 10_000 };
    let count: u64 = std::env::var("HOSTKEYCTL_MODEL_SEQUENCES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    let base: u64 = 0x5eed_0000;
    let range = (count * part / parts)..(count * (part + 1) / parts);
    let mine = range.end - range.start;
    let mut promoted = 0u64;
    for n in range {
        match sequence(base + n, empty.clone()).await {
            Ok(promotions) => promoted += u64::from(promotions > 0),
            Err(failure) => panic!("{failure}"),
        }
    }
    // The random events themselves promote in a good share of sequences
    // (each also ends with one), or the invariants held vacuously.
    eprintln!("{promoted} of {mine} sequences promoted a set in their random events");
    assert!(
        promoted * 10 >= mine,
        "only {promoted} of {mine} sequences promoted a set"
    );
}

/// The invariants hold over every sequence (module documentation), in
/// four parts.
#[tokio::test(flavor = "multi_thread")]
async fn the_rotation_protocol_keeps_its_invariants_over_random_sequences_1_of_4() {
    sequences(0, 4).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rotation_protocol_keeps_its_invariants_over_random_sequences_2_of_4() {
    sequences(1, 4).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rotation_protocol_keeps_its_invariants_over_random_sequences_3_of_4() {
    sequences(2, 4).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rotation_protocol_keeps_its_invariants_over_random_sequences_4_of_4() {
    sequences(3, 4).await;
}
