//! The connection budget for servers that penalize unauthenticated
//! connections: OpenSSH 9.8 and later, where PerSourcePenalties is on by
//! default. Each connection that ends unauthenticated (every handshake of a
//! scan) costs its source 1 s at the server; the server forgives 1 s per
//! second and refuses the source once more than 15 s is outstanding. The
//! scanner keeps what it owes each such server at most [`BURST`]
//! connections (a third below that threshold, for the rest of what the
//! source does), and once that is spent goes on at [`RATE`] per second.
//! Through a load balancer, whose samples reach K backends, each from the
//! balancer's own addresses, K times both (`docs/audit.md` gives the
//! arithmetic). One budget per endpoint and scanner: what several runs, or
//! several scans of one run, owe together is not yet added up.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Connections a server may be owed at once (its `min` is 15 s of 1 s each).
pub const BURST: f64 = 10.0;
/// Connections a server forgives per second.
pub const RATE: f64 = 1.0;

/// What one endpoint is owed, and how fast it forgives.
#[derive(Clone, Debug)]
pub struct Budget {
    owed: f64,
    at: Instant,
    burst: f64,
    rate: f64,
}

impl Budget {
    /// A budget for an endpoint that spreads connections over `backends`
    /// servers (1 for a node), owed `owed` connections already.
    pub fn new(backends: usize, owed: usize, now: Instant) -> Self {
        let k = backends.max(1) as f64;
        Budget {
            owed: owed as f64,
            at: now,
            burst: BURST * k,
            rate: RATE * k,
        }
    }

    fn settle(&mut self, now: Instant) {
        let forgiven = now.saturating_duration_since(self.at).as_secs_f64() * self.rate;
        self.owed = (self.owed - forgiven).max(0.0);
        self.at = now;
    }

    /// Books one connection and says how long to wait before making it.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        self.settle(now);
        let wait = ((self.owed + 1.0 - self.burst) / self.rate).max(0.0);
        self.owed += 1.0;
        Duration::from_secs_f64(wait)
    }

    /// How long `connections` more would take from `now`, beyond what the
    /// burst allows at once.
    pub fn time_for(&self, connections: usize, now: Instant) -> Duration {
        let mut probe = self.clone();
        probe.settle(now);
        let over = (probe.owed + connections as f64 - probe.burst).max(0.0);
        Duration::from_secs_f64(over / probe.rate)
    }

    /// Connections per second once the burst is spent.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

/// The budgets of the endpoints known to penalize, by host and port.
#[derive(Debug, Default)]
pub struct Budgets(Mutex<BTreeMap<(String, u16), Budget>>);

impl Budgets {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, u16), Budget>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The wait before the next connection to `host:port`, booked; zero
    /// for an endpoint not known to penalize.
    pub fn reserve(&self, host: &str, port: u16) -> Duration {
        match self.lock().get_mut(&(host.to_owned(), port)) {
            Some(budget) => budget.reserve(Instant::now()),
            None => Duration::ZERO,
        }
    }

    /// Gives `host:port` a budget, once it is known to penalize, owed the
    /// connections already made to it.
    pub fn penalizes(&self, host: &str, port: u16, backends: usize, owed: usize) {
        self.lock()
            .entry((host.to_owned(), port))
            .or_insert_with(|| Budget::new(backends, owed, Instant::now()));
    }

    /// A copy of `host:port`'s budget, if it has one.
    pub fn get(&self, host: &str, port: u16) -> Option<Budget> {
        self.lock().get(&(host.to_owned(), port)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_one_a_second_and_k_times_both_through_k_backends() {
        let t0 = Instant::now();
        let mut node = Budget::new(1, 1, t0);
        let waits: Vec<f64> = (0..12).map(|_| node.reserve(t0).as_secs_f64()).collect();
        // Owed 1 already: 9 more at once, then one a second.
        assert_eq!(&waits[..9], &[0.0; 9]);
        assert_eq!(&waits[9..], &[1.0, 2.0, 3.0]);
        // Owed 13 then; 5 s later 8: two more at once, then a wait again.
        let later = t0 + Duration::from_secs(5);
        assert_eq!(node.reserve(later), Duration::ZERO);
        assert_eq!(node.reserve(later), Duration::ZERO);
        assert_eq!(node.reserve(later), Duration::from_secs(1));
        let mut lb = Budget::new(3, 0, t0);
        assert_eq!(lb.time_for(60, t0), Duration::from_secs(10));
        let waits: Vec<Duration> = (0..60).map(|_| lb.reserve(t0)).collect();
        assert_eq!(waits[29], Duration::ZERO);
        assert_eq!(waits[59], Duration::from_secs(10));
        assert_eq!(lb.rate(), 3.0);
    }
}
