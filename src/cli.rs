//! The command-line surface (clap). These structs only describe arguments;
//! each command turns its arguments into a validated plan before acting.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::exit::EXIT_CODES_HELP;
use crate::keyset::{DEFAULT_RSA_BITS, KeyAlgorithm};
use crate::output::OutputFormat;

/// One SSH host identity for every login node behind a load balancer.
#[derive(Debug, Parser)]
#[command(name = "hostkeyctl", version, about, after_long_help = EXIT_CODES_HELP)]
pub struct Cli {
    /// Options every command takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every command.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Output format: a table on a terminal, JSON otherwise, unless set.
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Auto, env = "HOSTKEYCTL_OUTPUT")]
    pub output: OutputFormat,
    /// More log detail on stderr (repeat for more). Never shows key material.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// AWS connection options.
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// How to reach AWS. The standard `AWS_*` environment variables and the
/// default credential chain (including IAM Identity Center) apply as well.
#[derive(Clone, Debug, Default, Args)]
pub struct AwsArgs {
    /// AWS region (default: from AWS_REGION or the profile).
    #[arg(long, global = true)]
    pub region: Option<String>,
    /// Named profile from the AWS config files.
    #[arg(long, global = true)]
    pub profile: Option<String>,
    /// Endpoint URL for every AWS service (e.g. a VPC endpoint or an
    /// emulator); also read from AWS_ENDPOINT_URL.
    #[arg(long, global = true)]
    pub endpoint_url: Option<String>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate a host key set offline and write it as ssh_host_<alg>_key files.
    Keygen(KeygenArgs),
}

/// `hostkeyctl keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Directory to write ssh_host_<alg>_key (0600) and .pub (0644) into;
    /// created if missing.
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,
    /// Which algorithms to generate, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ed25519,ecdsa,rsa",
        value_name = "ALG,..."
    )]
    pub algorithms: Vec<KeyAlgorithm>,
    /// RSA modulus size in bits (2048 to 16384).
    #[arg(long, default_value_t = DEFAULT_RSA_BITS, value_name = "BITS")]
    pub rsa_bits: usize,
    /// Overwrite existing key files in DIR.
    #[arg(long)]
    pub force: bool,
}
