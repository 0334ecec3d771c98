//! What a source owes one server, and how fast the server forgives it:
//! the arithmetic of the connection budget ([`super`]), and what is read
//! back from a ledger file that another process (or a damaged disk) wrote.

use std::time::Duration;

use super::{BURST, RATE};

/// What one endpoint is owed, and how fast it forgives. Times are seconds
/// since the Unix epoch: a clock every process on the host shares.
#[derive(Clone, Debug, PartialEq)]
pub struct Budget {
    pub(super) owed: f64,
    pub(super) at: f64,
    pub(super) backends: usize,
}

impl Budget {
    /// A budget for an endpoint that spreads connections over `backends`
    /// servers (1 for a node), owed `owed` connections at `now`.
    pub fn new(backends: usize, owed: usize, now: f64) -> Self {
        Budget {
            owed: owed as f64,
            at: now,
            backends: backends.max(1),
        }
    }

    pub(super) fn burst(&self) -> f64 {
        BURST * self.backends as f64
    }

    /// Connections per second once the burst is spent.
    pub fn rate(&self) -> f64 {
        RATE * self.backends as f64
    }

    /// The most a source can owe one server: sshd's longest penalty
    /// (`max`, 600 s) beyond the burst, per backend. More is a corrupt
    /// file, and would only mean waiting for ever.
    pub(super) fn max_owed(&self) -> f64 {
        (BURST + MAX_PENALTY_SECS) * self.backends as f64
    }

    pub(super) fn settle(&mut self, now: f64) {
        if self.at > now + CLOCK_SLACK {
            // The clock was set back (or the entry was written by a clock
            // ahead): a debt dated in the future would never be forgiven.
            // It is dated now, and forgiven from now.
            tracing::warn!(
                "connection budget: an entry dated {:.0} s in the future (the clock was set back?) is dated now",
                self.at - now
            );
            self.at = now;
        }
        let forgiven = (now - self.at).max(0.0) * self.rate();
        self.owed = (self.owed - forgiven).clamp(0.0, self.max_owed());
        self.at = self.at.max(now);
    }

    /// Books one connection at `now` and says how long to wait before
    /// making it.
    pub fn reserve(&mut self, now: f64) -> Duration {
        self.settle(now);
        let wait = ((self.owed + 1.0 - self.burst()) / self.rate()).max(0.0);
        self.owed += 1.0;
        seconds(wait)
    }

    /// Takes back a booked connection that was never made.
    pub(super) fn refund(&mut self) {
        self.owed = (self.owed - 1.0).max(0.0);
    }

    /// How long `connections` more would take from `now`, beyond what the
    /// burst allows at once.
    pub fn time_for(&self, connections: usize, now: f64) -> Duration {
        let mut probe = self.clone();
        probe.settle(now);
        let over = (probe.owed + connections as f64 - probe.burst()).max(0.0);
        seconds(over / probe.rate())
    }

    /// The file's line: `owed at backends`.
    pub(super) fn to_line(&self) -> String {
        format!("{:.6} {:.6} {}\n", self.owed, self.at, self.backends)
    }

    /// A file's line; `None` (the entry starts afresh, with a warning)
    /// when it is not one this ledger wrote. An owed count beyond what
    /// sshd can hold against a source is cut to that.
    pub(super) fn from_line(line: &str) -> Option<Self> {
        let parsed = (|| {
            let mut fields = line.split_whitespace();
            let owed: f64 = fields.next()?.parse().ok()?;
            let at: f64 = fields.next()?.parse().ok()?;
            let backends: usize = fields.next()?.parse().ok()?;
            (owed.is_finite() && owed >= 0.0 && at.is_finite() && (1..=MAX_BACKENDS).contains(&backends))
                .then_some(Budget { owed, at, backends })
        })();
        match parsed {
            Some(mut b) => {
                b.owed = b.owed.min(b.max_owed());
                Some(b)
            }
            None => {
                if !line.trim().is_empty() {
                    tracing::warn!(
                        "connection budget: an unreadable entry ({:?}) starts afresh",
                        crate::escape::escape(line.trim())
                    );
                }
                None
            }
        }
    }
}

/// sshd's longest penalty (`PerSourcePenalties max`, 600 s by default).
const MAX_PENALTY_SECS: f64 = 600.0;
/// How far ahead of the clock an entry may be dated (clocks of processes
/// on one host agree closely).
const CLOCK_SLACK: f64 = 5.0;
/// The most backends a load balancer entry may name.
const MAX_BACKENDS: usize = 100_000;

/// A wait in seconds as a duration, never a panic: negative or not a
/// number is none, too long is a day.
pub(super) fn seconds(s: f64) -> Duration {
    if s.is_nan() || s <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(s.min(86_400.0)).unwrap_or(Duration::from_secs(86_400))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Budget, seconds};

    #[test]
    fn a_burst_then_one_a_second_and_k_times_both_through_k_backends() {
        let t0 = 1_000.0;
        let mut node = Budget::new(1, 1, t0);
        let waits: Vec<f64> = (0..12).map(|_| node.reserve(t0).as_secs_f64()).collect();
        // Owed 1 already: 9 more at once, then one a second.
        assert_eq!(&waits[..9], &[0.0; 9]);
        assert_eq!(&waits[9..], &[1.0, 2.0, 3.0]);
        // Owed 13 then; 5 s later 8: two more at once, then a wait again.
        let later = t0 + 5.0;
        assert_eq!(node.reserve(later), Duration::ZERO);
        assert_eq!(node.reserve(later), Duration::ZERO);
        assert_eq!(node.reserve(later), Duration::from_secs(1));
        // A clock set back forgives nothing and owes nothing more.
        let owed = node.owed;
        node.settle(t0);
        assert_eq!(node.owed, owed);
        let mut lb = Budget::new(3, 0, t0);
        assert_eq!(lb.time_for(60, t0), Duration::from_secs(10));
        let waits: Vec<Duration> = (0..60).map(|_| lb.reserve(t0)).collect();
        assert_eq!(waits[29], Duration::ZERO);
        assert_eq!(waits[59], Duration::from_secs(10));
        assert_eq!(lb.rate(), 3.0);
    }

    #[test]
    fn a_budget_survives_its_file_line_and_a_damaged_line_is_none() {
        let b = Budget::new(3, 7, 1_764_600_000.25);
        assert_eq!(Budget::from_line(&b.to_line()), Some(b));
        for bad in ["", "1 2", "x 2 3", "-1 2 3", "1 2 0", "NaN 2 1", "1 inf 1"] {
            assert_eq!(Budget::from_line(bad), None, "{bad:?}");
        }
    }

    /// A ledger file written before the clock was set back (or damaged)
    /// neither keeps a debt that is never forgiven nor panics.
    #[test]
    fn a_debt_dated_in_the_future_is_dated_now_and_a_huge_one_is_cut() {
        let now = 1_764_600_000.0;
        // Written an hour ahead: dated now, then forgiven from now.
        let mut ahead = Budget::from_line(&format!("20 {} 1", now + 3600.0)).unwrap();
        ahead.settle(now);
        assert_eq!(ahead.at, now, "{ahead:?}");
        ahead.settle(now + 15.0);
        assert_eq!(ahead.owed, 5.0, "not forgiven from now: {ahead:?}");
        // Owed far more than sshd can hold: cut, and every wait is finite.
        let mut huge = Budget::from_line(&format!("1e300 {now} 1")).unwrap();
        assert!(huge.owed <= huge.max_owed(), "{huge:?}");
        let wait = huge.reserve(now);
        assert!(wait <= Duration::from_secs(611), "{wait:?}");
        let mut far = Budget::from_line("1 1e300 1").unwrap();
        assert_eq!(far.reserve(now), Duration::ZERO);
        assert_eq!(Budget::from_line("1 2 1000000"), None);
        assert_eq!(seconds(f64::NAN), Duration::ZERO);
        assert_eq!(seconds(1e30), Duration::from_secs(86_400));
    }
}
