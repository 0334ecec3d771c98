//! One module per subcommand: each validates its arguments into a plan,
//! runs it, and prints its result.

pub mod audit;
pub mod init;
pub mod install;
pub mod keygen;
pub mod known_hosts;
pub mod push;
pub mod rotate;
pub mod ssm_document;
pub mod status;

use crate::cli::{Cli, Command};
use crate::discovery::DiscoveryError;
use crate::exit::{Failure, Status};
use crate::store::StoreError;

/// Store errors as exit statuses: AWS trouble is 4, bad data 2.
pub fn store_failure(e: StoreError) -> Failure {
    match e {
        StoreError::Aws(a) => Failure::aws(a),
        other => Failure::usage(other),
    }
}

/// Discovery errors as exit statuses: AWS trouble is 4, no match 2.
pub fn discovery_failure(e: DiscoveryError) -> Failure {
    match e {
        DiscoveryError::Aws(a) => Failure::aws(a),
        other => Failure::usage(other),
    }
}

/// Writes the man pages into `out_dir` (created if missing).
fn man(out_dir: &std::path::Path) -> Result<Status, Failure> {
    let failed =
        |e: std::io::Error| Failure::usage(anyhow::anyhow!("cannot write man pages to {}: {e}", out_dir.display()));
    crate::fsutil::create_dir_all(out_dir, 0o755).map_err(failed)?;
    clap_mangen::generate_to(<Cli as clap::CommandFactory>::command(), out_dir).map_err(failed)?;
    Ok(Status::Success)
}

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> Result<Status, Failure> {
    let output = cli.global.output.resolve();
    match cli.command {
        Command::Keygen(args) => keygen::run(&args, output),
        Command::Init(args) => init::run(&args, &cli.global, output).await,
        Command::Status(args) => status::run(&args, &cli.global, output).await,
        Command::Push(args) => push::run(&args, &cli.global, output).await,
        Command::Rotate(args) => rotate::run(&args, &cli.global, output).await,
        Command::KnownHosts(args) => known_hosts::run(&args, &cli.global).await,
        Command::Audit(args) => audit::run(&args, &cli.global, output).await,
        Command::Install(args) => install::run(&args, &cli.global).await,
        Command::SsmDocument(command) => ssm_document::run(&command, &cli.global, output).await,
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "hostkeyctl", &mut std::io::stdout());
            Ok(Status::Success)
        }
        Command::Man { out_dir } => man(&out_dir),
    }
}
