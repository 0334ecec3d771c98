//! The admission function: the same `bootstrap`, configured with
//! `HOSTKEYCTL_FUNCTION=admission`, runs `hostkeyctl admit` once per event
//! (docs/admission.md, "Where it runs").
//!
//! Its whole request is its configuration, `HOSTKEYCTL_ADMIT_ARGS`
//! (`admit`'s options, as a JSON array of strings or words separated by
//! spaces: `--secret-id`, `--target-group`, `--target`, and
//! `--auto-scaling-group` with `--lifecycle-hook`, `--max-drain`, ...),
//! checked when the function starts. An event only says "look now": its
//! content chooses nothing (no secret, group or node is taken from it),
//! so an event from a stranger can at most cause one more run, which
//! changes nothing that the last did not. EventBridge's schedule, Auto
//! Scaling's launch lifecycle actions and HyperPod's cluster events are
//! the rules the CloudFormation template sets up.

use clap::Parser as _;
use lambda_runtime::{LambdaEvent, service_fn};

use hostkeyctl::cli::{Cli, Command};

/// The admission function's `admit` options.
pub const ADMIT_ARGS_VAR: &str = "HOSTKEYCTL_ADMIT_ARGS";

/// `hostkeyctl admit OPTIONS...`, parsed (`--dry-run` allowed: a trial).
pub fn parse(options: &[String]) -> Result<Cli, String> {
    let argv = ["hostkeyctl", "admit"]
        .into_iter()
        .map(str::to_owned)
        .chain(options.iter().cloned());
    let cli = Cli::try_parse_from(argv).map_err(|e| format!("{ADMIT_ARGS_VAR}: {}", e.render().to_string().trim()))?;
    let Command::Admit(args) = &cli.command else {
        unreachable!("parsed as admit")
    };
    hostkeyctl::admission::check(&args.request()).map_err(|e| format!("{ADMIT_ARGS_VAR}: {e}"))?;
    Ok(cli)
}

/// What an event was, for the log: its source and detail-type, escaped
/// (they are a stranger's words).
pub fn describe(event: &serde_json::Value) -> String {
    let field = |k: &str| {
        event
            .get(k)
            .and_then(serde_json::Value::as_str)
            .map_or_else(|| "?".to_owned(), hostkeyctl::escape::escape)
    };
    format!("{} / {}", field("source"), field("detail-type"))
}

/// Runs the admission function until the runtime stops it.
pub fn main(
    runtime: &tokio::runtime::Runtime,
    usage: impl Fn(String) -> std::process::ExitCode,
) -> std::process::ExitCode {
    let cli = match hostkeyctl::rotation::scheduled::function::options_from(
        &std::env::var(ADMIT_ARGS_VAR).unwrap_or_default(),
    )
    .map_err(|e| e.replace("HOSTKEYCTL_ROTATE_ARGS", ADMIT_ARGS_VAR))
    .and_then(|o| parse(&o))
    {
        Ok(cli) => cli,
        Err(message) => return usage(message),
    };
    let cli = &cli;
    let handler = service_fn(move |event: LambdaEvent<serde_json::Value>| async move {
        let Command::Admit(args) = &cli.command else {
            unreachable!("parsed as admit")
        };
        eprintln!("admission on {}", describe(&event.payload));
        match hostkeyctl::commands::admit::report(args, &cli.global).await {
            Ok(report) if report.errors.is_empty() => {
                eprint!("{}", report.table(None));
                serde_json::to_value(&report).map_err(|e| lambda_runtime::Error::from(e.to_string()))
            }
            // A refused change fails the invocation (Lambda's error metric
            // and retries), after the decisions are in the log.
            Ok(report) => {
                eprint!("{}", report.table(None));
                Err(lambda_runtime::Error::from(report.errors.join("; ")))
            }
            Err(failure) => {
                let message = format!("{:#}", failure.error);
                eprintln!("error: {}", hostkeyctl::escape::escape_lines(&message));
                Err(lambda_runtime::Error::from(message))
            }
        }
    });
    match runtime.block_on(lambda_runtime::run(handler)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => usage(format!("the Lambda runtime stopped: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::{describe, parse};

    #[test]
    fn the_function_is_configured_with_admits_options_and_events_choose_nothing() {
        let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let tg = "tg:arn:aws:elasticloadbalancing:us-east-1:111122223333:targetgroup/hp-login/0123456789abcdef";
        assert!(
            parse(&words(&format!(
                "--secret-id hostkeys/hk --target-group {tg} --target tag:Role=login"
            )))
            .is_ok()
        );
        for (bad, says) in [
            (format!("--target-group {tg} --target tag:Role=login"), "--secret-id"),
            (
                format!("--secret-id hostkeys/hk --target-group {tg} --target lb:x"),
                "names the load balancer",
            ),
            (
                "--secret-id hostkeys/hk --target tag:Role=login".to_owned(),
                "--target-group",
            ),
        ] {
            let e = parse(&words(&bad)).unwrap_err();
            assert!(e.contains(says) && e.contains("HOSTKEYCTL_ADMIT_ARGS"), "{bad}: {e}");
        }
        let event = serde_json::json!({"source": "aws.autoscaling", "detail-type": "EC2 Instance-launch Lifecycle Action\u{1b}[2J"});
        let said = describe(&event);
        assert!(
            said.starts_with("aws.autoscaling / EC2 Instance-launch Lifecycle Action") && !said.contains('\u{1b}'),
            "{said}"
        );
    }
}
