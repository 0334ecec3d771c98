//! Secrets Manager's rotation schedule on a key set (`hostkeyctl schedule
//! enable|show|rotate|disable`, docs/rotation.md, "Scheduled rotation"):
//! the flows over the store, its schedule and the function's
//! configuration, each tested in memory.

use serde::Serialize;

use super::function::{FunctionConfig, PinError, pin};
use crate::document::KeySetPrefix;
use crate::exit::{ExitStatus, Status};
use crate::ids::{SecretId, VersionId};
use crate::rotation::gate::SHORTEST_SCHEDULE;
use crate::rotation::{Announcer, RotationError};
use crate::store::{
    RotationSchedule, STAGE_CURRENT, STAGE_NEXT, ScheduleSettings, Schedules, SecretStore, StoreError, VersionSelector,
    stage,
};

/// `schedule enable`'s schedule when neither `--schedule` nor the secret sets one.
pub const DEFAULT_EVERY: &str = "rate(30 days)";

/// Secrets Manager's shortest schedule.
const MIN_HOURS: u64 = 4;
/// hostkeyctl's shortest: every promotion waits a day ([`SHORTEST_SCHEDULE`]).
const SHORTEST_HOURS: u64 = SHORTEST_SCHEDULE.as_secs() / 3600;

/// `--schedule`: `crate::schedule_expr`'s rules, with Secrets Manager's
/// bounds (hours or days, at least every 4 hours; a number of days is 1 to
/// 1000) and hostkeyctl's (at least two days). Returns it as Secrets
/// Manager takes it: a number of days as it is (AutomaticallyAfterDays),
/// else the expression.
pub fn parse_schedule(text: &str) -> Result<String, String> {
    use crate::schedule_expr::{ScheduleExpr, Unit};
    let expr: ScheduleExpr = text.parse()?;
    let shown = text.trim();
    match &expr {
        ScheduleExpr::Cron(_) => return Ok(expr.to_string()),
        ScheduleExpr::Rate { n, bare: true, .. } if !(2..=1000).contains(n) => {
            return Err("a number of days is 2 to 1000 (every promotion waits at least a day)".to_owned());
        }
        ScheduleExpr::Rate { n, bare: true, .. } => return Ok(n.to_string()),
        ScheduleExpr::Rate {
            unit: Unit::Minutes, ..
        } => {
            return Err(format!(
                "{shown}: Secrets Manager rotates by the hour or day, not by the minute"
            ));
        }
        ScheduleExpr::Rate { .. } => {}
    }
    let hours = expr.minutes().unwrap_or(u64::MAX) / 60;
    if hours < MIN_HOURS {
        return Err(format!(
            "{shown} is more often than Secrets Manager rotates (at most every {MIN_HOURS} hours)"
        ));
    }
    if hours < SHORTEST_HOURS {
        return Err(format!(
            "{shown} leaves clients less than a day to learn each announced set once Secrets Manager's window moves a rotation (every promotion waits at least 24 h, --min-overlap): choose rate(2 days) or longer; a week or a month is usual"
        ));
    }
    Ok(expr.to_string())
}

/// What `schedule enable` is asked for.
#[derive(Clone, Debug)]
pub struct EnableRequest<'a> {
    /// The key set.
    pub secret: &'a SecretId,
    /// The rotation function (none: the one the secret has).
    pub function: Option<&'a str>,
    /// The schedule (none: the secret's, else [`DEFAULT_EVERY`]).
    pub schedule: Option<&'a str>,
    /// The rotation window.
    pub window: Option<&'a str>,
    /// The CA that signs the announced set.
    pub ca_secret_id: Option<&'a SecretId>,
    /// Where the key sets live (a CA under it is refused).
    pub key_set_prefix: &'a KeySetPrefix,
    /// Add `--trust-timers` to the function's options.
    pub trust_timers: bool,
    /// Unix seconds now (the announcement's date).
    pub now: i64,
}

/// Why a schedule flow could not run.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// A CA where every login node's role may read it.
    #[error("{0}; nothing was read or changed")]
    CaPlacement(String),
    /// No function given and none set.
    #[error(
        "secret {0} has no rotation function yet; pass --function with the rotation function's ARN (the CloudFormation stack's RotationFunctionArn output). Nothing was changed"
    )]
    NoFunction(SecretId),
    /// `schedule rotate` on a secret with no function.
    #[error("secret {0} has no rotation function; `hostkeyctl schedule enable --function ARN` sets it")]
    NotScheduled(SecretId),
    /// The function rotates another secret, or cannot take the option.
    #[error(transparent)]
    Pin(#[from] PinError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The announcement failed.
    #[error(transparent)]
    Rotation(#[from] RotationError),
}

impl ExitStatus for ScheduleError {
    /// The cause's status; a refusal 2.
    fn status(&self) -> Status {
        match self {
            ScheduleError::Pin(e) => e.status(),
            ScheduleError::Store(e) => e.status(),
            ScheduleError::Rotation(e) => e.status(),
            _ => Status::Usage,
        }
    }
}

/// Pins the function to the secret, announces a set when none is, then
/// sets the schedule without rotating (Secrets Manager checks the
/// configuration). What was done, in a sentence.
pub async fn enable(
    store: &(impl SecretStore + Schedules),
    functions: &impl FunctionConfig,
    request: &EnableRequest<'_>,
) -> Result<String, ScheduleError> {
    if let Some(ca_id) = request.ca_secret_id {
        request
            .key_set_prefix
            .check_ca(ca_id)
            .map_err(ScheduleError::CaPlacement)?;
    }
    let info = store.describe(request.secret).await?;
    let function = request
        .function
        .map(str::to_owned)
        .or_else(|| info.rotation.lambda_arn.clone())
        .ok_or_else(|| ScheduleError::NoFunction(request.secret.clone()))?;
    // The function rotates this secret alone, before anything else moves.
    let pinned = pin(functions, &function, &info.arn, request.trust_timers).await?;
    let ca = match request.ca_secret_id {
        Some(id) => Some(store.get_ca(id).await?.key),
        None => None,
    };
    let current = store
        .get(request.secret, &VersionSelector::Stage(stage(STAGE_CURRENT)))
        .await?;
    let announcer = Announcer {
        store,
        secret: request.secret,
        ca: ca.as_ref(),
        now: request.now,
        retire_for: None,
    };
    let announced = announcer.announce_after(&current).await?;
    let kept =
        info.rotation.enabled && request.function.is_none() && request.schedule.is_none() && request.window.is_none();
    let every = request
        .schedule
        .map(str::to_owned)
        .or_else(|| info.rotation.schedule.clone())
        .unwrap_or_else(|| DEFAULT_EVERY.to_owned());
    if !kept {
        let settings = ScheduleSettings {
            function: request.function,
            every: &every,
            window: request.window,
        };
        store.rotate_secret(request.secret, Some(settings), false).await?;
    }
    Ok(format!(
        "{pinned}; schedule {} ({every}); version {announced} is announced: the nodes offer it from their next install (timer or push), and a scheduled rotation promotes it once it has been announced for the minimum overlap",
        if kept { "kept" } else { "set" }
    ))
}

/// `schedule rotate`: a rotation now, with the function and schedule set.
pub async fn rotate_now(store: &(impl SecretStore + Schedules), secret: &SecretId) -> Result<String, ScheduleError> {
    let info = store.describe(secret).await?;
    if info.rotation.lambda_arn.is_none() {
        return Err(ScheduleError::NotScheduled(secret.clone()));
    }
    store.rotate_secret(secret, None, true).await?;
    Ok("rotation started: Secrets Manager runs the function's four steps now (its log, or `hostkeyctl schedule show`, tells when it is done)".to_owned())
}

/// `schedule disable`: the schedule off.
pub async fn disable(store: &impl Schedules, secret: &SecretId) -> Result<String, ScheduleError> {
    store.cancel_rotation(secret).await?;
    Ok("schedule off; the announced set stays announced (the nodes keep offering it) and the next `hostkeyctl rotate` promotes it".to_owned())
}

/// What `schedule show` (and each command, after it) prints.
#[derive(Debug, Serialize)]
pub struct ScheduleReport {
    /// The secret.
    pub secret: SecretId,
    /// What the command did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done: Option<String>,
    /// The schedule, as DescribeSecret answers.
    pub rotation: RotationSchedule,
    /// AWSCURRENT.
    pub current_version: Option<VersionId>,
    /// HOSTKEYCTL_NEXT: the set the next rotation promotes, when it holds
    /// other keys than AWSCURRENT.
    pub announced_version: Option<VersionId>,
    /// When the announced set was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub announced_created: Option<String>,
}

/// The schedule of `secret` and its announced set.
pub async fn report(
    store: &impl SecretStore,
    secret: &SecretId,
    done: Option<String>,
) -> Result<ScheduleReport, StoreError> {
    let info = store.describe(secret).await?;
    let current_version = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
    let mut announced_version = None;
    let mut announced_created = None;
    if let Some(current) = &current_version {
        let current = store.get(secret, &VersionSelector::VersionId(current.clone())).await?;
        let servable = crate::store::servable_with(store, secret, current).await?;
        if let Some(next) = servable.others().find(|v| v.stages.iter().any(|s| s == STAGE_NEXT)) {
            announced_created = Some(next.document.created.clone());
            announced_version = Some(next.version_id.clone());
        }
    }
    Ok(ScheduleReport {
        secret: secret.clone(),
        done,
        rotation: info.rotation,
        current_version,
        announced_version,
        announced_created,
    })
}

impl ScheduleReport {
    /// The report as people read it.
    pub fn text(&self) -> String {
        let r = &self.rotation;
        let or_none = |v: &Option<String>| v.as_deref().map_or_else(|| "-".to_owned(), crate::escape::escape);
        let mut out = Vec::new();
        if let Some(done) = &self.done {
            out.push(done.clone());
        }
        out.push(format!("schedule of {}:", self.secret));
        out.push(format!("  enabled        {}", if r.enabled { "yes" } else { "no" }));
        out.push(format!("  function       {}", or_none(&r.lambda_arn)));
        out.push(format!("  every          {}", or_none(&r.schedule)));
        out.push(format!("  last rotated   {}", or_none(&r.last_rotated)));
        out.push(format!("  next rotation  {}", or_none(&r.next_rotation)));
        out.push(format!(
            "  AWSCURRENT     {}",
            self.current_version
                .as_ref()
                .map_or_else(|| "-".to_owned(), ToString::to_string)
        ));
        out.push(match &self.announced_version {
            Some(v) => format!(
                "  announced      {v} ({}; HOSTKEYCTL_NEXT, promoted by a rotation once announced for the minimum overlap)",
                crate::rotation::age(self.announced_created.as_deref())
            ),
            None => "  announced      - (the next rotation promotes a copy of the current set and announces one)"
                .to_owned(),
        });
        out.push(String::new());
        out.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::parse_schedule;

    #[test]
    fn schedules_are_checked_as_secrets_manager_does() {
        for ok in [
            "rate(30 days)",
            "rate(2 days)",
            "rate(48 hours)",
            "cron(0 4 ? * SUN *)",
            "90",
        ] {
            assert!(parse_schedule(ok).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("rate(3 hours)", "at most every 4 hours"),
            ("rate(1 day)", "rate(2 days) or longer"),
            ("rate(47 hours)", "rate(2 days) or longer"),
            ("rate(x days)", "whole number"),
            ("rate(2 weeks)", "expected minutes, hours or days"),
            ("rate(120 minutes)", "not by the minute"),
            ("rate(1 days)", "rate(1 day)"),
            ("0", "at least 1"),
            ("1", "2 to 1000"),
            ("monthly", "expected rate"),
            ("cron(0 4)", "5 to 7 fields"),
        ] {
            let e = parse_schedule(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
