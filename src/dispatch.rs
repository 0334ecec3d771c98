//! SSM Run Command dispatch: send one shell command line to many instances
//! and collect each instance's outcome.
//!
//! At most 50 instance ids go in one `SendCommand` (the API's limit); each
//! batch is one command. Polling uses `ListCommandInvocations` with
//! `Details`, one call per unfinished batch per round, never one call per
//! instance, with a growing interval. A command can be invisible to reads
//! for a moment after it was sent; that is waited out, not reported.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use crate::aws_error::AwsError;

/// SSM's limit on instance ids per `SendCommand`.
pub const MAX_IDS_PER_COMMAND: usize = 50;
/// How long a fresh command may stay invisible to reads.
pub const VISIBILITY_GRACE: Duration = Duration::from_secs(30);

/// What to run and how.
#[derive(Clone, Debug)]
pub struct CommandSpec {
    /// SSM document, e.g. `AWS-RunShellScript`.
    pub document: String,
    /// The document version to run (pinned), or the default.
    pub document_version: Option<String>,
    /// The document's parameters; `None` for a shell document, which gets
    /// `commands` (the command line) and `executionTimeout`.
    pub parameters: Option<BTreeMap<String, Vec<String>>>,
    /// The shell command line (no secrets: SSM shows it to anyone with
    /// `ssm:ListCommands`).
    pub command_line: String,
    /// Comment shown in the SSM console (≤ 100 characters).
    pub comment: String,
    /// `MaxConcurrency` for each batch.
    pub max_concurrency: String,
    /// `MaxErrors` for each batch.
    pub max_errors: String,
    /// Execution timeout on the node.
    pub execution_timeout: Duration,
}

/// The final (or last seen) state of one instance.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Invocation {
    /// Instance id.
    pub instance_id: String,
    /// The command it belongs to.
    pub command_id: String,
    /// SSM status: Pending, InProgress, Success, Failed, TimedOut, Cancelled,
    /// ...; `NotVisible` before SSM shows it.
    pub status: String,
    /// The command's exit code, when it ran.
    pub response_code: Option<i32>,
    /// stdout of the command (as cut by SSM).
    pub stdout: String,
    /// stderr of the command (as cut by SSM).
    pub stderr: String,
}

impl Invocation {
    /// Whether SSM will not change this any more.
    pub fn is_final(&self) -> bool {
        matches!(
            self.status.as_str(),
            "Success"
                | "Failed"
                | "TimedOut"
                | "Cancelled"
                | "Undeliverable"
                | "Terminated"
                | "DeliveryTimedOut"
                | "ExecutionTimedOut"
        )
    }
}

/// How much polling a wait took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PollStats {
    /// Polling rounds.
    pub rounds: usize,
    /// `ListCommandInvocations` calls (pages included).
    pub list_calls: usize,
    /// The most calls made in one round.
    pub max_calls_per_round: usize,
}

impl std::ops::AddAssign for PollStats {
    fn add_assign(&mut self, other: Self) {
        self.rounds += other.rounds;
        self.list_calls += other.list_calls;
        self.max_calls_per_round = self.max_calls_per_round.max(other.max_calls_per_round);
    }
}

/// Progress callback: (finished, total).
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// What `DescribeDocument` says of a document's default version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployed {
    /// The version described: the default one.
    pub version: String,
    /// Its hash, lowercase hex.
    pub hash: String,
    /// `Sha256` or `Sha1` (older documents).
    pub hash_type: String,
    /// The latest version's number (versions count up from 1).
    pub latest: Option<String>,
}

impl Deployed {
    /// Whether its content is `text`.
    pub fn holds(&self, text: &str) -> bool {
        let computed = match self.hash_type.as_str() {
            "Sha1" => {
                use sha1::Digest;
                hex::encode(sha1::Sha1::digest(text.as_bytes()))
            }
            _ => {
                use sha2::Digest;
                hex::encode(sha2::Sha256::digest(text.as_bytes()))
            }
        };
        self.hash.eq_ignore_ascii_case(&computed)
    }
}

/// Sends a command line to instances and reports each one's outcome: SSM
/// Run Command ([`crate::aws::ssm::SsmDispatcher`]), or an in-process double that runs
/// `install` against in-memory nodes (feature `testing`).
pub trait Dispatcher: Sync {
    /// Sends `spec` to `instance_ids` in batches of at most 50; returns the
    /// command id of each batch with its instances.
    fn send(
        &self,
        spec: &CommandSpec,
        instance_ids: &[String],
    ) -> impl Future<Output = Result<Vec<(String, Vec<String>)>, AwsError>> + Send;

    /// Waits until every invocation is final or `deadline` passes, then
    /// reports them as last seen, by instance.
    fn wait(
        &self,
        commands: &[(String, Vec<String>)],
        deadline: Instant,
        progress: Progress<'_>,
    ) -> impl Future<Output = Result<(BTreeMap<String, Invocation>, PollStats), AwsError>> + Send;

    /// Asks that what has not finished be cancelled.
    fn cancel(&self, command_id: &str) -> impl Future<Output = Result<(), AwsError>> + Send;

    /// What SSM holds of document `name`: its default version and that
    /// version's hash (`DescribeDocument`), or `None` when there is no such
    /// document. What [`crate::ssm_document::resolve`] trusts or refuses.
    fn document(&self, name: &str) -> impl Future<Output = Result<Option<Deployed>, AwsError>> + Send;

    /// The content of `version` of document `name` (`GetDocument`), or
    /// `None` when there is no such document or version. Only for a
    /// document whose content is not fixed by this binary (the setup
    /// document pins builds): what it says is checked against what this
    /// binary writes for it before anything is sent.
    fn document_content(
        &self,
        name: &str,
        version: &str,
    ) -> impl Future<Output = Result<Option<String>, AwsError>> + Send;
}

/// One read of a command's invocations (`ListCommandInvocations`, all
/// pages), counting the calls made.
pub trait InvocationSource: Sync {
    /// The invocations of `command_id` as SSM shows them now.
    fn list(
        &self,
        command_id: &str,
        calls: &mut usize,
    ) -> impl Future<Output = Result<Vec<Invocation>, AwsError>> + Send;
}

/// How polling paces itself.
#[derive(Clone, Copy, Debug)]
pub struct Pacing {
    /// First interval; it grows by half each round up to 5 s.
    pub first_poll: Duration,
    /// How long a fresh command may stay invisible to reads.
    pub visibility_grace: Duration,
}

/// Polls until every invocation is final or `deadline` passes; then the
/// rest are reported as they were last seen. One read per unfinished
/// command per round, never one per instance. A command SSM does not show
/// yet (`NotFound` within the grace) is waited for, not reported.
pub async fn poll(
    source: &impl InvocationSource,
    commands: &[(String, Vec<String>)],
    deadline: Instant,
    progress: Progress<'_>,
    pacing: Pacing,
) -> Result<(BTreeMap<String, Invocation>, PollStats), AwsError> {
    let sent_at = Instant::now();
    let mut stats = PollStats::default();
    let mut state: BTreeMap<String, Invocation> = BTreeMap::new();
    for (command_id, ids) in commands {
        for id in ids {
            state.insert(
                id.clone(),
                Invocation {
                    instance_id: id.clone(),
                    command_id: command_id.clone(),
                    status: "NotVisible".to_owned(),
                    response_code: None,
                    stdout: String::new(),
                    stderr: String::new(),
                },
            );
        }
    }
    let total = state.len();
    let mut interval = pacing.first_poll;
    loop {
        stats.rounds += 1;
        let calls_before = stats.list_calls;
        for (command_id, ids) in commands {
            if ids.iter().all(|id| state[id].is_final()) {
                continue;
            }
            match source.list(command_id, &mut stats.list_calls).await {
                Ok(rows) => {
                    for row in rows {
                        if let Some(slot) = state.get_mut(&row.instance_id) {
                            *slot = row;
                        }
                    }
                }
                // Just sent: SSM may not show the command yet.
                Err(AwsError::NotFound { .. }) if sent_at.elapsed() < pacing.visibility_grace => {}
                Err(e) => return Err(e),
            }
        }
        stats.max_calls_per_round = stats.max_calls_per_round.max(stats.list_calls - calls_before);
        let finished = state.values().filter(|i| i.is_final()).count();
        progress(finished, total);
        if finished == total || Instant::now() >= deadline {
            return Ok((state, stats));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::sleep(interval.min(left)).await;
        interval = (interval * 3 / 2).min(Duration::from_secs(5));
    }
}

/// Splits a fleet-wide rate value over batches: percentages apply to each
/// batch as they are; an absolute number is shared in proportion to the
/// batch's size (rounded down, at least 1 for concurrency).
pub fn per_batch(value: &str, batch_size: usize, total: usize, at_least_one: bool) -> String {
    if value.ends_with('%') || total <= batch_size {
        return value.to_owned();
    }
    let Ok(n) = value.parse::<usize>() else {
        return value.to_owned();
    };
    let share = n * batch_size / total.max(1);
    if at_least_one { share.max(1) } else { share }.to_string()
}

/// Checks a MaxConcurrency / MaxErrors value as SSM accepts it.
pub fn validate_rate(name: &str, value: &str) -> Result<(), String> {
    let ok = match value.strip_suffix('%') {
        Some(p) => p.parse::<u32>().is_ok_and(|p| p <= 100),
        None => value.parse::<u32>().is_ok(),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name} {value:?} is not a number or a percentage such as 10 or 25%"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{per_batch, validate_rate};

    #[test]
    fn rates_are_shared_over_batches() {
        assert_eq!(per_batch("10%", 50, 300, true), "10%");
        assert_eq!(per_batch("30", 50, 300, true), "5");
        assert_eq!(per_batch("1", 50, 300, true), "1");
        assert_eq!(per_batch("1", 50, 300, false), "0");
        assert_eq!(per_batch("7", 3, 3, true), "7");
        assert!(validate_rate("--max-errors", "0").is_ok());
        assert!(validate_rate("--max-errors", "25%").is_ok());
        assert!(validate_rate("--max-errors", "101%").is_err());
        assert!(validate_rate("--max-errors", "many").is_err());
    }
}

/// SSM's view of an instance (`DescribeInstanceInformation`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// `Online`, `ConnectionLost`, `Inactive`.
    pub ping_status: String,
    /// The SSM Agent's version.
    pub agent_version: Option<String>,
}

/// The instances SSM manages.
pub trait ManagedInstances: Sync {
    /// The registration of each of `ids` SSM manages (the others are
    /// absent).
    fn registrations(
        &self,
        ids: &[String],
    ) -> impl Future<Output = Result<BTreeMap<String, Registration>, AwsError>> + Send;
}
