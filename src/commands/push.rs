//! `hostkeyctl push`: install one pinned key set version on every target
//! node through SSM Run Command, with an optional canary.

use std::io::IsTerminal;
use std::time::Duration;

use serde::Serialize;

use crate::aws;
use crate::cli::{GlobalArgs, PushArgs, RolloutArgs};
use crate::commands::{discovery_failure, store_failure};
use crate::discovery::{Ec2Fleet, Fleet, Instance};
use crate::dispatch::{self, Dispatcher, PollStats, SsmDispatcher};
use crate::exit::{Failure, Status};
use crate::fingerprint::Fingerprint;
use crate::ids::{Region, SecretId, VersionId};
use crate::output::{self, OutputFormat};
use crate::rollout::{self, NodeResult, PushOptions, PushOutcome, RolloutError, install_command_line};
use crate::ssm_document::{Kind, SentDocument};
use crate::store::{SecretStore, SecretsManagerStore, StoredVersion, VersionSelector};

#[derive(Serialize)]
struct PushReport<'a> {
    secret: &'a SecretId,
    version_id: &'a VersionId,
    fingerprints: Vec<&'a Fingerprint>,
    command_line: &'a str,
    document: &'a SentDocument,
    command_ids: Vec<String>,
    polling: PollStats,
    targets: usize,
    succeeded: usize,
    failed: usize,
    results: &'a [NodeResult],
}

/// The region of an SDK configuration, parsed (it goes on node command lines).
pub fn config_region(config: &aws_config::SdkConfig) -> Result<Option<Region>, Failure> {
    config
        .region()
        .map(|r| Region::parse(r.as_ref()))
        .transpose()
        .map_err(Failure::usage)
}

fn progress_bar(total: usize, quiet: bool) -> Option<indicatif::ProgressBar> {
    if quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(total as u64);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len} nodes done ({elapsed})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(200));
    Some(bar)
}

/// Validated rollout options from the command line, with the document
/// [`resolve_document`] settled (`None` where nothing is sent).
pub fn push_options(
    args: &RolloutArgs,
    config: &aws_config::SdkConfig,
    document: Option<SentDocument>,
) -> Result<PushOptions, Failure> {
    dispatch::validate_rate("--max-concurrency", &args.max_concurrency)
        .map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    dispatch::validate_rate("--max-errors", &args.max_errors).map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    if args.timeout == 0 {
        return Err(Failure::usage(anyhow::anyhow!("--timeout must be at least 1 second")));
    }
    Ok(PushOptions {
        document,
        node_command: args.node_command.clone(),
        max_concurrency: args.max_concurrency.clone(),
        max_errors: args.max_errors.clone(),
        timeout: Duration::from_secs(args.timeout),
        canary: args.canary,
        region: config_region(config)?,
    })
}

/// Rollout failures as exit statuses.
pub fn rollout_failure(e: RolloutError) -> Failure {
    match e {
        RolloutError::Aws(a) => Failure::aws(a),
        other => Failure::usage(other),
    }
}

/// Pushes with a progress bar on a terminal.
pub async fn push_with_progress(
    dispatcher: &impl Dispatcher,
    version: &StoredVersion,
    next: Option<&StoredVersion>,
    instances: &[Instance],
    options: &PushOptions,
    quiet: bool,
) -> Result<PushOutcome, Failure> {
    let bar = progress_bar(instances.len(), quiet);
    let progress = |done: usize, _total: usize| {
        if let Some(b) = &bar {
            b.set_position(done as u64);
        }
    };
    let outcome = rollout::push_version(dispatcher, version, next, instances, options, &progress).await;
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    outcome.map_err(rollout_failure)
}

/// `--version-id`/`--stage` pin what push expects the stages to say: it
/// installs the desired state of the stages only (what the nodes' timers
/// install too), never another version the timers would undo.
async fn check_pin(
    args: &PushArgs,
    store: &impl SecretStore,
    desired: &crate::store::DesiredState,
) -> Result<(), Failure> {
    if args.version_id.is_none() && args.stage.is_none() {
        return Ok(());
    }
    let selector = VersionSelector::from_options(args.version_id.as_ref(), args.stage.as_ref());
    let pinned = store.get(&args.secret_id, &selector).await.map_err(store_failure)?;
    if pinned.version_id == desired.current.version_id {
        return Ok(());
    }
    Err(Failure::usage(anyhow::anyhow!(
        "{selector} is version {}, but the nodes must serve AWSCURRENT ({}){}: push installs only what the stages say, which the nodes' timers install too. Move the stages with `hostkeyctl rotate` (or drop --version-id/--stage)",
        pinned.version_id,
        desired.current.version_id,
        desired
            .next
            .as_ref()
            .map(|n| format!(", with AWSPENDING {} as extra keys", n.version_id))
            .unwrap_or_default()
    )))
}

/// Runs `push`.
pub async fn run(args: &PushArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
    let document = crate::commands::resolve_document(
        &args.rollout.document,
        Kind::Install,
        &args.rollout.node_command,
        &config,
    )
    .await?;
    let options = push_options(&args.rollout, &config, Some(document.clone()))?;
    let store = SecretsManagerStore::new(&config);
    let desired = crate::store::desired_state(&store, &args.secret_id)
        .await
        .map_err(store_failure)?;
    check_pin(args, &store, &desired).await?;
    let (version, next) = (&desired.current, desired.next.as_ref());
    let instances = Ec2Fleet::new(&config)
        .with_port(args.port)
        .discover(&args.targets)
        .await
        .map_err(discovery_failure)?;
    if args.dry_run {
        let command_line = install_command_line(&options.node_command, version, next, options.region.as_ref())
            .map_err(Failure::usage)?;
        let mut table = output::table(&["INSTANCE", "NAME", "PRIVATE IP"]);
        for i in &instances {
            output::add_row(
                &mut table,
                vec![
                    i.instance_id.clone(),
                    i.name.clone().unwrap_or_default(),
                    i.private_ip.clone().unwrap_or_default(),
                ],
            );
        }
        match output {
            OutputFormat::Json => output::print_json(&serde_json::json!({
                "dry_run": true,
                "secret": version.arn,
                "version_id": version.version_id,
                "document": document,
                "command_line": command_line,
                "targets": instances,
            }))
            .map_err(Failure::usage)?,
            _ => {
                println!("would send to {} node(s) with {}:", instances.len(), document);
                println!("{table}");
                println!("{command_line}");
            }
        }
        return Ok(Status::Success);
    }

    let dispatcher = SsmDispatcher::new(&config);
    let outcome = push_with_progress(&dispatcher, version, next, &instances, &options, global.quiet).await?;
    print_outcome(&outcome, &version.arn, output)?;
    Ok(if outcome.all_ok() {
        Status::Success
    } else {
        Status::Incomplete
    })
}

/// Prints a push outcome as a table or JSON.
pub fn print_outcome(outcome: &PushOutcome, secret: &SecretId, output: OutputFormat) -> Result<(), Failure> {
    let results = &outcome.results;
    let succeeded = results.iter().filter(|r| r.ok).count();
    let report = PushReport {
        secret,
        version_id: &outcome.version_id,
        fingerprints: outcome.fingerprints.iter().collect(),
        command_line: &outcome.command_line,
        document: &outcome.document,
        command_ids: outcome.command_ids.clone(),
        polling: outcome.polling,
        targets: results.len(),
        succeeded,
        failed: results.len() - succeeded,
        results,
    };
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => {
            let mut table = output::table(&["INSTANCE", "NAME", "ADDRESS", "STATUS", "RESULT", "ERROR"]);
            for r in results {
                output::add_row(
                    &mut table,
                    vec![
                        r.instance_id.clone(),
                        r.name.clone().unwrap_or_default(),
                        r.private_ip.clone().unwrap_or_default(),
                        r.status.clone(),
                        r.result.clone().unwrap_or_default(),
                        r.error.clone().unwrap_or_default(),
                    ],
                );
            }
            println!("{table}");
            println!("{}", outcome.document);
            println!(
                "version {}: {succeeded} of {} node(s) done, {} failed",
                outcome.version_id,
                results.len(),
                results.len() - succeeded
            );
        }
    }
    Ok(())
}
