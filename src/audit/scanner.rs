//! Scanning, complete and polite: a global concurrency limit, a per-host
//! limit well below sshd's default `MaxStartups` (10), retries with backoff
//! when a connection is dropped before the key, and a timeout per
//! connection, so a node is never reported unreachable because the auditor
//! overloaded it. One [`ScanPolicy::default`] for the audit, a rotation's
//! checks and `status`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::judge::{Endpoint, Probe};
use crate::keyset::fingerprint_of;
use crate::scan::{Prober, ScanAlgorithm, ScanError, Served};

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

/// The scanner with its limits, over a [`Prober`].
pub struct Scanner<P> {
    prober: P,
    policy: ScanPolicy,
    global: Arc<Semaphore>,
    hosts: std::sync::Mutex<BTreeMap<String, Arc<Semaphore>>>,
}

impl<P: Prober> Scanner<P> {
    /// A scanner with `policy`.
    pub fn new(prober: P, policy: ScanPolicy) -> Self {
        Scanner {
            prober,
            global: Arc::new(Semaphore::new(policy.concurrency.max(1))),
            hosts: std::sync::Mutex::new(BTreeMap::new()),
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

    /// One probe under both limits, with retries for transient failures.
    pub async fn probe(&self, endpoint: &Endpoint, algorithm: ScanAlgorithm) -> Probe {
        self.probe_served(endpoint, algorithm, false)
            .await
            .map(|s| fingerprint_of(&s.key()))
    }

    /// [`Scanner::probe`], asking for a certificate first when
    /// `certificates` is set.
    pub async fn probe_served(&self, endpoint: &Endpoint, algorithm: ScanAlgorithm, certificates: bool) -> ServedProbe {
        let host_limit = self.host_limit(&endpoint.host);
        let mut delay = Duration::from_millis(100);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = {
                let _g = self.global.acquire().await;
                let _h = host_limit.acquire().await;
                let (host, port, timeout) = (&endpoint.host, endpoint.port, self.policy.timeout);
                if certificates {
                    self.prober.probe_certificate(host, port, algorithm, timeout).await
                } else {
                    self.prober.probe(host, port, algorithm, timeout).await.map(Served::Key)
                }
            };
            match result {
                Err(e) if e.is_transient() && attempt < self.policy.attempts => {
                    let jitter = Duration::from_millis(rand::random::<u64>() % 100);
                    tokio::time::sleep(delay + jitter).await;
                    delay = (delay * 2).min(Duration::from_secs(3));
                }
                other => return other,
            }
        }
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
    /// `certificates` asks for them).
    pub async fn scan_nodes_served(
        self: &Arc<Self>,
        endpoints: &[Endpoint],
        certificates: bool,
    ) -> Vec<BTreeMap<ScanAlgorithm, ServedProbe>> {
        let mut tasks = Vec::new();
        for endpoint in endpoints {
            for &algorithm in &self.policy.algorithms {
                let me = self.clone();
                let endpoint = endpoint.clone();
                tasks.push(tokio::spawn(async move {
                    me.probe_served(&endpoint, algorithm, certificates).await
                }));
            }
        }
        let mut out = Vec::new();
        let mut results = Vec::new();
        for t in tasks {
            results.push(
                t.await
                    .unwrap_or_else(|e| Err(ScanError::Other(format!("scan task failed: {e}")))),
            );
        }
        let per = self.policy.algorithms.len();
        for chunk in results.chunks(per.max(1)) {
            out.push(
                self.policy
                    .algorithms
                    .iter()
                    .copied()
                    .zip(chunk.iter().cloned())
                    .collect(),
            );
        }
        out
    }

    /// `samples` probes per key type through the load balancer.
    pub async fn scan_lb(
        self: &Arc<Self>,
        lb: &Endpoint,
        samples: usize,
        certificates: bool,
    ) -> BTreeMap<ScanAlgorithm, Vec<ServedProbe>> {
        let mut tasks = Vec::new();
        for &algorithm in &self.policy.algorithms {
            for _ in 0..samples {
                let me = self.clone();
                let lb = lb.clone();
                tasks.push((
                    algorithm,
                    tokio::spawn(async move { me.probe_served(&lb, algorithm, certificates).await }),
                ));
            }
        }
        let mut out: BTreeMap<ScanAlgorithm, Vec<ServedProbe>> = BTreeMap::new();
        for (algorithm, t) in tasks {
            let r = t
                .await
                .unwrap_or_else(|e| Err(ScanError::Other(format!("scan task failed: {e}"))));
            out.entry(algorithm).or_default().push(r);
        }
        out
    }
}

/// What a probe that may have asked for a certificate returned.
pub type ServedProbe = Result<Served, ScanError>;

/// The fingerprint part of a served probe.
pub fn to_probe(p: ServedProbe) -> Probe {
    p.map(|s| fingerprint_of(&s.key()))
}
