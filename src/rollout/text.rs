//! A push's report: the JSON document and the table a human reads.

use serde::Serialize;

use super::{NodeResult, PushOutcome};
use crate::dispatch::PollStats;
use crate::fingerprint::Fingerprint;
use crate::ids::{SecretId, VersionId};
use crate::output;
use crate::ssm_document::SentDocument;

/// `push`'s JSON report (and `rotate`'s, per push).
#[derive(Serialize)]
pub struct PushReport<'a> {
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

impl PushOutcome {
    /// The JSON report of this push of `secret`.
    pub fn report<'a>(&'a self, secret: &'a SecretId) -> PushReport<'a> {
        let succeeded = self.results.iter().filter(|r| r.ok).count();
        PushReport {
            secret,
            version_id: &self.version_id,
            fingerprints: self.fingerprints.iter().collect(),
            command_line: &self.command_line,
            document: &self.document,
            command_ids: self.command_ids.clone(),
            polling: self.polling,
            targets: self.results.len(),
            succeeded,
            failed: self.results.len() - succeeded,
            results: &self.results,
        }
    }

    /// A row per node, the document sent, and the count done.
    pub fn text(&self) -> String {
        let results = &self.results;
        let succeeded = results.iter().filter(|r| r.ok).count();
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
        let mut out = format!(
            "{table}\n{}\nversion {}: {succeeded} of {} node(s) done, {} failed\n",
            self.document,
            self.version_id,
            results.len(),
            results.len() - succeeded
        );
        out.push_str(&kex_lines(results));
        out
    }
}

/// What the nodes did about the post-quantum key exchange, where it
/// matters to users (docs/clients.md, "Messages clients print").
fn kex_lines(results: &[NodeResult]) -> String {
    use crate::install::kex::KexStatus;
    let mut out = String::new();
    let added = results
        .iter()
        .filter(|r| r.kex.as_ref().is_some_and(|k| k.status == KexStatus::Added))
        .count();
    if added > 0 {
        out.push_str(&format!(
            "post-quantum key exchange added on {added} node(s): OpenSSH 10.1 and later no longer warn\n"
        ));
    }
    for r in results {
        let Some(kex) = r.kex.as_ref().filter(|k| k.status == KexStatus::Unsupported) else {
            continue;
        };
        out.push_str(&format!(
            "{}: its sshd has no post-quantum key exchange, so OpenSSH 10.1 and later warn at every login; upgrade: {}\n",
            crate::escape::escape(r.name.as_deref().unwrap_or(&r.instance_id)),
            // The node's words: escaped, as every report's.
            crate::escape::escape(kex.upgrade.as_deref().unwrap_or("OpenSSH 8.5 or later"))
        ));
    }
    out
}
