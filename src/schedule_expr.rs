//! Schedule expressions, read by one set of rules wherever a command takes
//! one (`association deploy --schedule`, `schedule enable --schedule`;
//! docs/cli.md): `rate(N minutes|hours|days)` with the singular unit
//! exactly when N is 1 (as State Manager and Secrets Manager write them),
//! `cron(...)` of 5 to 7 fields, or a bare number of days. Each service's
//! own bounds (State Manager's 30 minutes, Secrets Manager's 4 hours and
//! hostkeyctl's 2 days) are checked by its caller with [`ScheduleExpr::minutes`].

use std::fmt;
use std::str::FromStr;

/// A rate's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Minutes.
    Minutes,
    /// Hours.
    Hours,
    /// Days.
    Days,
}

impl Unit {
    fn minutes(self) -> u64 {
        match self {
            Unit::Minutes => 1,
            Unit::Hours => 60,
            Unit::Days => 1440,
        }
    }

    fn name(self, n: u64) -> &'static str {
        match (self, n == 1) {
            (Unit::Minutes, true) => "minute",
            (Unit::Minutes, false) => "minutes",
            (Unit::Hours, true) => "hour",
            (Unit::Hours, false) => "hours",
            (Unit::Days, true) => "day",
            (Unit::Days, false) => "days",
        }
    }
}

/// A parsed schedule expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScheduleExpr {
    /// `rate(N unit)`, or a bare number of days.
    Rate {
        /// How many.
        n: u64,
        /// Of what.
        unit: Unit,
        /// Written as a bare number of days.
        bare: bool,
    },
    /// `cron(...)`, as written.
    Cron(String),
}

impl ScheduleExpr {
    /// How often it runs at most, in minutes (`None` for cron, which each
    /// service checks itself).
    pub fn minutes(&self) -> Option<u64> {
        match self {
            ScheduleExpr::Rate { n, unit, .. } => Some(n.saturating_mul(unit.minutes())),
            ScheduleExpr::Cron(_) => None,
        }
    }
}

impl fmt::Display for ScheduleExpr {
    /// As the services take it: a bare number of days becomes `rate(N days)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScheduleExpr::Rate { n, unit, .. } => write!(f, "rate({n} {})", unit.name(*n)),
            ScheduleExpr::Cron(text) => f.write_str(text),
        }
    }
}

impl FromStr for ScheduleExpr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Ok(n) = text.parse::<u64>() {
            if n == 0 {
                return Err("a number of days is at least 1".to_owned());
            }
            return Ok(ScheduleExpr::Rate {
                n,
                unit: Unit::Days,
                bare: true,
            });
        }
        if let Some(inner) = text.strip_prefix("cron(").and_then(|t| t.strip_suffix(')')) {
            let fields = inner.split_whitespace().count();
            return if (5..=7).contains(&fields) {
                Ok(ScheduleExpr::Cron(text.to_owned()))
            } else {
                Err(format!("cron({inner}): expected 5 to 7 fields, got {fields}"))
            };
        }
        let Some(inner) = text.strip_prefix("rate(").and_then(|t| t.strip_suffix(')')) else {
            return Err(format!(
                "{}: expected rate(N minutes|hours|days), cron(...) or a number of days",
                crate::escape::escape(text)
            ));
        };
        let (n, unit) = inner.trim().split_once(' ').unwrap_or((inner, ""));
        let n: u64 = n
            .parse()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| format!("rate({inner}): expected a whole number above 0, e.g. rate(30 days)"))?;
        let (unit, singular) = match unit.trim() {
            "minute" => (Unit::Minutes, true),
            "minutes" => (Unit::Minutes, false),
            "hour" => (Unit::Hours, true),
            "hours" => (Unit::Hours, false),
            "day" => (Unit::Days, true),
            "days" => (Unit::Days, false),
            other => {
                return Err(format!(
                    "rate({inner}): unit {other:?}; expected minutes, hours or days"
                ));
            }
        };
        if singular != (n == 1) {
            return Err(format!(
                "rate({inner}): write rate(1 {}) or rate({n} {}), as AWS does",
                unit.name(1),
                unit.name(2)
            ));
        }
        Ok(ScheduleExpr::Rate { n, unit, bare: false })
    }
}

#[cfg(test)]
mod tests {
    use super::{ScheduleExpr, Unit};

    #[test]
    fn one_grammar_for_every_schedule() {
        for (text, minutes, shown) in [
            ("rate(30 minutes)", Some(30), "rate(30 minutes)"),
            ("rate(1 hour)", Some(60), "rate(1 hour)"),
            ("rate(2 days)", Some(2880), "rate(2 days)"),
            (" 30 ", Some(43200), "rate(30 days)"),
            ("cron(0 4 ? * SUN *)", None, "cron(0 4 ? * SUN *)"),
        ] {
            let e: ScheduleExpr = text.parse().unwrap();
            assert_eq!(e.minutes(), minutes, "{text}");
            assert_eq!(e.to_string(), shown, "{text}");
        }
        assert!(matches!(
            "7".parse::<ScheduleExpr>(),
            Ok(ScheduleExpr::Rate {
                n: 7,
                unit: Unit::Days,
                bare: true
            })
        ));
        for (bad, says) in [
            ("rate(1 hours)", "rate(1 hour)"),
            ("rate(2 hour)", "rate(2 hours)"),
            ("rate(x minutes)", "whole number"),
            ("rate(0 days)", "above 0"),
            ("rate(2 weeks)", "expected minutes, hours or days"),
            ("cron()", "5 to 7 fields"),
            ("0", "at least 1"),
            ("every hour", "expected rate("),
        ] {
            let e = bad.parse::<ScheduleExpr>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
