//! `hostkeyctl schedule`'s options: Secrets Manager's rotation schedule
//! (docs/rotation.md, "Scheduled rotation").

use clap::{Args, Subcommand};

use crate::ids::SecretId;

/// `hostkeyctl schedule`.
#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Turn the schedule on, or change it: announce a set first when none
    /// is (so the first scheduled rotation promotes a set clients learned),
    /// then set the function and the schedule without rotating now.
    Enable(ScheduleEnableArgs),
    /// Show the schedule, the last and next rotation, and the announced set.
    Show(ScheduleSecretArgs),
    /// Start a rotation now, with the function and schedule set.
    Rotate(ScheduleSecretArgs),
    /// Turn the schedule off. The announced set stays announced; the next
    /// `rotate` promotes it.
    Disable(ScheduleSecretArgs),
}

/// Which secret.
#[derive(Debug, Args)]
pub struct ScheduleSecretArgs {
    /// The key set secret (name or ARN).
    #[arg(long, value_name = "ID")]
    pub secret_id: SecretId,
}

/// `schedule enable`.
#[derive(Debug, Args)]
pub struct ScheduleEnableArgs {
    /// The key set secret (name or ARN).
    #[arg(long, value_name = "ID")]
    pub secret_id: SecretId,
    /// The rotation function's ARN (the CloudFormation stack's
    /// RotationFunctionArn output). Needed the first time; kept after.
    #[arg(long, value_name = "ARN")]
    pub function: Option<String>,
    /// How often: `rate(N days)`, `rate(N hours)` (at least two days: every
    /// promotion waits a day), `cron(...)`, or a number of days. Clients
    /// that log in at least once in that period never see a warning. Default: the secret's schedule
    /// (one CloudFormation set, say), else `rate(30 days)`.
    #[arg(long, alias = "every", value_name = "SCHEDULE", value_parser = crate::rotation::scheduled::admin::parse_schedule)]
    pub schedule: Option<String>,
    /// The window each rotation may take, e.g. `3h` (Secrets Manager's
    /// `Duration`; default: its own).
    #[arg(long, value_name = "DURATION")]
    pub window: Option<String>,
    /// The CA that signs the announced set, when the current one carries
    /// host certificates.
    #[arg(long, value_name = "ID")]
    pub ca_secret_id: Option<SecretId>,
    /// A pull fleet the function has no network path to: it trusts the
    /// nodes' timers rather than holding each promotion back until it sees
    /// every node serve the announced set (adds --trust-timers to the
    /// function's HOSTKEYCTL_ROTATE_ARGS).
    #[arg(long)]
    pub trust_timers: bool,
    #[command(flatten)]
    pub placement: crate::cli::admin::KeySetPrefixArg,
}
