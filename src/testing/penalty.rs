//! sshd's PerSourcePenalties, as the in-memory nodes apply them.

use std::time::Duration;

/// One source's standing at a node that penalizes: sshd's defaults,
/// `noauth:1 min:15 max:600`, forgiving 1 s per second.
#[derive(Clone, Debug)]
pub struct Penalty {
    owed: f64,
    at: tokio::time::Instant,
    refused_until: Option<tokio::time::Instant>,
}

impl Penalty {
    /// A source with nothing owed, first seen at `now`.
    pub fn new(now: tokio::time::Instant) -> Self {
        Penalty {
            owed: 0.0,
            at: now,
            refused_until: None,
        }
    }

    /// Whether a connection from this source is let in now; if so, it is
    /// charged (a scan never authenticates).
    pub(super) fn admit(&mut self, now: tokio::time::Instant) -> bool {
        if self.refused_until.is_some_and(|t| now < t) {
            return false;
        }
        let forgiven = now.saturating_duration_since(self.at).as_secs_f64();
        self.owed = (self.owed - forgiven).max(0.0) + 1.0;
        self.at = now;
        if self.owed > 15.0 {
            self.refused_until = Some(now + Duration::from_secs_f64(self.owed.min(600.0)));
        }
        true
    }
}
