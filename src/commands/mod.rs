//! One module per subcommand: each validates its arguments into a plan,
//! runs it, and prints its result.

#[cfg(feature = "admin")]
pub mod admit;
#[cfg(feature = "admin")]
pub mod association;
#[cfg(feature = "admin")]
pub mod audit;
#[cfg(feature = "admin")]
pub mod ca;
#[cfg(feature = "admin")]
pub mod common;
#[cfg(feature = "admin")]
pub mod deliver;
#[cfg(feature = "admin")]
pub mod doctor;
pub mod enroll;
#[cfg(feature = "admin")]
pub mod enrolment;
pub mod imds_guard;
#[cfg(feature = "admin")]
pub mod init;
pub mod install;
#[cfg(feature = "admin")]
pub mod keygen;
#[cfg(feature = "admin")]
pub mod known_hosts;
#[cfg(feature = "admin")]
pub mod push;
#[cfg(feature = "admin")]
pub mod rotate;
#[cfg(feature = "admin")]
pub mod schedule;
#[cfg(feature = "admin")]
pub mod sessions;
#[cfg(feature = "admin")]
pub mod sign;
#[cfg(feature = "admin")]
pub mod ssm_document;
#[cfg(feature = "admin")]
pub mod status;

use crate::cli::{Cli, Command};
use crate::exit::{Failure, Status};

#[cfg(feature = "admin")]
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
    #[cfg(feature = "admin")]
    let output = cli.global.output.resolve();
    match cli.command {
        #[cfg(feature = "admin")]
        Command::Keygen(args) => keygen::run(&args, output),
        #[cfg(feature = "admin")]
        Command::Init(args) => init::run(&args, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Status(args) => status::run(&args, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Push(args) => push::run(&args, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Deliver(args) => deliver::run(&args, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Rotate(args) => rotate::run(&args, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::KnownHosts(args) => known_hosts::run(&args, &cli.global).await,
        #[cfg(feature = "admin")]
        Command::Audit(args) => audit::run(&args, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Admit(args) => admit::run(&args, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Doctor(args) => doctor::run(&args, &cli.global, output).await,
        Command::Install(args) => install::run(&args, &cli.global).await,
        #[cfg(feature = "admin")]
        Command::Ca(command) => ca::run(&command, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Sign(args) => sign::run(&args, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::SsmDocument(command) => ssm_document::run(&command, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Association(command) => association::run(&command, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Schedule(command) => schedule::run(&command, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Sessions(args) => sessions::run(&args, &cli.global).await,
        Command::Enroll(args) => enroll::run(&args, &cli.global, cli.global.output.resolve()).await,
        Command::ImdsGuard(args) => imds_guard::run(&args, cli.global.output.resolve()),
        #[cfg(feature = "admin")]
        Command::Enrolment(command) => enrolment::run(&command, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut command, "hostkeyctl", &mut std::io::stdout());
            Ok(Status::Success)
        }
        #[cfg(feature = "admin")]
        Command::Man { out_dir } => man(&out_dir),
    }
}
