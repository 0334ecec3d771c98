//! One module per subcommand: each validates its arguments into a plan,
//! runs it, and prints its result.

#[cfg(feature = "admin")]
pub mod audit;
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
pub mod sign;
#[cfg(feature = "admin")]
pub mod ssm_document;
#[cfg(feature = "admin")]
pub mod status;

use crate::cli::{Cli, Command};
#[cfg(feature = "admin")]
use crate::discovery::DiscoveryError;
use crate::exit::{Failure, Status};
use crate::store::StoreError;
#[cfg(feature = "admin")]
use crate::{
    ids::Program,
    ssm_document::{Kind, RUN_SHELL_SCRIPT, ResolveError, SentDocument, Trust},
};

/// Store errors as exit statuses: AWS trouble is 4, bad data 2.
pub fn store_failure(e: StoreError) -> Failure {
    match e {
        StoreError::Aws(a) => Failure::aws(a),
        other => Failure::usage(other),
    }
}

#[cfg(feature = "admin")]
/// Discovery errors as exit statuses: AWS trouble is 4, no match 2.
pub fn discovery_failure(e: DiscoveryError) -> Failure {
    match e {
        DiscoveryError::Aws(a) => Failure::aws(a),
        other => Failure::usage(other),
    }
}

#[cfg(feature = "admin")]
/// Settles the document `name` of `kind` before anything is sent
/// ([`ssm_document::resolve`]): hostkeyctl's own, at its default version,
/// only when that version's hash is this binary's document (exit 2
/// otherwise); a custom one by name as it is; AWS-RunShellScript when asked
/// for, or, with a warning, when hostkeyctl's is not deployed.
pub async fn resolve_document(
    name: &str,
    kind: Kind,
    node_command: &Program,
    config: &aws_config::SdkConfig,
) -> Result<SentDocument, Failure> {
    let client = aws_sdk_ssm::Client::new(config);
    match crate::ssm_document::resolve(&client, name, kind, node_command).await {
        Ok(Some(document)) => {
            if document.trust == Trust::Custom {
                tracing::warn!(
                    "sending the custom SSM document {} (version {}, SHA-256 {}), which is not hostkeyctl's own: whoever may update it decides what runs as root on the nodes",
                    crate::output::escape(&document.name),
                    crate::output::escape(document.version.as_deref().unwrap_or("?")),
                    crate::output::escape(document.sha256.as_deref().unwrap_or("?"))
                );
            }
            Ok(document)
        }
        Ok(None) => {
            tracing::warn!(
                "hostkeyctl's SSM document {name} is not deployed; sending {RUN_SHELL_SCRIPT}, which lets whoever may send it run any command as root. Run `hostkeyctl ssm-document deploy` (docs/iam.md)"
            );
            Ok(SentDocument::shell())
        }
        Err(ResolveError::Aws(e)) => Err(Failure::aws(e)),
        Err(e) => Err(Failure::usage(e)),
    }
}

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
        Command::Rotate(args) => rotate::run(&args, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::KnownHosts(args) => known_hosts::run(&args, &cli.global).await,
        #[cfg(feature = "admin")]
        Command::Audit(args) => audit::run(&args, &cli.global, output).await,
        Command::Install(args) => install::run(&args, &cli.global).await,
        #[cfg(feature = "admin")]
        Command::Ca(command) => sign::run_ca(&command, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::Sign(args) => sign::run(&args, &cli.global, output).await,
        #[cfg(feature = "admin")]
        Command::SsmDocument(command) => ssm_document::run(&command, &cli.global, output).await,
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
