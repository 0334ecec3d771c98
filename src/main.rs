//! The `hostkeyctl` binary: parse arguments, set up logging, run, exit.

use std::process::ExitCode;

use clap::Parser;
use hostkeyctl::cli::Cli;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match (cli.global.quiet, cli.global.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    // Our own crate logs at the chosen level; the AWS SDK only at warn
    // unless HOSTKEYCTL_LOG overrides.
    let filter = EnvFilter::try_from_env("HOSTKEYCTL_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("warn,hostkeyctl={level}")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();

    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(hostkeyctl::exit::Status::Usage.code());
        }
    };
    match runtime.block_on(hostkeyctl::commands::run(cli)) {
        Ok(status) => ExitCode::from(status.code()),
        Err(failure) => {
            eprintln!("error: {:#}", failure.error);
            ExitCode::from(failure.status.code())
        }
    }
}
