//! What several commands share: how library errors become exit statuses,
//! report rows, rollout options from the command line, and printing a
//! push. No command imports another; they all import this.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::cli::RolloutArgs;
use crate::dispatch::{self, PollStats};
use crate::exit::Failure;
use crate::fingerprint::Fingerprint;
use crate::ids::{Region, SecretId, VersionId};
use crate::keyset::{KeyAlgorithm, KeySet, MAX_RSA_BITS, MIN_RSA_BITS};
use crate::output::{self, OutputFormat};
use crate::rollout::{NodeResult, PushOptions, PushOutcome};
use crate::ssm_document::SentDocument;

/// Generates a set after checking the options a user gave for it.
pub fn generate_checked(algorithms: &[KeyAlgorithm], rsa_bits: usize) -> Result<KeySet, Failure> {
    let algorithms = dedup(algorithms);
    if algorithms.is_empty() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--algorithms is empty; name at least one of ed25519, ecdsa, rsa"
        )));
    }
    if algorithms.contains(&KeyAlgorithm::Rsa) && !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&rsa_bits) {
        return Err(Failure::usage(anyhow::anyhow!(
            "--rsa-bits {rsa_bits} is out of range; use {MIN_RSA_BITS} to {MAX_RSA_BITS} (default 3072)"
        )));
    }
    KeySet::generate(&algorithms, rsa_bits)
        .context("generating the key set")
        .map_err(Failure::usage)
}

fn dedup(algorithms: &[KeyAlgorithm]) -> Vec<KeyAlgorithm> {
    let mut out: Vec<KeyAlgorithm> = Vec::new();
    for a in algorithms {
        if !out.contains(a) {
            out.push(*a);
        }
    }
    out
}

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
    crate::aws::config_region(config).map_err(Failure::usage)
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
/// when one is settled (`None`: the flow settles it, or nothing is sent).
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

/// A progress bar of nodes done, on a terminal only.
pub struct NodeProgress {
    bar: Option<indicatif::ProgressBar>,
}

impl NodeProgress {
    /// A bar over `total` nodes (none when quiet or not on a terminal).
    pub fn new(total: usize, quiet: bool) -> Self {
        NodeProgress {
            bar: progress_bar(total, quiet),
        }
    }

    /// A rollout's progress callback.
    pub fn update(&self, done: usize, _total: usize) {
        if let Some(b) = &self.bar {
            b.set_position(done as u64);
        }
    }

    /// Clears the bar.
    pub fn finish(self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
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
