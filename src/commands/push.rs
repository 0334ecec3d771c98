//! `hostkeyctl push`: install one pinned key set version on every target
//! node through SSM Run Command, with an optional canary.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::aws;
use crate::cli::{GlobalArgs, PushArgs, RolloutArgs};
use crate::commands::{discovery_failure, store_failure};
use crate::discovery::{self, Instance};
use crate::dispatch::{self, CommandSpec, Invocation, PollStats, SsmDispatcher};
use crate::exit::{Failure, Status};
use crate::fingerprint::Fingerprint;
use crate::ids::{Program, Region, SecretId, VersionId};
use crate::install::{InstallReport, InstallResult};
use crate::output::escape;
use crate::output::{self, OutputFormat};
use crate::shell::{CommandLine, QuoteError};
use crate::store::{SecretStore, SecretsManagerStore, StoredVersion, VersionSelector};

/// One node's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct NodeResult {
    /// Instance id.
    pub instance_id: String,
    /// Name tag.
    pub name: Option<String>,
    /// Private address.
    pub private_ip: Option<String>,
    /// SSM status, or `NotSent`.
    pub status: String,
    /// What install reported: changed, unchanged, rolled_back, ...
    pub result: Option<String>,
    /// Fingerprints installed, by key type.
    pub fingerprints: BTreeMap<String, Fingerprint>,
    /// Whether the node is done right.
    pub ok: bool,
    /// Why not.
    pub error: Option<String>,
    /// The SSM command id.
    pub command_id: Option<String>,
}

#[derive(Serialize)]
struct PushReport<'a> {
    secret: &'a SecretId,
    version_id: &'a VersionId,
    fingerprints: Vec<&'a Fingerprint>,
    command_line: &'a str,
    command_ids: Vec<String>,
    polling: PollStats,
    targets: usize,
    succeeded: usize,
    failed: usize,
    results: &'a [NodeResult],
}

/// The command line the nodes run: ids and fingerprints only, never key
/// material (SSM shows it to anyone with ssm:ListCommands). Every word is a
/// typed value, quoted by [`crate::shell::quote`].
pub fn install_command_line(
    node_command: &Program,
    version: &StoredVersion,
    next: Option<&StoredVersion>,
    region: Option<&Region>,
) -> Result<String, QuoteError> {
    let mut line = CommandLine::new(node_command);
    line.arg("install")
        .option("secret-id", &version.arn)
        .option("version-id", &version.version_id);
    for key in version.document.keys.keys() {
        line.option("expect", key.fingerprint());
    }
    if let Some(next) = next {
        line.option("next-version-id", &next.version_id);
        for key in next.document.keys.keys() {
            line.option("expect-next", key.fingerprint());
        }
    }
    if let Some(region) = region {
        line.option("region", region);
    }
    line.arg("--quiet");
    line.build()
}

/// The region of an SDK configuration, parsed (it goes on node command lines).
pub fn config_region(config: &aws_config::SdkConfig) -> Result<Option<Region>, Failure> {
    config
        .region()
        .map(|r| Region::parse(r.as_ref()))
        .transpose()
        .map_err(Failure::usage)
}

/// What push shows of a node's report: the result (noting a change of
/// the sshd setting alone), the fingerprints, and the error.
fn summarize(report: &InstallReport) -> (String, BTreeMap<String, Fingerprint>, Option<String>) {
    let result = if report.result == InstallResult::Changed && !report.keys_changed {
        "changed (sshd setting only)".to_owned()
    } else {
        report.result.as_str().to_owned()
    };
    let error = match (&report.error, &report.rollback_error) {
        (Some(e), Some(r)) => Some(format!("{e}; rollback failed: {r}")),
        (Some(e), None) => Some(e.clone()),
        _ => None,
    };
    (result, report.fingerprints.clone(), error.map(|e| escape(&e)))
}

fn tail(text: &str, max: usize) -> String {
    let text = text.trim();
    let start = text
        .char_indices()
        .rev()
        .nth(max.saturating_sub(1))
        .map_or(0, |(i, _)| i);
    text[start..].to_owned()
}

fn node_result(instance: &Instance, inv: Option<&Invocation>, not_sent_reason: &str) -> NodeResult {
    let mut r = NodeResult {
        instance_id: instance.instance_id.clone(),
        name: instance.name.clone(),
        private_ip: instance.private_ip.clone(),
        status: "NotSent".to_owned(),
        result: None,
        fingerprints: BTreeMap::new(),
        ok: false,
        error: Some(not_sent_reason.to_owned()),
        command_id: None,
    };
    let Some(inv) = inv else { return r };
    r.status = inv.status.clone();
    r.command_id = Some(inv.command_id.clone());
    let parsed = InstallReport::from_output(&inv.stdout);
    let (result, fingerprints, error) = match &parsed {
        Ok(report) => {
            let (result, fingerprints, error) = summarize(report);
            (Some(result), fingerprints, error)
        }
        Err(_) => (None, BTreeMap::new(), None),
    };
    r.ok = inv.status == "Success" && parsed.as_ref().is_ok_and(|p| p.result.is_done());
    r.error = if r.ok {
        None
    } else if let Some(e) = error {
        Some(e)
    } else if !inv.is_final() {
        Some(format!(
            "timed out waiting for the node (SSM status {})",
            escape(&inv.status)
        ))
    } else if let (true, Err(e)) = (inv.status == "Success", &parsed) {
        Some(format!("the command succeeded but {e}"))
    } else if !inv.stderr.trim().is_empty() {
        Some(escape(&tail(&inv.stderr, 400)))
    } else {
        Some(format!(
            "SSM status {}, exit code {:?}",
            escape(&inv.status),
            inv.response_code
        ))
    };
    r.result = result;
    r.fingerprints = fingerprints;
    r
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

/// Runs `push`.
pub async fn run(args: &PushArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let options = PushOptions::from_args(&args.rollout, global.quiet)?;
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws)?;
    let selector = VersionSelector::from_options(args.version_id.as_ref(), args.stage.as_ref());
    let store = SecretsManagerStore::new(&config);
    let version = store.get(&args.secret_id, &selector).await.map_err(store_failure)?;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let instances = discovery::discover(&ec2, &args.targets)
        .await
        .map_err(discovery_failure)?;
    if args.dry_run {
        let region = config_region(&config)?;
        let command_line =
            install_command_line(&options.node_command, &version, None, region.as_ref()).map_err(Failure::usage)?;
        let mut table = output::table(&["INSTANCE", "NAME", "PRIVATE IP"]);
        for i in &instances {
            table.add_row(vec![
                i.instance_id.clone(),
                i.name.clone().unwrap_or_default(),
                i.private_ip.clone().unwrap_or_default(),
            ]);
        }
        match output {
            OutputFormat::Json => output::print_json(&serde_json::json!({
                "dry_run": true,
                "secret": version.arn,
                "version_id": version.version_id,
                "document": options.document,
                "command_line": command_line,
                "targets": instances,
            }))
            .map_err(Failure::usage)?,
            _ => {
                println!("would send to {} node(s) with {}:", instances.len(), options.document);
                println!("{table}");
                println!("{command_line}");
            }
        }
        return Ok(Status::Success);
    }

    let outcome = push_version(&config, &version, None, &instances, &options).await?;
    print_outcome(&outcome, &version, output)?;
    Ok(if outcome.all_ok() {
        Status::Success
    } else {
        Status::Incomplete
    })
}

/// How to push.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// SSM document.
    pub document: String,
    /// How nodes call hostkeyctl.
    pub node_command: Program,
    /// SSM MaxConcurrency over the fleet.
    pub max_concurrency: String,
    /// SSM MaxErrors over the fleet.
    pub max_errors: String,
    /// Overall timeout (also the execution timeout on each node).
    pub timeout: Duration,
    /// Nodes to install first.
    pub canary: usize,
    /// No progress bar.
    pub quiet: bool,
}

/// What a push did.
#[derive(Clone, Debug, Serialize)]
pub struct PushOutcome {
    /// The command line sent.
    pub command_line: String,
    /// SSM command ids.
    pub command_ids: Vec<String>,
    /// Polling effort.
    pub polling: PollStats,
    /// Per node.
    pub results: Vec<NodeResult>,
}

impl PushOptions {
    /// Validated options from the command line.
    pub fn from_args(args: &RolloutArgs, quiet: bool) -> Result<Self, Failure> {
        dispatch::validate_rate("--max-concurrency", &args.max_concurrency)
            .map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
        dispatch::validate_rate("--max-errors", &args.max_errors).map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
        if args.timeout == 0 {
            return Err(Failure::usage(anyhow::anyhow!("--timeout must be at least 1 second")));
        }
        Ok(PushOptions {
            document: args.document.clone(),
            node_command: args.node_command.clone(),
            max_concurrency: args.max_concurrency.clone(),
            max_errors: args.max_errors.clone(),
            timeout: Duration::from_secs(args.timeout),
            canary: args.canary,
            quiet,
        })
    }
}

impl PushOutcome {
    /// Whether every node is done right.
    pub fn all_ok(&self) -> bool {
        self.results.iter().all(|r| r.ok)
    }
}

/// Installs `version` on `instances` through SSM Run Command: a canary
/// wave first when asked, then the rest, in batches of at most 50.
pub async fn push_version(
    config: &aws_config::SdkConfig,
    version: &StoredVersion,
    next: Option<&StoredVersion>,
    instances: &[Instance],
    options: &PushOptions,
) -> Result<PushOutcome, Failure> {
    let region = config_region(config)?;
    let command_line =
        install_command_line(&options.node_command, version, next, region.as_ref()).map_err(Failure::usage)?;
    let spec = CommandSpec {
        document: options.document.clone(),
        command_line: command_line.clone(),
        comment: format!("hostkeyctl push {}", version.version_id),
        max_concurrency: options.max_concurrency.clone(),
        max_errors: options.max_errors.clone(),
        execution_timeout: options.timeout,
    };
    let dispatcher = SsmDispatcher::new(config);
    let deadline = Instant::now() + options.timeout;
    let ids: Vec<String> = instances.iter().map(|i| i.instance_id.clone()).collect();
    let canary = options.canary.min(ids.len());
    let waves: Vec<&[String]> = if canary > 0 && canary < ids.len() {
        vec![&ids[..canary], &ids[canary..]]
    } else {
        vec![&ids[..]]
    };
    let bar = progress_bar(ids.len(), options.quiet);
    let mut seen: BTreeMap<String, Invocation> = BTreeMap::new();
    let mut command_ids = Vec::new();
    let mut polling = PollStats::default();
    let mut not_sent_reason = String::from("not sent");
    for (wave_index, wave) in waves.iter().enumerate() {
        let total = wave.len();
        let batches: Vec<Vec<String>> = wave
            .chunks(dispatch::MAX_IDS_PER_COMMAND)
            .map(<[String]>::to_vec)
            .collect();
        let mut commands = Vec::new();
        for batch in &batches {
            let batch_spec = CommandSpec {
                max_concurrency: dispatch::per_batch(&spec.max_concurrency, batch.len(), total, true),
                max_errors: dispatch::per_batch(&spec.max_errors, batch.len(), total, false),
                ..spec.clone()
            };
            match dispatcher.send(&batch_spec, batch).await {
                Ok(sent) => commands.extend(sent),
                Err(e) => {
                    if commands.is_empty() && seen.is_empty() {
                        return Err(Failure::aws(e));
                    }
                    not_sent_reason = format!("not sent: {e}");
                    break;
                }
            }
        }
        command_ids.extend(commands.iter().map(|(id, _)| id.clone()));
        let done_before = seen.len();
        let progress = |finished: usize, _total: usize| {
            if let Some(b) = &bar {
                b.set_position((done_before + finished) as u64);
            }
        };
        let (states, stats) = dispatcher
            .wait(&commands, deadline, &progress)
            .await
            .map_err(Failure::aws)?;
        polling += stats;
        for (command_id, ids) in &commands {
            if ids.iter().any(|id| !states[id].is_final()) {
                tracing::warn!("command {command_id} did not finish in time; cancelling it");
                if let Err(e) = dispatcher.cancel(command_id).await {
                    tracing::warn!("could not cancel {command_id}: {e}");
                }
            }
        }
        let wave_ok = states.values().all(|inv| {
            let instance = instances.iter().find(|i| i.instance_id == inv.instance_id);
            instance.is_some_and(|i| node_result(i, Some(inv), "").ok)
        });
        seen.extend(states);
        if wave_index == 0 && waves.len() > 1 && !wave_ok {
            not_sent_reason = format!("not sent: the canary ({canary} node(s)) failed");
            break;
        }
        if Instant::now() >= deadline {
            not_sent_reason = "not sent: --timeout reached".to_owned();
            break;
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    let results = instances
        .iter()
        .map(|i| node_result(i, seen.get(&i.instance_id), &not_sent_reason))
        .collect();
    Ok(PushOutcome {
        command_line,
        command_ids,
        polling,
        results,
    })
}

/// Prints a push outcome as a table or JSON.
pub fn print_outcome(outcome: &PushOutcome, version: &StoredVersion, output: OutputFormat) -> Result<(), Failure> {
    let results = &outcome.results;
    let succeeded = results.iter().filter(|r| r.ok).count();
    let report = PushReport {
        secret: &version.arn,
        version_id: &version.version_id,
        fingerprints: version.document.keys.keys().map(|k| k.fingerprint()).collect(),
        command_line: &outcome.command_line,
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
                table.add_row(vec![
                    r.instance_id.clone(),
                    r.name.clone().unwrap_or_default(),
                    r.private_ip.clone().unwrap_or_default(),
                    r.status.clone(),
                    r.result.clone().unwrap_or_default(),
                    r.error.clone().unwrap_or_default(),
                ]);
            }
            println!("{table}");
            println!(
                "version {}: {succeeded} of {} node(s) done, {} failed",
                version.version_id,
                results.len(),
                results.len() - succeeded
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::tail;

    #[test]
    fn tail_keeps_the_end() {
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("ab", 10), "ab");
    }
}
