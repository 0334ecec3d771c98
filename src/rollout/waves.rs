//! A push's flow: the desired state sent in waves (a canary first when
//! asked, then batches of at most 50), each node judged by its report.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::aws_error::AwsError;
use crate::discovery::Instance;
use crate::dispatch::{self, CommandSpec, Dispatcher, Invocation, PollStats, Progress};
use crate::escape::escape;
use crate::fingerprint::Fingerprint;
use crate::ids::{Program, Region, VersionId};
use crate::install::{InstallReport, InstallResult};
use crate::shell::{CommandLine, QuoteError};
use crate::ssm_document::{SentDocument, Trust};
use crate::store::StoredVersion;

/// Why a rollout could not start.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// SSM refused the first command or a poll.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The command line cannot be built.
    #[error(transparent)]
    Quote(#[from] QuoteError),
    /// No document was settled for this run (a pull rotation sends
    /// nothing).
    #[error("no SSM document was settled for this run (a pull rotation sends nothing); nothing was sent")]
    NoDocument,
}

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
    /// What the node did about the post-quantum key exchange (a node whose
    /// sshd has none names its upgrade).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kex: Option<crate::install::kex::KexReport>,
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
        kex: None,
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
    } else if inv.response_code == Some(127) && parsed.is_err() {
        Some(format!(
            "hostkeyctl is not installed on this node (exit 127: {}): put it there with `hostkeyctl deliver` (docs/install.md, \"Running nodes\")",
            escape(tail(&inv.stderr, 200).lines().last().unwrap_or("command not found"))
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
    r.kex = parsed.ok().and_then(|p| p.kex);
    r
}

/// How to push.
#[derive(Clone, Debug)]
pub struct PushOptions {
    /// The SSM document and the version sent, settled (and trusted by its
    /// hash) before anything is sent; `None` where nothing is ever sent (a
    /// pull rotation).
    pub document: Option<SentDocument>,
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
    /// The region the nodes read the secret in (`--region` on their line).
    pub region: Option<Region>,
}

impl PushOptions {
    /// What the options alone refuse, before any call: SSM's rates
    /// (`--max-concurrency`, `--max-errors`) and a zero timeout.
    pub fn check(&self) -> Result<(), String> {
        dispatch::validate_rate("--max-concurrency", &self.max_concurrency)?;
        dispatch::validate_rate("--max-errors", &self.max_errors)?;
        if self.timeout.is_zero() {
            return Err("--timeout must be at least 1 second".to_owned());
        }
        Ok(())
    }
}

/// What a push did.
#[derive(Clone, Debug, Serialize)]
pub struct PushOutcome {
    /// The version pushed.
    pub version_id: VersionId,
    /// Its fingerprints.
    pub fingerprints: Vec<Fingerprint>,
    /// The command line sent.
    pub command_line: String,
    /// The SSM document it went out with: name, version, hash, and why it
    /// was trusted.
    pub document: SentDocument,
    /// SSM command ids.
    pub command_ids: Vec<String>,
    /// Polling effort.
    pub polling: PollStats,
    /// Per node.
    pub results: Vec<NodeResult>,
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
    dispatcher: &impl Dispatcher,
    version: &StoredVersion,
    next: Option<&StoredVersion>,
    instances: &[Instance],
    options: &PushOptions,
    progress: Progress<'_>,
) -> Result<PushOutcome, RolloutError> {
    let document = options.document.clone().ok_or(RolloutError::NoDocument)?;
    let command_line = install_command_line(&options.node_command, version, next, options.region.as_ref())?;
    let parameters = (document.trust != Trust::Shell)
        .then(|| crate::ssm_document::parameters(version, next, options.region.as_ref()));
    let spec = CommandSpec {
        document: document.name.clone(),
        document_version: document.version.clone(),
        parameters,
        command_line: command_line.clone(),
        comment: format!("hostkeyctl push {}", version.version_id),
        max_concurrency: options.max_concurrency.clone(),
        max_errors: options.max_errors.clone(),
        execution_timeout: options.timeout,
    };
    let deadline = Instant::now() + options.timeout;
    let ids: Vec<String> = instances.iter().map(|i| i.instance_id.clone()).collect();
    let canary = options.canary.min(ids.len());
    let waves: Vec<&[String]> = if canary > 0 && canary < ids.len() {
        vec![&ids[..canary], &ids[canary..]]
    } else {
        vec![&ids[..]]
    };
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
                        return Err(RolloutError::Aws(e));
                    }
                    not_sent_reason = format!("not sent: {e}");
                    break;
                }
            }
        }
        command_ids.extend(commands.iter().map(|(id, _)| id.clone()));
        let done_before = seen.len();
        let total_ids = ids.len();
        let wave_progress = |finished: usize, _total: usize| progress(done_before + finished, total_ids);
        let (states, stats) = dispatcher.wait(&commands, deadline, &wave_progress).await?;
        polling += stats;
        for (command_id, ids) in &commands {
            if ids.iter().any(|id| !states[id].is_final()) {
                tracing::warn!("command {} did not finish in time; cancelling it", escape(command_id));
                if let Err(e) = dispatcher.cancel(command_id).await {
                    tracing::warn!("could not cancel {}: {}", escape(command_id), escape(&e.to_string()));
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
    let results = instances
        .iter()
        .map(|i| node_result(i, seen.get(&i.instance_id), &not_sent_reason))
        .collect();
    Ok(PushOutcome {
        version_id: version.version_id.clone(),
        fingerprints: version.document.keys.keys().map(|k| k.fingerprint().clone()).collect(),
        command_line,
        document,
        command_ids,
        polling,
        results,
    })
}

impl crate::exit::ExitStatus for RolloutError {
    /// AWS trouble is 4; the rest 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            RolloutError::Aws(a) => crate::exit::ExitStatus::status(a),
            _ => crate::exit::Status::Usage,
        }
    }
}

impl crate::exit::ExitStatus for PushOutcome {
    /// Every node done: 0; some failed: 3.
    fn status(&self) -> crate::exit::Status {
        if self.all_ok() {
            crate::exit::Status::Success
        } else {
            crate::exit::Status::Incomplete
        }
    }
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
