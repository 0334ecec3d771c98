//! Scanning, complete and polite: a global concurrency limit, a per-host
//! limit well below sshd's default `MaxStartups` (10), retries with backoff
//! when a connection is dropped before the key, and a timeout per
//! connection, so a node is never reported unreachable because the auditor
//! overloaded it. One [`ScanPolicy::default`] for the audit, a rotation's
//! checks and `status`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Semaphore;

use super::{Answer, Handshake, Hello, Prober, ScanAlgorithm, ScanError, Served, scan_held};
use crate::fingerprint::Fingerprint;
use crate::keyset::fingerprint_of;

/// An endpoint to scan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// What to call it (instance name or id, or the address).
    pub name: String,
    /// Host name or address.
    pub host: String,
    /// Port.
    pub port: u16,
}

/// What a probe returned.
pub type Probe = Result<Fingerprint, ScanError>;

/// How to scan.
#[derive(Clone, Debug)]
pub struct ScanPolicy {
    /// Connections at once, overall.
    pub concurrency: usize,
    /// Connections at once to one host.
    pub per_host: usize,
    /// Timeout per connection.
    pub timeout: Duration,
    /// Attempts per probe when the connection is dropped or times out.
    pub attempts: u32,
    /// Key types asked for.
    pub algorithms: Vec<ScanAlgorithm>,
}

impl ScanPolicy {
    /// Connections at once, overall.
    pub const CONCURRENCY: usize = 32;
    /// Connections at once to one host (sshd starts dropping
    /// unauthenticated connections at 10 by default: MaxStartups 10:30:100).
    pub const PER_HOST: usize = 4;
    /// Seconds per connection.
    pub const TIMEOUT_SECS: u64 = 5;
    /// Attempts per probe when a connection is dropped or times out.
    pub const ATTEMPTS: u32 = 4;

    /// From a command's options (`--concurrency`, `--per-host`,
    /// `--connect-timeout`, `--attempts`; at least one second and one
    /// attempt), asking for `algorithms`.
    pub fn from_options(
        concurrency: usize,
        per_host: usize,
        connect_timeout_secs: u64,
        attempts: u32,
        algorithms: Vec<ScanAlgorithm>,
    ) -> Self {
        ScanPolicy {
            concurrency,
            per_host,
            timeout: Duration::from_secs(connect_timeout_secs.max(1)),
            attempts: attempts.max(1),
            algorithms,
        }
    }
}

impl Default for ScanPolicy {
    /// What the audit, a rotation's checks and `status` use: every key type.
    fn default() -> Self {
        ScanPolicy {
            concurrency: Self::CONCURRENCY,
            per_host: Self::PER_HOST,
            timeout: Duration::from_secs(Self::TIMEOUT_SECS),
            attempts: Self::ATTEMPTS,
            algorithms: ScanAlgorithm::ALL.to_vec(),
        }
    }
}

/// The connections a scan opened to one endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    /// TCP connections made (what the server saw, retries included).
    pub connections: usize,
    /// Handshakes asked again after a drop or a timeout.
    pub retries: usize,
}

/// The scanner with its limits, over a [`Prober`].
pub struct Scanner<P> {
    prober: P,
    policy: ScanPolicy,
    global: Arc<Semaphore>,
    hosts: std::sync::Mutex<BTreeMap<String, Arc<Semaphore>>>,
    usage: std::sync::Mutex<BTreeMap<(String, u16), Usage>>,
    hellos: std::sync::Mutex<BTreeMap<(String, u16), Vec<Hello>>>,
}

impl<P: Prober> Scanner<P> {
    /// A scanner with `policy`.
    pub fn new(prober: P, policy: ScanPolicy) -> Self {
        Scanner {
            prober,
            global: Arc::new(Semaphore::new(policy.concurrency.max(1))),
            hosts: std::sync::Mutex::new(BTreeMap::new()),
            usage: std::sync::Mutex::new(BTreeMap::new()),
            hellos: std::sync::Mutex::new(BTreeMap::new()),
            policy,
        }
    }

    fn host_limit(&self, host: &str) -> Arc<Semaphore> {
        let mut hosts = self.hosts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        hosts
            .entry(host.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.policy.per_host.max(1))))
            .clone()
    }

    /// The connections opened to `endpoint` so far.
    pub fn usage(&self, endpoint: &Endpoint) -> Usage {
        let usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        usage
            .get(&(endpoint.host.clone(), endpoint.port))
            .copied()
            .unwrap_or_default()
    }

    /// The distinct banners and KEXINITs `endpoint` answered with so far
    /// (through a load balancer, one per kind of backend reached): what
    /// the audit judges clients' messages by, at no extra connection.
    pub fn hellos(&self, endpoint: &Endpoint) -> Vec<Hello> {
        let hellos = self.hellos.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        hellos
            .get(&(endpoint.host.clone(), endpoint.port))
            .cloned()
            .unwrap_or_default()
    }

    fn count(&self, endpoint: &Endpoint, answer: &Answer, retry: bool) {
        if let Some(hello) = &answer.hello {
            let mut hellos = self.hellos.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let seen = hellos.entry((endpoint.host.clone(), endpoint.port)).or_default();
            if !seen.contains(hello) {
                seen.push(hello.clone());
            }
        }
        let mut usage = self.usage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = usage.entry((endpoint.host.clone(), endpoint.port)).or_default();
        entry.connections += usize::from(answer.connected);
        entry.retries += usize::from(retry);
    }

    /// One handshake under both limits (and the endpoint's budget, when
    /// the prober is [`crate::scan::pacing::Paced`]), retried while it
    /// fails in a way that may pass (dropped, timed out); never after a
    /// refusal or a penalty, which asking again only prolongs.
    async fn ask(&self, endpoint: &Endpoint, algorithm: ScanAlgorithm, certificates: bool) -> Answer {
        let host_limit = self.host_limit(&endpoint.host);
        let mut delay = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let answer = {
                let _g = self.global.acquire().await;
                let _h = host_limit.acquire().await;
                let to = Handshake {
                    certificates,
                    ..Handshake::new(&endpoint.host, endpoint.port, algorithm, self.policy.timeout)
                };
                self.prober.handshake(to).await
            };
            self.count(endpoint, &answer, attempt > 1);
            match &answer.served {
                Err(e) if e.is_transient() && attempt < self.policy.attempts => {
                    let jitter = Duration::from_millis(rand::random::<u64>() % 100);
                    tokio::time::sleep(delay + jitter).await;
                    delay = (delay * 2).min(Duration::from_secs(3));
                }
                _ => return answer,
            }
        }
    }

    /// One handshake with each endpoint for `algorithm`, concurrently within
    /// limits: what each served and said before the key exchange (its
    /// banner), in `endpoints`' order. What the promotion gate reads
    /// (`rotation::gate`).
    pub async fn greet_nodes(self: &Arc<Self>, endpoints: &[Endpoint], algorithm: ScanAlgorithm) -> Vec<Answer> {
        self.ask_each(endpoints.iter().cloned(), algorithm, false).await
    }

    /// Each of `endpoints` asked at once, a task each (within limits), the
    /// answers in order; a task that failed is an answer that says so.
    async fn ask_each(
        self: &Arc<Self>,
        endpoints: impl IntoIterator<Item = Endpoint>,
        algorithm: ScanAlgorithm,
        certificates: bool,
    ) -> Vec<Answer> {
        let tasks: Vec<_> = endpoints
            .into_iter()
            .map(|endpoint| {
                let me = self.clone();
                tokio::spawn(async move { me.ask(&endpoint, algorithm, certificates).await })
            })
            .collect();
        let mut out = Vec::with_capacity(tasks.len());
        for t in tasks {
            out.push(
                t.await
                    .unwrap_or_else(|e| Answer::unreached(ScanError::Other(format!("scan task failed: {e}")))),
            );
        }
        out
    }

    /// Probes every endpoint for every key type, concurrently within limits.
    pub async fn scan_nodes(self: &Arc<Self>, endpoints: &[Endpoint]) -> Vec<BTreeMap<ScanAlgorithm, Probe>> {
        self.scan_nodes_served(endpoints, false)
            .await
            .into_iter()
            .map(|m| m.into_iter().map(|(a, p)| (a, to_probe(p))).collect())
            .collect()
    }

    /// [`Scanner::scan_nodes`], keeping what was served (certificates, when
    /// `certificates` asks for them). Each node is asked only for the types
    /// its first KEXINIT lists ([`scan_held`]): three connections for a
    /// node with three keys.
    pub async fn scan_nodes_served(
        self: &Arc<Self>,
        endpoints: &[Endpoint],
        certificates: bool,
    ) -> Vec<BTreeMap<ScanAlgorithm, ServedProbe>> {
        let tasks: Vec<_> = endpoints
            .iter()
            .map(|endpoint| {
                let me = self.clone();
                let endpoint = endpoint.clone();
                tokio::spawn(async move {
                    let algorithms = me.policy.algorithms.clone();
                    scan_held(&algorithms, |a| me.ask(&endpoint, a, certificates)).await
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap_or_else(|e| {
                self.policy
                    .algorithms
                    .iter()
                    .map(|a| (*a, Err(ScanError::Other(format!("scan task failed: {e}")))))
                    .collect()
            }));
        }
        out
    }

    /// `samples` probes per key type through the load balancer: first of
    /// the policy's first type, whose answers list the types the backends
    /// reached hold; then of those types only (of every type, if no answer
    /// listed any).
    pub async fn scan_lb(
        self: &Arc<Self>,
        lb: &Endpoint,
        samples: usize,
        certificates: bool,
        backends: usize,
    ) -> BTreeMap<ScanAlgorithm, Vec<ServedProbe>> {
        let mut out: BTreeMap<ScanAlgorithm, Vec<ServedProbe>> = BTreeMap::new();
        let Some((&first, rest)) = self.policy.algorithms.split_first() else {
            return out;
        };
        self.prober.spread(&lb.host, lb.port, backends);
        // The first sample alone: its banner says whether the backends
        // penalize, before the others spend anything.
        let mut answers = Vec::new();
        if samples > 0 {
            answers.push(self.ask(lb, first, certificates).await);
        }
        if let (Some(budget), Some(hello)) = (
            self.prober.budget(&lb.host, lb.port),
            answers.first().and_then(|a| a.hello.as_ref()),
        ) {
            let total = samples * hello.key_types().len().max(1);
            tracing::warn!(
                "{} ({}) may penalize unauthenticated connections (PerSourcePenalties): {total} samples through {}:{} paced at {:.0}/s after a burst, about {} s",
                crate::escape::escape(&hello.banner),
                if backends > 1 {
                    format!("{backends} backends")
                } else {
                    "one backend".to_owned()
                },
                crate::escape::escape(&lb.host),
                lb.port,
                budget.rate(),
                budget
                    .time_for(total.saturating_sub(1), crate::scan::pacing::unix_now())
                    .as_secs()
            );
        }
        answers.extend(self.sample(lb, first, samples.saturating_sub(1), certificates).await);
        let mut held: Option<std::collections::BTreeSet<ScanAlgorithm>> = None;
        for hello in answers.iter().filter_map(|a| a.hello.as_ref()) {
            held.get_or_insert_with(Default::default).extend(hello.key_types());
        }
        out.insert(first, answers.into_iter().map(|a| a.served).collect());
        for &algorithm in rest {
            let probes = match &held {
                Some(held) if !held.contains(&algorithm) => {
                    vec![Err(ScanError::NotOffered(algorithm.key_type().to_owned())); samples]
                }
                _ => self
                    .sample(lb, algorithm, samples, certificates)
                    .await
                    .into_iter()
                    .map(|a| a.served)
                    .collect(),
            };
            out.insert(algorithm, probes);
        }
        out
    }

    /// `samples` handshakes for one type through `lb`, concurrently within
    /// limits.
    async fn sample(
        self: &Arc<Self>,
        lb: &Endpoint,
        algorithm: ScanAlgorithm,
        samples: usize,
        certificates: bool,
    ) -> Vec<Answer> {
        self.ask_each(std::iter::repeat_n(lb.clone(), samples), algorithm, certificates)
            .await
    }
}

/// What a probe that may have asked for a certificate returned.
pub type ServedProbe = Result<Served, ScanError>;

/// The fingerprint part of a served probe.
pub fn to_probe(p: ServedProbe) -> Probe {
    p.map(|s| fingerprint_of(&s.key()))
}
