//! `install --check`: compare what is on disk and what sshd serves with
//! the expected fingerprints, changing nothing.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::verify::{fingerprints_on_disk, served_keys};
use super::{CheckRow, InstallReport, InstallResult};
use crate::fingerprint::Fingerprint;
use crate::hostport::HostPort;
use crate::scan::{Prober, ScanAlgorithm, ScanError};

/// `install --check`: compares on-disk and served keys with the expected
/// fingerprints, changing nothing.
pub async fn check(
    prober: &impl Prober,
    expected_fps: &[Fingerprint],
    ssh_dir: &Path,
    verify_address: &HostPort,
    timeout: Duration,
) -> InstallReport {
    let mut report = InstallReport::default();
    let on_disk = fingerprints_on_disk(ssh_dir);
    // Map each expected fingerprint to its type via the file that has it,
    // or else via what is served.
    let served = served_keys(prober, verify_address, &ScanAlgorithm::ALL, timeout).await;
    let mut expected: BTreeMap<ScanAlgorithm, Fingerprint> = BTreeMap::new();
    for fp in expected_fps {
        let by_disk = on_disk.iter().find(|(_, v)| *v == fp).map(|(k, _)| *k);
        let by_served = served
            .iter()
            .find(|(_, v)| v.as_ref().ok() == Some(fp))
            .map(|(k, _)| *k);
        if let Some(a) = by_disk.or(by_served) {
            expected.insert(a, fp.clone());
        }
    }
    let unplaced: Vec<&Fingerprint> = expected_fps
        .iter()
        .filter(|fp| !expected.values().any(|v| v == *fp))
        .collect();
    let mut drift = !unplaced.is_empty();
    // The first reason sshd could not be asked, when it could not.
    let mut unasked: Option<&ScanError> = None;
    for (algorithm, served_result) in &served {
        let want = expected.get(algorithm).cloned();
        let disk = on_disk.get(algorithm).cloned();
        let ok = match (&want, served_result) {
            (Some(w), Ok(s)) => w == s && disk.as_ref() == Some(w),
            (None, Err(ScanError::NotOffered(_))) => true,
            (None, Ok(_)) | (Some(_), Err(ScanError::NotOffered(_))) => false,
            (_, Err(e)) => {
                // Could not look: not as it should be, but no drift either.
                unasked.get_or_insert(e);
                report.checks.push(CheckRow {
                    key_type: algorithm.key_type().to_owned(),
                    expected: want,
                    on_disk: disk,
                    served: served_result.clone(),
                    ok: false,
                });
                continue;
            }
        };
        drift |= !ok;
        report.checks.push(CheckRow {
            key_type: algorithm.key_type().to_owned(),
            expected: want,
            on_disk: disk,
            served: served_result.clone(),
            ok,
        });
    }
    report.fingerprints = expected
        .iter()
        .map(|(k, v)| (k.key_type().to_owned(), v.clone()))
        .collect();
    if !unplaced.is_empty() {
        let unplaced: Vec<String> = unplaced.iter().map(ToString::to_string).collect();
        report.error = Some(format!(
            "expected fingerprints found neither on disk nor served: {}",
            unplaced.join(", ")
        ));
    }
    if let Some(e) = unasked {
        let unasked = format!(
            "sshd at {verify_address} could not be asked what it serves ({e}); check that it runs and listens there, or name its address with --verify-address"
        );
        report.error = Some(match report.error.take() {
            Some(also) => format!("{unasked}; {also}"),
            None => unasked,
        });
    }
    report.result = if drift {
        InstallResult::Drift
    } else if unasked.is_some() {
        InstallResult::Incomplete
    } else {
        InstallResult::Match
    };
    report
}

/// `--check` on a node where an install was interrupted before sshd was
/// verified to serve its files (the reload-pending marker): drift, whatever
/// the handshakes showed, since sshd may lack keys a handshake cannot see
/// (a rotation's next set).
pub fn note_interrupted(report: &mut InstallReport, state_dir: &Path) {
    if !super::reload_marker::is_marked(state_dir) {
        return;
    }
    let note = format!(
        "an install was interrupted before sshd was verified to serve the files on disk ({}); run `hostkeyctl install` to reload and verify",
        super::reload_marker::path(state_dir).display()
    );
    report.error = Some(match report.error.take() {
        Some(e) => format!("{e}; {note}"),
        None => note,
    });
    report.result = InstallResult::Drift;
}
