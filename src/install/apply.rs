//! The apply phase of install: back up, write as one transaction, test and
//! reload sshd, verify, and on any failure roll back and prove that the old
//! keys are served again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::files::{self, Desired, Transaction};
use super::plan::{Prepared, is_converged};
use super::reload_marker;
use super::sshd::{ReloadMethod, SshdControl};
use super::sshd_config;
use super::verify::{expected_scan, fingerprints_on_disk, read_back, served_keys, verify};
use super::{InstallError, InstallOptions, InstallReport, InstallResult, Refusal, io_err};
use crate::fingerprint::Fingerprint;
use crate::scan::{Handshake, Prober, ScanAlgorithm, ScanError};

/// The node's sshd, how to see what it serves, and the plan.
pub(super) struct Apply<'a, C, P> {
    pub options: &'a InstallOptions,
    pub sshd: &'a C,
    pub prober: &'a P,
    pub prepared: Prepared,
}

impl<C: SshdControl, P: Prober> Apply<'_, C, P> {
    /// Verifies the plan: the set's keys and its certificates.
    async fn verify(&self, expected: &BTreeMap<ScanAlgorithm, Fingerprint>) -> Result<bool, InstallError> {
        verify(
            self.prober,
            &self.prepared,
            self.options,
            expected,
            &self.prepared.certificates,
        )
        .await
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
            if self.reloads() && reload_marker::is_marked(&self.options.state_dir) {
                return self.finish_interrupted(report).await;
            }
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
        let old_served = self.served_before().await;
        if self.reloads()
            && let Err(e) = reload_marker::mark(&self.options.state_dir, &self.what())
        {
            let e = io_err("cannot write the reload-pending marker in", &self.options.state_dir)(e);
            return refused(report, Refusal::Unavailable, &e);
        }
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
                self.clear_pending();
                if let Err(e) = files::prune_backups(&self.options.state_dir, self.options.keep_backups, &backup) {
                    tracing::warn!("could not prune old backups: {e}");
                }
                report
            }
            // sshd took the files (sshd -t passed, it was reloaded and
            // answered) but refused to show all of its keys: rolling back
            // would act on a refusal, and its own check would be refused
            // too. The files stay, unverified; the reload-pending marker
            // stays, so the next run reloads (which clears the penalty)
            // and verifies.
            Err(error @ InstallError::Penalized { .. }) => {
                tracing::warn!("{error}; the new files stay, not verified");
                report.result = InstallResult::Incomplete;
                report.error = Some(error.to_string());
                if let Err(e) = tx.commit() {
                    tracing::warn!("could not remove rollback links: {e}");
                }
                report
            }
            Err(error) => {
                report.error = Some(error.to_string());
                let problems = self.roll_back(tx, reload_attempted, &old_served).await;
                if problems.is_empty() {
                    report.result = InstallResult::RolledBack;
                    self.clear_pending();
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
            // Refused is not "not served": reloading would change nothing
            // a handshake could show, and the files are right.
            Err(e @ InstallError::Penalized { .. }) => {
                tracing::warn!("files are current; {e}; not reloading");
                report.result = InstallResult::Incomplete;
                report.error = Some(e.to_string());
                return report;
            }
            Err(first) => first,
        };
        tracing::warn!("files are current but sshd serves other keys ({first}); reloading");
        if let Err(e) = self.reload_into(&mut report).await {
            report.result = InstallResult::Failed;
            report.error = Some(e.to_string());
        }
        report
    }

    /// Reloads sshd over files that are already right and verifies what it
    /// serves, into `report`: whether it reloaded, and `Reloaded` with the
    /// verification when all went well.
    async fn reload_into(&self, report: &mut InstallReport) -> Result<(), InstallError> {
        let mut reloaded = false;
        let outcome = self.reload_and_verify(&mut reloaded).await;
        report.reloaded = reloaded;
        report.verified = outcome?;
        report.result = InstallResult::Reloaded;
        Ok(())
    }

    /// Whether this install reloads sshd (and so verifies what it serves).
    fn reloads(&self) -> bool {
        !matches!(self.prepared.reload, ReloadMethod::None)
    }

    /// The version(s) being installed, for the reload-pending marker.
    fn what(&self) -> String {
        let ids = |k: &crate::keyset::KeySet| {
            k.keys()
                .map(|k| k.fingerprint().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match &self.prepared.next_keys {
            Some(next) => format!("keys {} (next: {})", ids(&self.prepared.keys), ids(next)),
            None => format!("keys {}", ids(&self.prepared.keys)),
        }
    }

    fn clear_pending(&self) {
        if let Err(e) = reload_marker::clear(&self.options.state_dir) {
            tracing::warn!(
                "could not remove {}: {e}; the next install reloads sshd once more",
                reload_marker::path(&self.options.state_dir).display()
            );
        }
    }

    /// What sshd serves before anything is written, by handshake, so that a
    /// rollback is checked against what was really served: that includes
    /// types hostkeyctl does not manage (an ECDSA P-384 key, say). Types
    /// that cannot be looked at fall back to the key files on disk.
    async fn served_before(&self) -> BTreeMap<ScanAlgorithm, Fingerprint> {
        let mut served = fingerprints_on_disk(&self.options.ssh_dir);
        if let (true, Some(address)) = (self.reloads(), &self.prepared.verify_address) {
            let now = served_keys(self.prober, address, &ScanAlgorithm::ALL, Duration::ZERO).await;
            for (algorithm, result) in now {
                match result {
                    Ok(fingerprint) => {
                        served.insert(algorithm, fingerprint);
                    }
                    Err(ScanError::NotOffered(_)) => {
                        served.remove(&algorithm);
                    }
                    Err(_) => {}
                }
            }
        }
        served
    }

    /// Files are right, but an earlier run was interrupted before sshd was
    /// verified to serve them (the reload-pending marker): reload and
    /// verify, whatever a handshake shows now.
    async fn finish_interrupted(&self, mut report: InstallReport) -> InstallReport {
        tracing::warn!(
            "an earlier install was interrupted before sshd was verified to serve its files ({}); reloading",
            reload_marker::path(&self.options.state_dir).display()
        );
        match self.reload_into(&mut report).await {
            Ok(()) => self.clear_pending(),
            Err(e) => {
                report.result = InstallResult::Failed;
                report.error = Some(format!(
                    "{e}; the files on disk are the set's, and the next install tries the reload again"
                ));
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
        self.reload_and_verify(reload_attempted).await
    }

    /// Tests the files on disk with sshd, checks that sshd applies the
    /// pinned HostKeyAlgorithms, reloads, and verifies by handshakes.
    async fn reload_and_verify(&self, reload_attempted: &mut bool) -> Result<bool, InstallError> {
        let prepared = &self.prepared;
        self.sshd.test()?;
        if self.reloads() {
            let effective = self.sshd.effective()?;
            let wanted = sshd_config::host_key_algorithms(&prepared.keys.algorithms(), prepared.pins_certificates);
            if effective.host_key_algorithms.as_deref() != Some(wanted.as_str()) {
                return Err(InstallError::NotApplied {
                    path: prepared.settings_file.clone(),
                    found: effective.host_key_algorithms,
                });
            }
            if let Some(kex) = &prepared.kex_line
                && effective.kex_algorithms.as_deref() != Some(kex.as_str())
            {
                return Err(InstallError::KexNotApplied {
                    path: prepared.settings_file.clone(),
                    found: effective.kex_algorithms,
                });
            }
            *reload_attempted = true;
            self.sshd.reload(&prepared.reload)?;
        }
        let verified = self.verify(&expected_scan(&prepared.keys)).await?;
        if verified && let Some(kex) = &prepared.kex_line {
            self.verify_kex(kex).await?;
        }
        Ok(verified)
    }

    /// After the keys: a handshake shows sshd offering the post-quantum
    /// exchanges hostkeyctl's line put first. A handshake that heard no
    /// KEXINIT (refused, penalized, timed out) proves nothing either way:
    /// the keys stand, verified, and the next run asks again.
    async fn verify_kex(&self, line: &str) -> Result<(), InstallError> {
        let Some(address) = &self.prepared.verify_address else {
            return Ok(());
        };
        let Some(algorithm) = expected_scan(&self.prepared.keys).into_keys().next() else {
            return Ok(());
        };
        let answer = self
            .prober
            .handshake(Handshake::new(
                address.host(),
                address.port(),
                algorithm,
                Duration::from_secs(5),
            ))
            .await;
        let Some(offered) = answer.hello.map(|h| h.kex_algorithms) else {
            tracing::warn!("could not read sshd's key exchanges at {address} to check the post-quantum one");
            return Ok(());
        };
        let wanted: Vec<&str> = line
            .split(',')
            .filter(|k| crate::scan::warnings::is_post_quantum(k))
            .collect();
        if wanted.iter().all(|k| offered.iter().any(|o| o == k)) {
            return Ok(());
        }
        Err(InstallError::KexNotOffered {
            address: address.to_string(),
            offered: offered.join(","),
        })
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
        if !problems.is_empty() || !self.reloads() {
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
        // What was served before, keys only: certificates it served come
        // back with their files.
        let old = verify(self.prober, &self.prepared, self.options, old_served, &BTreeMap::new()).await;
        if let Err(e) = old {
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
