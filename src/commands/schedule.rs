//! `hostkeyctl schedule enable|show|rotate|disable`: Secrets Manager's
//! rotation schedule on a key set (docs/rotation.md, "Scheduled rotation").

use std::sync::Arc;

use serde::Serialize;

use crate::aws;
use crate::cli::{GlobalArgs, ScheduleCommand, ScheduleEnableArgs};
use crate::commands::rotate::rotation_failure;
use crate::commands::store_failure;
use crate::dispatch::SsmDispatcher;
use crate::exit::{Failure, Status};
use crate::ids::{Program, SecretId, VersionId};
use crate::output::{self, OutputFormat};
use crate::rollout::PushOptions;
use crate::rotation::Rotation;
use crate::scan::SshProber;
use crate::store::{RotationSchedule, STAGE_CURRENT, STAGE_NEXT, SecretStore, SecretsManagerStore, VersionSelector};

/// `schedule enable`'s schedule when neither `--every` nor the secret sets one.
pub const DEFAULT_EVERY: &str = "rate(30 days)";

/// Secrets Manager's shortest schedule.
const MIN_HOURS: u64 = 4;
/// hostkeyctl's shortest: every promotion waits a day
/// ([`crate::rotation::gate::SHORTEST_SCHEDULE`]).
const SHORTEST_HOURS: u64 = crate::rotation::gate::SHORTEST_SCHEDULE.as_secs() / 3600;

/// `--every`: `rate(N days|hours)` of at least two days, `cron(...)`, or
/// a number of days (2 to 1000).
pub fn parse_schedule(text: &str) -> Result<String, String> {
    let text = text.trim();
    if let Ok(days) = text.parse::<u64>() {
        return if (2..=1000).contains(&days) {
            Ok(days.to_string())
        } else {
            Err("a number of days is 2 to 1000 (every promotion waits at least a day)".to_owned())
        };
    }
    if text.starts_with("cron(") && text.ends_with(')') {
        return Ok(text.to_owned());
    }
    let Some(inner) = text.strip_prefix("rate(").and_then(|t| t.strip_suffix(')')) else {
        return Err("expected rate(N days), rate(N hours), cron(...) or a number of days".to_owned());
    };
    let (n, unit) = inner.trim().split_once(' ').unwrap_or((inner, ""));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("rate({inner}): expected a whole number, e.g. rate(30 days)"))?;
    let hours = match unit.trim() {
        "day" | "days" => n * 24,
        "hour" | "hours" => n,
        other => return Err(format!("rate(): unit {other:?}; expected days or hours")),
    };
    if hours < MIN_HOURS {
        return Err(format!(
            "rate({inner}) is more often than Secrets Manager rotates (at most every {MIN_HOURS} hours)"
        ));
    }
    if hours < SHORTEST_HOURS {
        return Err(format!(
            "rate({inner}) leaves clients less than a day to learn each announced set once Secrets Manager's window moves a rotation (every promotion waits at least 24 h, --min-overlap): choose rate(2 days) or longer; a week or a month is usual"
        ));
    }
    Ok(text.to_owned())
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

/// Runs `schedule`.
pub async fn run(command: &ScheduleCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
    let store = SecretsManagerStore::new(&config);
    let (secret, done) = match command {
        ScheduleCommand::Enable(args) => {
            let done = enable(args, &store, &config).await?;
            (&args.secret_id, Some(done))
        }
        ScheduleCommand::Show(args) => (&args.secret_id, None),
        ScheduleCommand::Rotate(args) => {
            let info = store.describe(&args.secret_id).await.map_err(store_failure)?;
            if info.rotation.lambda_arn.is_none() {
                return Err(Failure::usage(anyhow::anyhow!(
                    "secret {} has no rotation function; `hostkeyctl schedule enable --function ARN` sets it",
                    args.secret_id
                )));
            }
            store
                .rotate_secret(&args.secret_id, None, true)
                .await
                .map_err(store_failure)?;
            (
                &args.secret_id,
                Some("rotation started: Secrets Manager runs the function's four steps now (its log, or `hostkeyctl schedule show`, tells when it is done)".to_owned()),
            )
        }
        ScheduleCommand::Disable(args) => {
            store.cancel_rotation(&args.secret_id).await.map_err(store_failure)?;
            (
                &args.secret_id,
                Some("schedule off; the announced set stays announced (the nodes keep offering it) and the next `hostkeyctl rotate` promotes it".to_owned()),
            )
        }
    };
    let report = report(&store, secret, done).await?;
    print(&report, output)?;
    Ok(Status::Success)
}

/// Announces a set when none is, then sets the schedule without rotating.
async fn enable(
    args: &ScheduleEnableArgs,
    store: &SecretsManagerStore,
    config: &aws_config::SdkConfig,
) -> Result<String, Failure> {
    if let Some(ca_id) = &args.ca_secret_id {
        args.placement
            .key_set_prefix
            .check_ca(ca_id)
            .map_err(|e| Failure::usage(anyhow::anyhow!("{e}; nothing was read or changed")))?;
    }
    let info = store.describe(&args.secret_id).await.map_err(store_failure)?;
    let Some(function) = args.function.clone().or_else(|| info.rotation.lambda_arn.clone()) else {
        return Err(Failure::usage(anyhow::anyhow!(
            "secret {} has no rotation function yet; pass --function with the rotation function's ARN (the CloudFormation stack's RotationFunctionArn output). Nothing was changed",
            args.secret_id
        )));
    };
    // The function rotates this secret alone, before anything else moves.
    let pinned = crate::rotation::function::pin(
        &crate::rotation::function::LambdaFunctions::new(config),
        &function,
        &info.arn,
        args.trust_timers,
    )
    .await
    .map_err(|e| match e {
        crate::rotation::function::PinError::Aws(a) => Failure::aws(a),
        other => Failure::usage(anyhow::Error::new(other)),
    })?;
    let ca = match &args.ca_secret_id {
        Some(id) => Some(store.get_ca(id).await.map_err(store_failure)?.key),
        None => None,
    };
    let current = store
        .get(
            &args.secret_id,
            &VersionSelector::Stage(crate::store::stage(STAGE_CURRENT)),
        )
        .await
        .map_err(store_failure)?;
    let dispatcher = SsmDispatcher::new(config);
    let push = PushOptions {
        document: None,
        node_command: Program::parse("hostkeyctl").map_err(Failure::usage)?,
        max_concurrency: String::new(),
        max_errors: String::new(),
        timeout: std::time::Duration::ZERO,
        canary: 0,
        region: None,
    };
    let rotation = Rotation {
        store,
        dispatcher: &dispatcher,
        prober: Arc::new(SshProber),
        secret: &args.secret_id,
        instances: &[],
        push: &push,
        port: 22,
        progress: &|_, _| {},
        say: &|_| {},
        ca: ca.as_ref(),
        gate: crate::rotation::Gate::now(),
    };
    let announced = rotation.announce_after(&current).await.map_err(rotation_failure)?;
    let kept = info.rotation.enabled && args.function.is_none() && args.every.is_none() && args.window.is_none();
    let every = args
        .every
        .clone()
        .or_else(|| info.rotation.schedule.clone())
        .unwrap_or_else(|| DEFAULT_EVERY.to_owned());
    if !kept {
        store
            .rotate_secret(
                &args.secret_id,
                Some((args.function.as_deref(), &every, args.window.as_deref())),
                false,
            )
            .await
            .map_err(store_failure)?;
    }
    Ok(format!(
        "{pinned}; schedule {} ({every}); version {announced} is announced: the nodes offer it from their next install (timer or push), and a scheduled rotation promotes it once it has been announced for the minimum overlap",
        if kept { "kept" } else { "set" }
    ))
}

async fn report(
    store: &SecretsManagerStore,
    secret: &SecretId,
    done: Option<String>,
) -> Result<ScheduleReport, Failure> {
    let info = store.describe(secret).await.map_err(store_failure)?;
    let current_version = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
    let mut announced_version = None;
    let mut announced_created = None;
    if let Some(current) = &current_version
        && let Some(next) = crate::store::announced_next(store, secret, current)
            .await
            .map_err(store_failure)?
            .filter(|v| v.stages.iter().any(|s| s == STAGE_NEXT))
    {
        announced_created = Some(next.document.created.clone());
        announced_version = Some(next.version_id);
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

fn print(report: &ScheduleReport, output: OutputFormat) -> Result<(), Failure> {
    if output == OutputFormat::Json {
        return output::print_json(report).map_err(Failure::usage);
    }
    if let Some(done) = &report.done {
        println!("{done}");
    }
    let r = &report.rotation;
    let or_none = |v: &Option<String>| v.as_deref().map_or_else(|| "-".to_owned(), crate::escape::escape);
    println!("schedule of {}:", report.secret);
    println!("  enabled        {}", if r.enabled { "yes" } else { "no" });
    println!("  function       {}", or_none(&r.lambda_arn));
    println!("  every          {}", or_none(&r.schedule));
    println!("  last rotated   {}", or_none(&r.last_rotated));
    println!("  next rotation  {}", or_none(&r.next_rotation));
    println!(
        "  AWSCURRENT     {}",
        report
            .current_version
            .as_ref()
            .map_or_else(|| "-".to_owned(), ToString::to_string)
    );
    match &report.announced_version {
        Some(v) => println!(
            "  announced      {v} ({}; HOSTKEYCTL_NEXT, promoted by the next rotation)",
            crate::rotation::age(report.announced_created.as_deref())
        ),
        None => println!("  announced      - (the next rotation promotes a new set: clients are warned once)"),
    }
    Ok(())
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
            ("rate(2 weeks)", "days or hours"),
            ("0", "2 to 1000"),
            ("1", "2 to 1000"),
            ("monthly", "expected rate"),
        ] {
            let e = parse_schedule(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
