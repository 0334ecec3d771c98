//! The scheduled rotation's function: it answers Secrets Manager's four
//! rotation steps with [`hostkeyctl::rotation`]'s scheduled steps
//! (docs/rotation.md, "Scheduled rotation").
//!
//! The function rotates one secret, the ARN in `HOSTKEYCTL_SECRET_ARN`
//! (`schedule enable` or the CloudFormation template sets it): an event
//! for any other secret is refused before any call, naming both. It takes
//! `rotate`'s options from `HOSTKEYCTL_ROTATE_ARGS` (a JSON array of
//! strings, or words separated by spaces), less `--secret-id`: `--target`
//! for the nodes, `--pull` for a fleet whose timers follow the stages
//! (with `--trust-timers` when the function has no path to them),
//! `--min-overlap`, `--document`, `--ca-secret-id`, `--port`. Both are
//! checked when the function starts, so a wrong setting fails every
//! invocation with the same clear message.

use std::process::ExitCode;

use aws_lambda_events::event::secretsmanager::SecretsManagerSecretRotationEvent;
use clap::Parser as _;
use lambda_runtime::{LambdaEvent, service_fn};

use hostkeyctl::cli::{Cli, Command};
use hostkeyctl::ids::{SecretId, VersionId};
pub use hostkeyctl::rotation::scheduled::function::options_from;
use hostkeyctl::rotation::scheduled::function::{ARGS_VAR, SECRET_VAR};
use hostkeyctl::rotation::{FleetMode, LambdaStep};

/// The secret of [`SECRET_VAR`]: set, and an ARN (events name the ARN).
pub fn configured_secret(value: Option<&str>) -> Result<SecretId, String> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Err(format!(
            "{SECRET_VAR} is not set: the function rotates one secret, named by its ARN there (`hostkeyctl schedule enable --function ARN` or the CloudFormation template sets it)"
        ));
    };
    let secret = SecretId::parse(value).map_err(|e| format!("{SECRET_VAR}: {e}"))?;
    if !secret.as_str().starts_with("arn:") {
        return Err(format!(
            "{SECRET_VAR} is {:?}, not an ARN: Secrets Manager's events name the secret's ARN (`hostkeyctl status --secret-id NAME` shows it)",
            hostkeyctl::escape::escape(value)
        ));
    }
    Ok(secret)
}

/// `hostkeyctl rotate --secret-id SECRET OPTIONS...`, parsed.
pub fn parse(secret: &str, options: &[String]) -> Result<Cli, String> {
    if options
        .iter()
        .any(|o| o == "--secret-id" || o.starts_with("--secret-id="))
    {
        return Err(format!(
            "{ARGS_VAR} names --secret-id; each rotation event names the secret, leave it out"
        ));
    }
    let argv = ["hostkeyctl", "rotate", "--secret-id", secret]
        .into_iter()
        .map(str::to_owned)
        .chain(options.iter().cloned());
    let cli = Cli::try_parse_from(argv).map_err(|e| format!("{ARGS_VAR}: {}", e.render().to_string().trim()))?;
    let Command::Rotate(args) = &cli.command else {
        unreachable!("parsed as rotate")
    };
    for (set, name) in [
        (args.resume, "--resume"),
        (args.abort, "--abort"),
        (args.overlap, "--overlap"),
        (args.finish, "--finish"),
        (args.stop_after.is_some(), "--stop-after"),
        (args.wait.is_some(), "--wait"),
        (args.rollback, "--rollback"),
    ] {
        if set {
            return Err(format!(
                "{ARGS_VAR} sets {name}, which a scheduled rotation does not take: Secrets Manager drives the steps"
            ));
        }
    }
    Ok(cli)
}

/// Runs the scheduled rotation's function until the runtime stops it.
pub fn main(runtime: &tokio::runtime::Runtime, usage: impl Fn(String) -> ExitCode) -> ExitCode {
    let secret = match configured_secret(std::env::var(SECRET_VAR).ok().as_deref()) {
        Ok(secret) => secret,
        Err(message) => return usage(message),
    };
    let options = match options_from(&std::env::var(ARGS_VAR).unwrap_or_default()).and_then(|o| {
        // Checked now, so that a wrong setting is reported when the
        // function starts.
        parse(secret.as_str(), &o).map(|_| o)
    }) {
        Ok(options) => options,
        Err(message) => return usage(message),
    };
    let (options, secret) = (&options, &secret);
    let handler = service_fn(
        move |event: LambdaEvent<SecretsManagerSecretRotationEvent>| async move {
            handle(secret, options, event.payload, event.context.deadline)
                .await
                .map_err(|message| {
                    eprintln!("error: {}", hostkeyctl::escape::escape_lines(&message));
                    lambda_runtime::Error::from(message)
                })
        },
    );
    match runtime.block_on(lambda_runtime::run(handler)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => usage(format!("the Lambda runtime stopped: {e}")),
    }
}

/// One rotation step.
async fn handle(
    secret: &SecretId,
    options: &[String],
    event: SecretsManagerSecretRotationEvent,
    deadline_ms: u64,
) -> Result<serde_json::Value, String> {
    // Whose secret first: nothing is read or sent for another's.
    hostkeyctl::rotation::check_event_secret(secret, &event.secret_id).map_err(|e| e.to_string())?;
    let step = LambdaStep::parse(&event.step).ok_or_else(|| {
        format!(
            "unknown rotation step {:?}: expected createSecret, setSecret, testSecret or finishSecret",
            hostkeyctl::escape::escape(&event.step)
        )
    })?;
    let token = VersionId::parse(&event.client_request_token).map_err(|e| format!("ClientRequestToken: {e}"))?;
    let cli = parse(secret.as_str(), options)?;
    let Command::Rotate(args) = &cli.command else {
        unreachable!("parsed as rotate")
    };
    let mode = if args.pull { FleetMode::Pull } else { FleetMode::Push };
    eprintln!("{step} of {} to version {token} ({mode:?} fleet)", args.secret_id);
    // Stop a minute before Lambda's deadline, so that a step that cannot
    // finish gives Secrets Manager's staging back rather than be killed
    // leaving it (every later rotation would be refused).
    let now_ms = u64::try_from(time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000).unwrap_or(0);
    let budget =
        std::time::Duration::from_millis(deadline_ms.saturating_sub(now_ms).saturating_sub(60_000).max(30_000));
    let step_run = async {
        // A pull fleet's nodes are looked up too: the promotion gate asks
        // each whether it serves the announced set.
        let prepared = prepare(args, &cli.global).await.map_err(|e| (format!("{e:#}"), true))?;
        let say = |line: &str| eprintln!("{line}");
        let rotation = prepared.parts.rotation(
            &prepared.store,
            &prepared.dispatcher,
            prepared.prober.clone(),
            &args.secret_id,
            args.port,
            &say,
            args.gate(),
        );
        rotation
            .scheduled_step(step, &token, mode)
            .await
            .map_err(|e| (format!("{:#}", anyhow::Error::new(e)), false))
    };
    let done = match tokio::time::timeout(budget, step_run).await {
        Ok(Ok(done)) => done,
        Ok(Err((message, release))) => return Err(released(&cli.global, secret, &token, message, release).await),
        Err(_) => {
            let message = format!(
                "{step} did not finish within the function's time ({} s)",
                budget.as_secs()
            );
            return Err(released(&cli.global, secret, &token, message, true).await);
        }
    };
    eprintln!("{done}");
    Ok(serde_json::json!({
        "step": step,
        "secret": args.secret_id.to_string(),
        "version": token.to_string(),
        "fleet": mode,
        "result": done,
    }))
}

/// What the function's steps reach.
struct Reached {
    store: hostkeyctl::aws::SecretsManagerStore,
    dispatcher: hostkeyctl::aws::ssm::SsmDispatcher,
    prober: std::sync::Arc<hostkeyctl::scan::pacing::Paced<hostkeyctl::scan::SshProber>>,
    parts: hostkeyctl::rotation::setup::Prepared,
}

/// Sets up what a step reaches, as `rotate` does (the pull fleet's nodes
/// are looked up too: the promotion gate asks each whether it serves the
/// announced set).
async fn prepare(args: &hostkeyctl::cli::RotateArgs, global: &hostkeyctl::cli::GlobalArgs) -> anyhow::Result<Reached> {
    use hostkeyctl::scan::pacing::Paced;
    let config = hostkeyctl::aws::load_config(&global.aws).await?;
    let store = hostkeyctl::aws::SecretsManagerStore::new(&config);
    let dispatcher = hostkeyctl::aws::ssm::SsmDispatcher::new(&config);
    let fleet = hostkeyctl::aws::AwsFleet::new(&config).with_port(args.port);
    let push = args.push(hostkeyctl::aws::config_region(&config)?);
    let parts = hostkeyctl::rotation::setup::prepare(&store, &fleet, &dispatcher, &args.setup_request(&push)).await?;
    let prober = std::sync::Arc::new(Paced::for_this_user());
    Ok(Reached {
        store,
        dispatcher,
        prober,
        parts,
    })
}

/// `message`, after giving Secrets Manager's staging of `token` back when
/// the step could not say what it left (`release`): the next scheduled
/// rotation is then not refused.
async fn released(
    global: &hostkeyctl::cli::GlobalArgs,
    secret: &SecretId,
    token: &VersionId,
    message: String,
    release: bool,
) -> String {
    if !release {
        return message;
    }
    let outcome = match hostkeyctl::aws::load_config(&global.aws).await {
        Ok(config) => {
            hostkeyctl::rotation::release_staging(&hostkeyctl::aws::SecretsManagerStore::new(&config), secret, token)
                .await
                .map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    };
    match outcome {
        Ok(true) => format!("{message}\n  AWSPENDING was taken off {token}: the next scheduled rotation starts over"),
        Ok(false) => message,
        Err(e) => format!(
            "{message}\n  taking AWSPENDING off {token} failed too ({e}): until `hostkeyctl rotate --abort` does, Secrets Manager refuses the next rotation"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{configured_secret, options_from, parse};

    #[test]
    fn the_function_is_configured_with_one_secret_by_its_arn() {
        let arn = "arn:aws:secretsmanager:us-east-1:111122223333:secret:hostkeys/a-AbCdEf";
        assert_eq!(configured_secret(Some(arn)).unwrap().as_str(), arn);
        for (bad, says) in [
            (None, "is not set"),
            (Some("  "), "is not set"),
            (Some("hostkeys/a"), "not an ARN"),
        ] {
            let e = configured_secret(bad).unwrap_err();
            assert!(e.contains("HOSTKEYCTL_SECRET_ARN") && e.contains(says), "{bad:?}: {e}");
        }
        let other = "arn:aws:secretsmanager:us-east-1:111122223333:secret:hostkeys/b-XyZabc";
        let e = hostkeyctl::rotation::check_event_secret(&configured_secret(Some(arn)).unwrap(), other)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(arn) && e.contains(other) && e.contains("before any call"),
            "{e}"
        );
        assert!(hostkeyctl::rotation::check_event_secret(&configured_secret(Some(arn)).unwrap(), arn).is_ok());
    }

    #[test]
    fn options_come_as_json_or_words_and_are_checked() {
        assert_eq!(
            options_from(r#"["--target", "tag:Name=login node"]"#).unwrap(),
            ["--target", "tag:Name=login node"]
        );
        assert_eq!(
            options_from(" --target  tag:Role=login --pull ").unwrap(),
            ["--target", "tag:Role=login", "--pull"]
        );
        assert!(options_from("[1]").unwrap_err().contains("JSON array of strings"));
        let words = |s: &str| options_from(s).unwrap();
        assert!(parse("hk", &words("--target tag:Role=login --pull")).is_ok());
        for (bad, says) in [
            ("--target tag:Role=login --secret-id other", "leave it out"),
            ("--target tag:Role=login --finish", "--finish"),
            ("--target tag:Role=login --pull --wait 60", "--wait"),
            ("--pull", "--target"),
            ("--target tag:Role=login --no-such-option", "--no-such-option"),
        ] {
            let e = parse("hk", &words(bad)).unwrap_err();
            assert!(e.contains(says) && e.contains("HOSTKEYCTL_ROTATE_ARGS"), "{bad}: {e}");
        }
    }
}
