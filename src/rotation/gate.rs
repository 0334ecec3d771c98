//! The promotion gate: AWSCURRENT moves to other keys only when clients
//! have had the overlap to learn them, and every node was seen serving
//! them. Every promotion passes here (`Rotation::finish`): a manual
//! `rotate`, `--finish`, `--rollback` and the scheduled finishSecret.
//!
//! - **Announced long enough.** A set was announced when a version holding
//!   its keys first appeared after the current keys did (Secrets Manager's
//!   `CreatedDate`, which nobody writes by hand: a renewal that stores the
//!   same keys again keeps the clock, and a label moved by hand onto an old
//!   set is no announcement). It must be at least the minimum overlap old:
//!   `--min-overlap`, by default the schedule's interval less a tenth, and
//!   never under 24 hours ([`MinOverlap`]).
//! - **Seen served.** One handshake with every node: it must serve the
//!   current keys and show, in its banner, the word of the set being
//!   promoted ([`crate::keyset::KeySet::next_marker`]): its sshd loaded
//!   them. A node that cannot be reached holds the promotion back, unless
//!   `--trust-timers` was chosen for a pull fleet whose nodes the caller
//!   has no path to.
//!
//! A set with the current keys (a copy, as the first scheduled rotation of
//! a secret nothing was announced for promotes) changes nothing for any
//! client and passes.

use std::sync::Arc;
use std::time::Duration;

use super::{Rotation, RotationError};
use crate::dispatch::Dispatcher;
use crate::keyset::{KeySet, fingerprint_of};
use crate::scan::{Endpoint, ScanPolicy, Scanner};
use crate::scan::{Prober, ScanAlgorithm};
use crate::store::{
    STAGE_NEXT, STAGE_PENDING, SecretStore, StoreError, StoredVersion, VersionSelector, same_keys, stage,
};

/// The least overlap, whatever the schedule.
pub const FLOOR: Duration = Duration::from_secs(24 * 3600);

/// The least margin a schedule's interval leaves: Secrets Manager starts
/// each rotation anywhere in its window (a whole UTC day at most), so two
/// rotations of `rate(N days)` can be a day closer than N days.
pub const WINDOW_SLACK: Duration = Duration::from_secs(25 * 3600);

/// The shortest schedule that leaves clients the [`FLOOR`] of overlap
/// whatever the window: two days.
pub const SHORTEST_SCHEDULE: Duration = Duration::from_secs(48 * 3600);

/// How long a set must have been announced before it is promoted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinOverlap {
    /// The schedule's interval less a tenth (at least [`WINDOW_SLACK`]
    /// less), never under [`FLOOR`]; [`FLOOR`] when the secret has no
    /// `rate()` schedule.
    #[default]
    Auto,
    /// Exactly this long (`--min-overlap`; zero promotes at once).
    Exactly(Duration),
}

impl MinOverlap {
    /// The overlap for a secret whose schedule is `schedule` (as
    /// DescribeSecret gives it).
    pub fn resolve(self, schedule: Option<&str>) -> Duration {
        match self {
            MinOverlap::Exactly(d) => d,
            MinOverlap::Auto => schedule
                .and_then(interval)
                .map_or(FLOOR, |i| i.saturating_sub((i / 10).max(WINDOW_SLACK)).max(FLOOR)),
        }
    }
}

/// `--min-overlap`: `auto`, or a duration: a number with `s`, `m`, `h`,
/// `d` or `w` (`0` alone is zero).
pub fn parse_min_overlap(text: &str) -> Result<MinOverlap, String> {
    let text = text.trim();
    if text == "auto" {
        return Ok(MinOverlap::Auto);
    }
    parse_duration(text).map(MinOverlap::Exactly)
}

/// A duration: a whole number and a unit (`s`, `m`, `h`, `d`, `w`), or `0`.
/// `--retire-for`: a duration ([`parse_duration`]) of at most a day, the
/// longest a retired set may be offered ([`crate::document::RETIRING_MAX_SECONDS`]).
pub fn parse_retire_for(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.as_secs() > crate::document::RETIRING_MAX_SECONDS.unsigned_abs() {
        return Err(format!(
            "{text}: a retired set is offered at most a day (24h) after the promotion; the timers converge well before"
        ));
    }
    Ok(d)
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?}: expected a whole number and a unit, e.g. 24h, 7d or 0"))?;
    let seconds = match unit.trim() {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        other => {
            return Err(format!(
                "{text:?}: unit {other:?}; expected s, m, h, d or w (e.g. 24h, 7d or 0)"
            ));
        }
    };
    n.checked_mul(seconds)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// The interval of a `rate(N days|hours)` schedule; `None` for `cron()`.
pub fn interval(schedule: &str) -> Option<Duration> {
    let inner = schedule.trim().strip_prefix("rate(")?.strip_suffix(')')?;
    let (n, unit) = inner.trim().split_once(' ')?;
    let n: u64 = n.parse().ok()?;
    let hours = match unit.trim() {
        "day" | "days" => n.checked_mul(24)?,
        "hour" | "hours" => n,
        "minute" | "minutes" => return Some(Duration::from_secs(n.checked_mul(60)?)),
        _ => return None,
    };
    Some(Duration::from_secs(hours.checked_mul(3600)?))
}

/// What the gate needs to know besides the stages.
#[derive(Clone, Copy, Debug)]
pub struct Gate {
    /// The minimum overlap.
    pub min_overlap: MinOverlap,
    /// A pull fleet's nodes that cannot be reached are trusted to follow
    /// the stages (their timers), rather than holding the promotion back.
    pub trust_timers: bool,
    /// Now, in Unix seconds.
    pub now: i64,
    /// On a pull fleet, how long after a promotion the nodes that
    /// installed it keep offering the set it retired
    /// ([`crate::document::Retiring`]); zero: not at all.
    pub retire_for: Duration,
}

impl Gate {
    /// The default gate at `now`.
    pub fn at(now: i64) -> Self {
        Gate {
            min_overlap: MinOverlap::Auto,
            trust_timers: false,
            now,
            retire_for: Duration::from_secs(crate::document::RETIRING_SECONDS.unsigned_abs()),
        }
    }

    /// The default gate now.
    pub fn now() -> Self {
        Gate::at(unix_now())
    }
}

/// Unix seconds now.
pub fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// Why a promotion was held back (nothing moved).
#[derive(Debug, thiserror::Error)]
pub enum Held {
    /// No version holding the keys appeared after the current keys did.
    #[error(
        "version {version} holds keys that were never announced after the current set (a label moved by hand onto an older set?): nothing was promoted. Announce a set with `hostkeyctl rotate --overlap` (or `schedule enable`), and promote it after the overlap"
    )]
    NeverAnnounced {
        /// The version that would have been promoted.
        version: String,
    },
    /// Announced, but not long enough ago.
    #[error(
        "the keys of version {version} were announced {announced} ({age} ago); clients are given {min} to learn them (--min-overlap), so they are promoted from {ready}. Nothing was promoted. To promote now anyway, pass --min-overlap 0: every client that did not log in since the announcement sees a host key warning"
    )]
    TooEarly {
        /// The version.
        version: String,
        /// When the keys were announced (RFC 3339).
        announced: String,
        /// How long ago.
        age: String,
        /// The minimum overlap.
        min: String,
        /// When it may be promoted (RFC 3339).
        ready: String,
    },
    /// Nodes not seen serving the set (or not reached).
    #[error(
        "{} of {} node(s) were not seen serving the keys of version {version} beside the current set, so clients reaching them would not have learned the keys: nothing was promoted.\n{}\n  Bring them to the stages (their timer, `hostkeyctl install`, or `hostkeyctl push`) and run again",
        nodes.len(), total, nodes.iter().map(|(n, why)| format!("  {n}: {why}")).collect::<Vec<_>>().join("\n")
    )]
    NotServed {
        /// The version.
        version: String,
        /// How many nodes were asked.
        total: usize,
        /// Each node and why.
        nodes: Vec<(String, String)>,
    },
    /// No node to ask.
    #[error(
        "no node was found for the targets, so nothing shows that the keys of version {version} are served: nothing was promoted. Check --target (or pass --trust-timers for a pull fleet this host cannot reach)"
    )]
    NoNodes {
        /// The version.
        version: String,
    },
}

/// RFC 3339 of Unix seconds.
pub fn rfc3339(t: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| t.to_string())
}

/// Unix seconds of an RFC 3339 time.
pub fn parse_time(text: &str) -> Option<i64> {
    time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .ok()
        .map(time::OffsetDateTime::unix_timestamp)
}

/// A duration as people read it: `3d 4h`, `5h 2m`, `40s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, minutes) = (s / 86_400, (s % 86_400) / 3600, (s % 3600) / 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, m) => format!("{h}h {m}m"),
        (d, h, _) => format!("{d}d {h}h"),
    }
}

impl<S: SecretStore, D: Dispatcher, P: Prober> Rotation<'_, S, D, P> {
    /// When the keys `keys` were announced: the `created` time of the
    /// announcement's document, the AWSPENDING or HOSTKEYCTL_NEXT version
    /// holding them (the older when both do). A renewal (`sign`) and the
    /// scheduled rotation's copy keep it; `None` when neither holds them.
    pub async fn announced_since(&self, keys: &KeySet) -> Result<Option<i64>, RotationError> {
        let mut since: Option<i64> = None;
        for label in [STAGE_PENDING, STAGE_NEXT] {
            let holder = match self.store.get(self.secret, &VersionSelector::Stage(stage(label))).await {
                Ok(v) => v,
                // None, or Secrets Manager's empty staging of a rotation.
                Err(StoreError::Aws(crate::aws_error::AwsError::NotFound { .. })) => continue,
                Err(e) => return Err(e.into()),
            };
            if same_keys(&holder.document.keys, keys)
                && let Some(t) = parse_time(&holder.document.created)
            {
                since = Some(since.map_or(t, |s| s.min(t)));
            }
        }
        Ok(since)
    }

    /// The minimum overlap for this secret.
    pub async fn min_overlap(&self) -> Result<Duration, RotationError> {
        if let MinOverlap::Exactly(d) = self.gate.min_overlap {
            return Ok(d);
        }
        let info = self.store.describe(self.secret).await?;
        Ok(self.gate.min_overlap.resolve(info.rotation.schedule.as_deref()))
    }

    /// Whether `keys` (the announced set's) have been announced for the
    /// minimum overlap: the refusal when not.
    pub async fn announced_long_enough(&self, version: &str, keys: &KeySet) -> Result<(), RotationError> {
        let min = self.min_overlap().await?;
        if min.is_zero() {
            return Ok(());
        }
        let since = self.announced_since(keys).await?.ok_or_else(|| Held::NeverAnnounced {
            version: version.to_owned(),
        })?;
        let age = self.gate.now.saturating_sub(since).max(0);
        let min_secs = i64::try_from(min.as_secs()).unwrap_or(i64::MAX);
        if age < min_secs {
            return Err(Held::TooEarly {
                version: version.to_owned(),
                announced: rfc3339(since),
                age: human(Duration::from_secs(age.unsigned_abs())),
                min: human(min),
                ready: rfc3339(since.saturating_add(min_secs)),
            }
            .into());
        }
        Ok(())
    }

    /// The gate (module documentation): `Ok` when `pending` may become
    /// AWSCURRENT in place of `current`.
    pub async fn may_promote(&self, current: &StoredVersion, pending: &StoredVersion) -> Result<(), RotationError> {
        let (now_keys, next) = (&current.document.keys, &pending.document.keys);
        if same_keys(now_keys, next) {
            return Ok(());
        }
        let version = pending.version_id.to_string();
        self.announced_long_enough(&version, next).await?;
        self.seen_serving(&version, now_keys, next).await
    }

    /// One handshake with every node: each serves `current` and shows the
    /// word of `next` in its banner.
    async fn seen_serving(&self, version: &str, current: &KeySet, next: &KeySet) -> Result<(), RotationError> {
        let Some(first) = current.keys().next() else {
            return Ok(());
        };
        let algorithm = ScanAlgorithm::for_managed(first.algorithm());
        let endpoints = self.endpoints();
        if endpoints.is_empty() {
            if self.gate.trust_timers {
                return Ok(());
            }
            return Err(Held::NoNodes {
                version: version.to_owned(),
            }
            .into());
        }
        let scanner = Arc::new(Scanner::new(self.prober.clone(), ScanPolicy::default()));
        let reachable: Vec<Endpoint> = endpoints.iter().filter(|e| !e.host.is_empty()).cloned().collect();
        let mut answers = scanner.greet_nodes(&reachable, algorithm).await.into_iter();
        let marker = next.next_marker();
        let mut problems = Vec::new();
        for e in &endpoints {
            let why = if e.host.is_empty() {
                Some("no address to reach it".to_owned())
            } else {
                let answer = answers.next();
                // Trusted only when no connection was made at all: a node
                // that answered, however, is judged by what it answered.
                let reached = answer.as_ref().is_some_and(|a| a.connected || a.hello.is_some());
                match answer.as_ref().map(|a| (&a.served, a.hello.as_ref())) {
                    None => Some("not asked".to_owned()),
                    Some((Err(err), _)) if self.gate.trust_timers && !reached => {
                        (self.say)(&format!(
                            "{}: not reached ({err}); trusting its timer (--trust-timers)",
                            e.name
                        ));
                        None
                    }
                    Some((Err(err), _)) => Some(format!("not reached: {err}")),
                    Some((Ok(served), hello)) => {
                        let key = fingerprint_of(&served.key());
                        if key != *first.fingerprint() {
                            Some(format!(
                                "serves {key} for {algorithm}, not the current set's {}",
                                first.fingerprint()
                            ))
                        } else {
                            match hello.and_then(|h| h.next_marker()) {
                                Some(m) if m == marker => None,
                                Some(m) => Some(format!(
                                    "serves another extra set ({m}, not {marker}): its timer has not run since the announcement"
                                )),
                                None => Some(format!(
                                    "shows no extra set in its banner (expected {marker}): its timer has not installed the announcement, its hostkeyctl is older than this check, or its sshd_config sets VersionAddendum itself"
                                )),
                            }
                        }
                    }
                }
            };
            if let Some(why) = why {
                problems.push((crate::escape::escape(&e.name), why));
            }
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(Held::NotServed {
            version: version.to_owned(),
            total: endpoints.len(),
            nodes: problems,
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{FLOOR, MinOverlap, human, interval};

    #[test]
    fn the_default_overlap_is_the_interval_less_a_tenth_and_never_under_a_day() {
        let day = Duration::from_secs(86_400);
        assert_eq!(interval("rate(30 days)"), Some(30 * day));
        assert_eq!(interval("rate(1 day)"), Some(day));
        assert_eq!(interval("rate(4 hours)"), Some(Duration::from_secs(4 * 3600)));
        assert_eq!(interval("cron(0 4 ? * SUN *)"), None);
        assert_eq!(interval("rate(x days)"), None);
        assert_eq!(MinOverlap::Auto.resolve(Some("rate(30 days)")), 27 * day);
        // A week: a rotation may come a day early within its window.
        assert_eq!(
            MinOverlap::Auto.resolve(Some("rate(7 days)")),
            Duration::from_secs(143 * 3600)
        );
        assert_eq!(MinOverlap::Auto.resolve(Some("rate(2 days)")), FLOOR);
        assert_eq!(MinOverlap::Auto.resolve(Some("rate(4 hours)")), FLOOR);
        assert_eq!(MinOverlap::Auto.resolve(Some("cron(0 4 * * ? *)")), FLOOR);
        assert_eq!(MinOverlap::Auto.resolve(None), FLOOR);
        assert_eq!(
            MinOverlap::Exactly(Duration::ZERO).resolve(Some("rate(30 days)")),
            Duration::ZERO
        );
        assert_eq!(human(Duration::from_secs(3 * 86_400 + 7200)), "3d 2h");
        assert_eq!(human(Duration::from_secs(40)), "40s");
        assert_eq!(super::parse_retire_for("0"), Ok(Duration::ZERO));
        assert_eq!(super::parse_retire_for("24h"), Ok(day));
        assert!(super::parse_retire_for("25h").unwrap_err().contains("at most a day"));
        assert_eq!(super::parse_min_overlap("auto"), Ok(MinOverlap::Auto));
        assert_eq!(super::parse_min_overlap("0"), Ok(MinOverlap::Exactly(Duration::ZERO)));
        assert_eq!(super::parse_min_overlap("7d"), Ok(MinOverlap::Exactly(7 * day)));
        assert_eq!(
            super::parse_min_overlap("90m"),
            Ok(MinOverlap::Exactly(Duration::from_secs(5400)))
        );
        for bad in ["", "7", "7 days", "-1h", "1y", "h"] {
            assert!(super::parse_min_overlap(bad).is_err(), "{bad}");
        }
    }
}
