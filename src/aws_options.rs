//! The AWS options every command takes (`--region`, `--profile`,
//! `--endpoint-url`, `--max-attempts`): what the parser reads, below the
//! adapters that load the SDK's configuration from them
//! ([`crate::aws::load_config`]).

use clap::Args;

/// The help heading of the AWS options.
pub const AWS: &str = "AWS options";

/// How to reach AWS. The standard `AWS_*` environment variables and the
/// default credential chain (including IAM Identity Center) apply as well.
#[derive(Clone, Debug, Args)]
pub struct AwsArgs {
    /// AWS region (default: from AWS_REGION or the profile).
    #[arg(long, global = true, help_heading = AWS)]
    pub region: Option<String>,
    /// Named profile from the AWS config files.
    #[arg(long, global = true, help_heading = AWS)]
    pub profile: Option<String>,
    /// Endpoint URL for every AWS service (e.g. a VPC endpoint or an
    /// emulator); also read from AWS_ENDPOINT_URL.
    #[arg(long, global = true, help_heading = AWS)]
    pub endpoint_url: Option<String>,
    /// Attempts per AWS call, retries included (adaptive retry mode).
    #[arg(
        long,
        global = true,
        default_value_t = 5,
        env = "HOSTKEYCTL_MAX_ATTEMPTS",
        value_name = "N",
        help_heading = AWS
    )]
    pub max_attempts: u32,
}
