//! The `hostkeyctl` binary: parse arguments, set up logging, run, exit.

// The Lambda function's handler future (lambda_main/rotation.rs) nests deeper than
// rustc's default layout depth.
#![recursion_limit = "256"]

use std::process::ExitCode;

#[cfg(feature = "lambda")]
mod lambda_main;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

fn main() -> ExitCode {
    // Before anything else, and so before any private key is in memory.
    if let Err(e) = hostkeyctl::process::forbid_core_dumps() {
        eprintln!("error: cannot turn core dumps off ({e}); refusing to handle private keys");
        return ExitCode::from(hostkeyctl::exit::Status::Usage.code());
    }
    // The AWS SDK prints response bodies, secret values included, at trace
    // level when LOG_SENSITIVE_BODIES is true: never with private keys.
    if std::env::var("LOG_SENSITIVE_BODIES").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
        eprintln!(
            "error: LOG_SENSITIVE_BODIES=true makes the AWS SDK log secret values (the private host keys); unset it and use -vvv or HOSTKEYCTL_LOG for detail"
        );
        return ExitCode::from(hostkeyctl::exit::Status::Usage.code());
    }
    // The scheduled rotation's Lambda function is this binary, named
    // `bootstrap` (src/lambda_main/).
    #[cfg(feature = "lambda")]
    let lambda = lambda_main::invoked_as_bootstrap();
    #[cfg(not(feature = "lambda"))]
    let lambda = false;
    // Old spellings (docs/cli.md, "Renamed") parse, and are named.
    let (cli, renamed) = if lambda {
        (None, Vec::new())
    } else {
        let (cli, renamed) =
            hostkeyctl::cli::renamed::parse(std::env::args_os().collect()).unwrap_or_else(|e| e.exit());
        (Some(cli), renamed)
    };
    let (quiet, verbose) = cli.as_ref().map_or((false, 1), |c| (c.global.quiet, c.global.verbose));
    if !quiet {
        for warning in &renamed {
            eprintln!("warning: {warning}");
        }
    }
    // Our own crate logs at the chosen level. The AWS SDK's own warnings
    // (IMDS probes, retries) are noise to a user until they ask with -v: the
    // error hostkeyctl prints says what went wrong and what to do.
    let directives = match (quiet, verbose) {
        (true, _) => "off,hostkeyctl=error",
        (false, 0) => "off,hostkeyctl=warn",
        (false, 1) => "warn,hostkeyctl=info",
        (false, 2) => "info,hostkeyctl=debug",
        _ => "debug,hostkeyctl=trace",
    };
    // Targets, not EnvFilter: the same `target=level` directives without
    // the regex engine EnvFilter carries into the node build (its size
    // limit, docs/design-notes.md).
    let filter = std::env::var("HOSTKEYCTL_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| directives.parse().unwrap_or_default())
        // Defence in depth: the SDK's response-body log line stays off at
        // every level, whatever HOSTKEYCTL_LOG says.
        .with_target("aws_smithy_runtime::client::orchestrator::http", LevelFilter::OFF);
    // Colour only on a terminal: a journal, an SSM command's output or a
    // log file gets the words, not escape sequences.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_ansi(ansi)
                .with_writer(std::io::stderr)
                .with_target(false),
        )
        .with(filter)
        .init();

    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(hostkeyctl::exit::Status::Usage.code());
        }
    };
    #[cfg(feature = "lambda")]
    if lambda {
        return lambda_main::main(&runtime);
    }
    let Some(cli) = cli else {
        unreachable!("parsed unless run as the Lambda function")
    };
    match runtime.block_on(hostkeyctl::commands::run(cli)) {
        Ok(status) => ExitCode::from(status.code()),
        Err(failure) => {
            // The cause chain can quote AWS or a node: escaped, line by line.
            eprintln!("error: {}", hostkeyctl::escape::escape_lines(&failure.message()));
            ExitCode::from(failure.status.code())
        }
    }
}
