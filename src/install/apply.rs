//! The apply phase of install: back up, write as one transaction, test and
//! reload sshd, verify, and on any failure roll back and prove that the old
//! keys are served again.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::files::{self, Desired, Transaction};
use super::plan::{Prepared, is_converged};
use super::restrict;
use super::sshd::{ReloadMethod, SshdControl};
use super::verify::{expected_scan, fingerprints_on_disk, read_back, verify};
use super::{InstallError, InstallOptions, InstallReport, InstallResult, Refusal, io_err};
use crate::fingerprint::Fingerprint;
use crate::scan::{Prober, ScanAlgorithm};

/// The node's sshd, how to see what it serves, and the plan.
pub(super) struct Apply<'a, C, P> {
    pub options: &'a InstallOptions,
    pub sshd: &'a C,
    pub prober: &'a P,
    pub prepared: Prepared,
}

impl<C: SshdControl, P: Prober> Apply<'_, C, P> {
    async fn verify(&self, expected: &BTreeMap<ScanAlgorithm, Fingerprint>) -> Result<bool, InstallError> {
        verify(self.prober, &self.prepared, self.options, expected).await
    }

    /// Converges the node to the plan. Always returns the report.
    pub async fn converge(self, mut report: InstallReport) -> InstallReport {
        let mut pending = Vec::new();
        for want in &self.prepared.desired {
            match is_converged(want) {
                Ok(true) => {}
                Ok(false) => pending.push(want),
                Err(e) => return refused(report, Refusal::BadInput, &e),
            }
        }
        if pending.is_empty() {
            return self.repair_served(report).await;
        }
        let paths: Vec<PathBuf> = pending.iter().map(|d| d.path.clone()).collect();
        let label: String = report
            .version_id
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default()
            .chars()
            .take(8)
            .collect();
        let backup = match files::backup(&self.options.state_dir, &label, &paths) {
            Ok(dir) => dir,
            Err(e) => {
                let e = io_err("cannot back up the current files to", &self.options.state_dir)(e);
                return refused(report, Refusal::Unavailable, &e);
            }
        };
        report.backup = Some(backup.clone());
        report.keys_changed = paths.iter().any(|p| {
            p.starts_with(&self.options.ssh_dir)
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("ssh_host_"))
        });
        report.changed_files = paths;
        let old_served = fingerprints_on_disk(&self.options.ssh_dir);
        let mut tx = Transaction::default();
        let mut reload_attempted = false;
        let result = self.write_and_reload(&pending, &mut tx, &mut reload_attempted).await;
        report.reloaded = reload_attempted;
        match result {
            Ok(verified) => {
                report.result = InstallResult::Changed;
                report.verified = verified;
                if let Err(e) = tx.commit() {
                    tracing::warn!("could not remove rollback links: {e}");
                }
                if let Err(e) = files::prune_backups(&self.options.state_dir, self.options.keep_backups, &backup) {
                    tracing::warn!("could not prune old backups: {e}");
                }
                report
            }
            Err(error) => {
                report.error = Some(error.to_string());
                let problems = self.roll_back(tx, reload_attempted, &old_served).await;
                if problems.is_empty() {
                    report.result = InstallResult::RolledBack;
                } else {
                    report.result = InstallResult::RollbackFailed;
                    report.rollback_error = Some(format!(
                        "{}; the previous files are kept in {}",
                        problems.join("; "),
                        backup.display()
                    ));
                }
                report
            }
        }
    }

    /// Files are right. Makes sure sshd serves them too: a run killed
    /// between writing and reloading leaves exactly this state.
    async fn repair_served(&self, mut report: InstallReport) -> InstallReport {
        let expected = expected_scan(&self.prepared.keys);
        report.result = InstallResult::Unchanged;
        let first = match self.verify(&expected).await {
            Ok(verified) => {
                report.verified = verified;
                return report;
            }
            Err(first) => first,
        };
        tracing::warn!("files are current but sshd serves other keys ({first}); reloading");
        let outcome = match self.sshd.reload(&self.prepared.reload) {
            Ok(_) => self.verify(&expected).await,
            Err(e) => Err(e.into()),
        };
        report.reloaded = true;
        match outcome {
            Ok(verified) => {
                report.result = InstallResult::Reloaded;
                report.verified = verified;
            }
            Err(e) => {
                report.result = InstallResult::Failed;
                report.error = Some(e.to_string());
            }
        }
        report
    }

    /// Writes every pending file, checks them, reloads, verifies.
    async fn write_and_reload(
        &self,
        pending: &[&Desired],
        tx: &mut Transaction,
        reload_attempted: &mut bool,
    ) -> Result<bool, InstallError> {
        let prepared = &self.prepared;
        for want in pending {
            tx.replace(want).map_err(io_err("cannot write", &want.path))?;
        }
        read_back(&prepared.keys, &self.options.ssh_dir, prepared.next_keys.as_ref())?;
        self.sshd.test()?;
        if !matches!(self.prepared.reload, ReloadMethod::None) {
            let effective = self.sshd.effective()?;
            let wanted = restrict::host_key_algorithms(&prepared.keys.algorithms());
            if effective.host_key_algorithms.as_deref() != Some(wanted.as_str()) {
                return Err(InstallError::NotApplied {
                    path: prepared.settings_file.clone(),
                    found: effective.host_key_algorithms,
                });
            }
            *reload_attempted = true;
            self.sshd.reload(&self.prepared.reload)?;
        }
        self.verify(&expected_scan(&prepared.keys)).await
    }

    /// Restores the previous files and, if sshd was reloaded onto the new
    /// ones, reloads it again and checks that it serves the old keys.
    /// Returns what could not be put right.
    async fn roll_back(
        &self,
        tx: Transaction,
        reload_attempted: bool,
        old_served: &BTreeMap<ScanAlgorithm, Fingerprint>,
    ) -> Vec<String> {
        let mut problems: Vec<String> = tx
            .undo()
            .iter()
            .map(|(p, e)| format!("cannot restore {}: {e}", p.display()))
            .collect();
        if !problems.is_empty() || matches!(self.prepared.reload, ReloadMethod::None) {
            return problems;
        }
        // Reload again only if sshd was reloaded onto the new files:
        // otherwise it still holds the old keys (or, in re-exec mode, reads
        // the restored files per connection). And never reload onto a
        // config sshd -t refuses: sshd exits on SIGHUP then.
        let mut reload_error = None;
        if reload_attempted {
            reload_error = match self.sshd.test() {
                Ok(()) => self.sshd.reload(&self.prepared.reload).err().map(|e| e.to_string()),
                Err(e) => Some(format!(
                    "the restored configuration fails sshd -t, so sshd was not reloaded: {e}"
                )),
            };
        }
        if let Err(e) = self.verify(old_served).await {
            problems.push(e.to_string());
            if let Some(r) = reload_error {
                problems.push(format!("reload after restoring: {r}"));
            }
        }
        problems
    }
}

/// A report for an install that stopped before writing anything.
pub(super) fn refused(mut report: InstallReport, why: Refusal, error: &InstallError) -> InstallReport {
    report.result = InstallResult::Refused;
    report.refusal = Some(why);
    report.error = Some(error.to_string());
    report
}
