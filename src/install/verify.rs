//! The verify phase of install: read back what was written, and check by
//! real handshakes (through a [`Prober`]) what sshd serves.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ssh_key::Certificate;
use zeroize::Zeroizing;

use super::plan::{Prepared, next_private_path, next_public_path};
use super::{InstallError, InstallOptions, io_err};
use crate::fingerprint::Fingerprint;
use crate::hostport::HostPort;
use crate::keyset::{HostKey, KeyAlgorithm, KeySet, fingerprint_of};
use crate::scan::{Handshake, Prober, ScanAlgorithm, ScanError, Served, scan_held};

/// Scans `address` for each algorithm it holds ([`scan_held`]: one
/// connection per type its KEXINIT lists), each until it answers (sshd
/// restarting after a reload refuses connections for a moment) or
/// `timeout` passes.
pub async fn served_keys(
    prober: &impl Prober,
    address: &HostPort,
    algorithms: &[ScanAlgorithm],
    timeout: Duration,
) -> BTreeMap<ScanAlgorithm, Result<Fingerprint, ScanError>> {
    let (host, port) = (address.host(), address.port());
    let deadline = Instant::now() + timeout;
    let ask = |algorithm| async move {
        loop {
            let answer = prober
                .handshake(Handshake::new(host, port, algorithm, Duration::from_secs(5)))
                .await;
            match &answer.served {
                Err(ScanError::Refused | ScanError::Dropped(_) | ScanError::Timeout(_))
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => break answer,
            }
        }
    };
    scan_held(algorithms, ask)
        .await
        .into_iter()
        .map(|(a, served)| (a, served.map(|s| fingerprint_of(&s.key()))))
        .collect()
}

/// What a node's sshd must serve: the set's fingerprints, and nothing for
/// the other types. Returns a description of each difference.
pub(super) fn compare_served(
    expected: &BTreeMap<ScanAlgorithm, Fingerprint>,
    served: &BTreeMap<ScanAlgorithm, Result<Fingerprint, ScanError>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (algorithm, result) in served {
        match (expected.get(algorithm), result) {
            (Some(want), Ok(got)) if want == got => {}
            (Some(want), Ok(got)) => problems.push(format!("{algorithm}: serves {got}, expected {want}")),
            (Some(want), Err(e)) => problems.push(format!("{algorithm}: expected {want}, {e}")),
            (None, Ok(got)) => problems.push(format!("{algorithm}: still serves unmanaged key {got}")),
            (None, Err(ScanError::NotOffered(_))) => {}
            (None, Err(e)) => problems.push(format!("{algorithm}: {e}")),
        }
    }
    problems
}

pub(super) fn expected_scan(keys: &KeySet) -> BTreeMap<ScanAlgorithm, Fingerprint> {
    keys.keys()
        .map(|k| (ScanAlgorithm::for_managed(k.algorithm()), k.fingerprint().clone()))
        .collect()
}

/// Reads back every written key and its `.pub`.
pub(super) fn read_back(keys: &KeySet, ssh_dir: &Path, next: Option<&KeySet>) -> Result<(), InstallError> {
    read_back_set(keys, &|a| ssh_dir.join(a.private_file_name()), &|a| {
        ssh_dir.join(a.public_file_name())
    })?;
    if let Some(next) = next {
        read_back_set(next, &|a| next_private_path(ssh_dir, a), &|a| {
            next_public_path(ssh_dir, a)
        })?;
    }
    Ok(())
}

fn read_back_set(
    keys: &KeySet,
    private_path: &dyn Fn(KeyAlgorithm) -> PathBuf,
    public_path: &dyn Fn(KeyAlgorithm) -> PathBuf,
) -> Result<(), InstallError> {
    for key in keys.keys() {
        let path = private_path(key.algorithm());
        let text = Zeroizing::new(std::fs::read_to_string(&path).map_err(io_err("cannot read back", &path))?);
        let on_disk = HostKey::from_openssh(&text).map_err(|e| InstallError::ReadBack {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        if on_disk.fingerprint() != key.fingerprint() {
            return Err(InstallError::ReadBack {
                path,
                detail: format!("fingerprint {} instead of {}", on_disk.fingerprint(), key.fingerprint()),
            });
        }
        let public = public_path(key.algorithm());
        let line = std::fs::read_to_string(&public).map_err(io_err("cannot read back", &public))?;
        let parsed = ssh_key::PublicKey::from_openssh(line.trim()).map_err(|e| InstallError::ReadBack {
            path: public.clone(),
            detail: e.to_string(),
        })?;
        if fingerprint_of(&parsed) != *key.fingerprint() {
            return Err(InstallError::ReadBack {
                path: public,
                detail: "the .pub does not match the private key".to_owned(),
            });
        }
    }
    Ok(())
}

/// Fingerprints of the managed key files as they are now (for checking
/// that a rollback brought the old keys back).
pub(super) fn fingerprints_on_disk(ssh_dir: &Path) -> BTreeMap<ScanAlgorithm, Fingerprint> {
    let mut out = BTreeMap::new();
    for a in KeyAlgorithm::ALL {
        let path = ssh_dir.join(a.private_file_name());
        if let Ok(text) = std::fs::read_to_string(&path) {
            let text = Zeroizing::new(text);
            if let Ok(key) = HostKey::from_openssh(&text) {
                out.insert(ScanAlgorithm::for_managed(a), key.fingerprint().clone());
            }
        }
    }
    out
}

/// What a client that asks for certificates sees, against what must be
/// served. Returns a description of each difference, or the refusal of a
/// server that would not show them (PerSourcePenalties).
async fn compare_certificates(
    prober: &impl Prober,
    address: &HostPort,
    expected: &BTreeMap<ScanAlgorithm, Certificate>,
) -> Result<Vec<String>, ScanError> {
    let mut problems = Vec::new();
    for (algorithm, want) in expected {
        let served = prober
            .probe_certificate(Handshake::new(
                address.host(),
                address.port(),
                *algorithm,
                Duration::from_secs(5),
            ))
            .await;
        match served {
            // As served: the wire form, without the file's comment.
            Ok(Served::Certificate(got)) if got.to_bytes().ok() == want.to_bytes().ok() => {}
            Ok(Served::Certificate(got)) => problems.push(format!(
                "{algorithm}: serves certificate serial {} (key id {:?}), not the set's serial {}",
                got.serial(),
                crate::escape::escape(got.key_id()),
                want.serial()
            )),
            Ok(Served::Key(_)) => problems.push(format!("{algorithm}: serves the key without its certificate")),
            Err(e @ ScanError::Penalized(_)) => return Err(e),
            Err(e) => problems.push(format!("{algorithm}: certificate: {e}")),
        }
    }
    Ok(problems)
}

/// Checks by handshakes that sshd serves `expected` and nothing else, and
/// the `certificates` on those keys to a client that asks for them.
/// Right after a reload the old sshd may still answer (SIGHUP is handled
/// asynchronously, and connections accepted before it keep the old keys),
/// so a difference is only final once it outlasts `verify_timeout`.
pub(super) async fn verify(
    prober: &impl Prober,
    prepared: &Prepared,
    options: &InstallOptions,
    expected: &BTreeMap<ScanAlgorithm, Fingerprint>,
    certificates: &BTreeMap<ScanAlgorithm, Certificate>,
) -> Result<bool, InstallError> {
    let Some(address) = &prepared.verify_address else {
        return Ok(false);
    };
    let deadline = Instant::now() + options.verify_timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut served = served_keys(prober, address, &ScanAlgorithm::ALL, left).await;
        // A type sshd refused to show (PerSourcePenalties) is not known, and
        // asking again only prolongs the penalty: what did answer is
        // judged; if that is right, the refusal is the answer.
        let refused: Option<String> = served.values().find_map(|r| match r {
            Err(e @ ScanError::Penalized(_)) => Some(e.to_string()),
            _ => None,
        });
        served.retain(|_, r| !matches!(r, Err(ScanError::Penalized(_))));
        let mut problems = compare_served(expected, &served);
        if let (Some(detail), true) = (&refused, problems.is_empty()) {
            return Err(InstallError::Penalized {
                address: address.to_string(),
                detail: detail.clone(),
            });
        }
        if problems.is_empty() {
            problems =
                compare_certificates(prober, address, certificates)
                    .await
                    .map_err(|e| InstallError::Penalized {
                        address: address.to_string(),
                        detail: e.to_string(),
                    })?;
        }
        if problems.is_empty() {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Err(InstallError::Verify {
                address: address.to_string(),
                detail: problems.join("; "),
            });
        }
        tracing::debug!("sshd does not serve the expected keys yet: {}", problems.join("; "));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
