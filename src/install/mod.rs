//! Node-side install: fetch the key set, converge the host key files,
//! reload sshd, verify what it serves, and roll back on any failure.
//!
//! The node must never lose sshd: OpenSSH's sshd exits on SIGHUP when a host
//! key is corrupt, and `sshd -t` passes when one of several keys is bad. So
//! every key written is parsed back and checked against its `.pub` before a
//! reload, and what sshd serves after the reload is checked by a real SSH
//! handshake. Any failure after the first write restores the previous files
//! (no free disk space needed, see [`files`]), reloads, and checks that the
//! old keys are served again.

pub mod files;
pub mod report;
pub mod restrict;
pub mod sshd;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use crate::exit::Status;
use crate::fingerprint::Fingerprint;
use crate::hostport::HostPort;
use crate::ids::{SecretId, VersionId};
use crate::keyset::{HostKey, KeyAlgorithm, KeySet, fingerprint_of};
use crate::scan::{self, ScanAlgorithm, ScanError};
use crate::store::{SecretStore, StoreError, VersionSelector};
use files::{Desired, Transaction};
pub use report::{CheckRow, INSTALL_SCHEMA, InstallReport, InstallResult};
use restrict::Placement;
use sshd::{ReloadMethod, Sshd};

/// Everything `install` needs, validated.
#[derive(Clone, Debug)]
pub struct InstallOptions {
    /// Secret id or ARN.
    pub secret_id: SecretId,
    /// Which version.
    pub selector: VersionSelector,
    /// Fingerprints the set must have, exactly (empty: no check).
    pub expect: Vec<Fingerprint>,
    /// Directory of the host key files.
    pub ssh_dir: PathBuf,
    /// sshd binary and config.
    pub sshd: Sshd,
    /// How to reload.
    pub reload: ReloadMethod,
    /// Where to verify, or `None` for sshd's first ListenAddress.
    pub verify_address: Option<HostPort>,
    /// Backups live under `<state_dir>/backups`.
    pub state_dir: PathBuf,
    /// The lock file.
    pub lock_file: PathBuf,
    /// Backups kept.
    pub keep_backups: usize,
    /// How long to wait for sshd to serve the expected keys.
    pub verify_timeout: Duration,
    /// How long to wait for another install to finish.
    pub lock_timeout: Duration,
    /// A rotation's overlap phase: the next set, served as extra host keys.
    pub next: Option<NextVersion>,
}

/// The next set of a rotation's overlap phase.
#[derive(Clone, Debug)]
pub struct NextVersion {
    /// Its version id.
    pub version_id: VersionId,
    /// Fingerprints it must have, exactly (empty: no check).
    pub expect: Vec<Fingerprint>,
}

/// Why install stopped.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// Reading the secret failed.
    #[error(transparent)]
    Store(Box<StoreError>),
    /// The ssh directory is missing.
    #[error("ssh directory {} does not exist or is not a directory; pass --ssh-dir (or HOSTKEYCTL_SSH_DIR)", .0.display())]
    NoSshDir(PathBuf),
    /// `--expect` differs from the set.
    #[error(
        "the key set does not have the expected fingerprints (refusing to install): expected {expected:?}, the set has {actual:?}"
    )]
    ExpectMismatch {
        /// `--expect`.
        expected: Vec<Fingerprint>,
        /// The set's.
        actual: Vec<Fingerprint>,
    },
    /// The next set of an overlap has other key types than the current one.
    #[error(
        "the next set has key types {next} but the current set has {current}; an overlap needs the same types (rotate without --overlap to change them)"
    )]
    NextAlgorithms {
        /// The current set's types.
        current: String,
        /// The next set's types.
        next: String,
    },
    /// Another install holds the lock.
    #[error("another hostkeyctl install holds {} (waited {waited:?}); try again when it is done", path.display())]
    Locked {
        /// Lock file.
        path: PathBuf,
        /// How long.
        waited: Duration,
    },
    /// A file operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A written key does not read back right.
    #[error("{} does not read back as the key written: {detail}", path.display())]
    ReadBack {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
    /// sshd refused or could not be reloaded.
    #[error(transparent)]
    Sshd(#[from] sshd::SshdError),
    /// sshd does not apply the HostKeyAlgorithms setting.
    #[error("sshd does not apply hostkeyctl's HostKeyAlgorithms from {} (it reports {found:?}); another HostKeyAlgorithms line takes precedence: remove it", path.display())]
    NotApplied {
        /// Where the setting was written.
        path: PathBuf,
        /// What sshd -T reports.
        found: Option<String>,
    },
    /// The served keys are not the expected ones.
    #[error("sshd at {address} does not serve the installed keys: {detail}")]
    Verify {
        /// Where.
        address: String,
        /// Which keys differ.
        detail: String,
    },
    /// No address to verify against.
    #[error("cannot tell where sshd listens (sshd -T shows no ListenAddress); pass --verify-address HOST:PORT")]
    NoVerifyAddress,
}

impl From<StoreError> for InstallError {
    fn from(e: StoreError) -> Self {
        InstallError::Store(Box::new(e))
    }
}

impl InstallError {
    /// The exit status for an error raised before anything was written.
    fn status_before_write(&self) -> Status {
        match self {
            InstallError::Store(e) if matches!(**e, StoreError::Aws(_)) => Status::Aws,
            InstallError::Locked { .. } => Status::Incomplete,
            _ => Status::Usage,
        }
    }
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> InstallError + 'a {
    move |source| InstallError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// Scans `address` for each algorithm until it answers (sshd restarting
/// after a reload refuses connections for a moment) or `timeout` passes.
pub async fn served_keys(
    address: &HostPort,
    algorithms: &[ScanAlgorithm],
    timeout: Duration,
) -> BTreeMap<ScanAlgorithm, Result<Fingerprint, ScanError>> {
    let (host, port) = (address.host(), address.port());
    let deadline = Instant::now() + timeout;
    let mut out = BTreeMap::new();
    for &algorithm in algorithms {
        let result = loop {
            let attempt = scan::scan(host, port, algorithm, Duration::from_secs(5)).await;
            match attempt {
                Err(ScanError::Refused | ScanError::Dropped(_) | ScanError::Timeout(_))
                    if Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => break other.map(|k| fingerprint_of(&k)),
            }
        };
        out.insert(algorithm, result);
    }
    out
}

/// What a node's sshd must serve: the set's fingerprints, and nothing for
/// the other types. Returns a description of each difference.
fn compare_served(
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

fn expected_scan(keys: &KeySet) -> BTreeMap<ScanAlgorithm, Fingerprint> {
    keys.keys()
        .map(|k| (ScanAlgorithm::for_managed(k.algorithm()), k.fingerprint().clone()))
        .collect()
}

fn check_expect(expect: &[Fingerprint], keys: &KeySet) -> Result<(), InstallError> {
    if expect.is_empty() {
        return Ok(());
    }
    let mut expected = expect.to_vec();
    expected.sort();
    expected.dedup();
    let mut actual: Vec<Fingerprint> = keys.keys().map(|k| k.fingerprint().clone()).collect();
    actual.sort();
    if expected == actual {
        Ok(())
    } else {
        Err(InstallError::ExpectMismatch { expected, actual })
    }
}

struct Lock {
    _file: std::fs::File,
}

fn lock(path: &Path, timeout: Duration) -> Result<Lock, InstallError> {
    if let Some(parent) = path.parent() {
        crate::fsutil::create_dir_all(parent, 0o755).map_err(io_err("cannot create the lock directory", parent))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(io_err("cannot open the lock file", path))?;
    let start = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Lock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(InstallError::Locked {
                    path: path.to_owned(),
                    waited: start.elapsed(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err("cannot lock", path)(e)),
        }
    }
}

/// The files a set needs, with modes and owners following what is there.
/// Where the next set's keys live during a rotation's overlap phase.
pub fn next_private_path(ssh_dir: &Path, a: KeyAlgorithm) -> PathBuf {
    ssh_dir.join(format!("hostkeyctl_next_{}_key", a.short_name()))
}

/// The `.pub` beside [`next_private_path`].
pub fn next_public_path(ssh_dir: &Path, a: KeyAlgorithm) -> PathBuf {
    ssh_dir.join(format!("hostkeyctl_next_{}_key.pub", a.short_name()))
}

/// The key files of one set, named by `private_path`/`public_path`.
fn key_files(
    keys: &KeySet,
    sibling: Option<(u32, u32, u32)>,
    private_path: &dyn Fn(KeyAlgorithm) -> PathBuf,
    public_path: &dyn Fn(KeyAlgorithm) -> PathBuf,
) -> Result<Vec<Desired>, InstallError> {
    let mut out = Vec::new();
    for key in keys.keys() {
        let a = key.algorithm();
        let private = private_path(a);
        let public = public_path(a);
        let current = files::read_current(&private).map_err(io_err("cannot read", &private))?;
        let (mode, owner) = match (&current, sibling) {
            // Keep a safe existing mode; never keep one sshd would refuse.
            (Some(c), _) if c.mode & 0o037 == 0 => (c.mode, Some((c.uid, c.gid))),
            (_, Some((mode, uid, gid))) => (mode, Some((uid, gid))),
            _ => (0o600, None),
        };
        out.push(Desired {
            path: private,
            content: Some(Zeroizing::new(key.reveal_private_openssh().as_bytes().to_vec())),
            mode,
            owner,
        });
        let current_pub = files::read_current(&public).map_err(io_err("cannot read", &public))?;
        let (mode, owner) = current_pub.map_or((0o644, None), |c| (c.mode, Some((c.uid, c.gid))));
        out.push(Desired {
            path: public,
            content: Some(Zeroizing::new(format!("{}\n", key.public_line()).into_bytes())),
            mode,
            owner,
        });
    }
    Ok(out)
}

/// The files a set needs, with modes and owners following what is there.
/// With `next` (a rotation's overlap phase), also the next set's keys and
/// the explicit HostKey list `host_keys` (current keys first); without it,
/// any next-set files left from an overlap are removed.
#[allow(clippy::too_many_arguments)]
fn desired_files(
    keys: &KeySet,
    next: Option<&KeySet>,
    host_keys: &[String],
    explicit_host_keys: bool,
    ssh_dir: &Path,
    placement: &Placement,
    main_config: &Path,
    main_text: &str,
) -> Result<Vec<Desired>, InstallError> {
    // Distributions differ: Debian uses root:root 0600, RHEL root:ssh_keys
    // 0640. New files copy an existing private host key's group and mode.
    let mut sibling = None;
    for a in KeyAlgorithm::ALL {
        let path = ssh_dir.join(a.private_file_name());
        if let Some(current) = files::read_current(&path).map_err(io_err("cannot read", &path))?
            && current.mode & 0o037 == 0
        {
            sibling = Some((current.mode, current.uid, current.gid));
            break;
        }
    }
    let mut out = key_files(keys, sibling, &|a| ssh_dir.join(a.private_file_name()), &|a| {
        ssh_dir.join(a.public_file_name())
    })?;
    // sshd loads every HostKey line in order and serves the first key of
    // each type, and clients refuse a host key update that lists a key
    // twice. So during an overlap the next keys come after all other
    // HostKey lines: in a block near the end of the main config when such
    // lines exist, or, when sshd uses its default list, in the managed
    // settings after the current keys listed explicitly.
    let mut listed = Vec::new();
    let mut next_block = Vec::new();
    match next {
        Some(next) => {
            out.extend(key_files(next, sibling, &|a| next_private_path(ssh_dir, a), &|a| {
                next_public_path(ssh_dir, a)
            })?);
            let next_paths: Vec<String> = next
                .keys()
                .map(|k| next_private_path(ssh_dir, k.algorithm()).display().to_string())
                .collect();
            if explicit_host_keys {
                next_block = next_paths;
            } else {
                listed.extend(host_keys.iter().cloned());
                listed.extend(next_paths);
            }
        }
        None => {
            for a in KeyAlgorithm::ALL {
                for path in [next_private_path(ssh_dir, a), next_public_path(ssh_dir, a)] {
                    out.push(Desired {
                        path,
                        content: None,
                        mode: 0,
                        owner: None,
                    });
                }
            }
        }
    }
    let algorithms = keys.algorithms();
    let settings = restrict::settings(&algorithms, &listed);
    let mut managed = Vec::new();
    match placement {
        Placement::DropIn(p) => {
            managed.push((p.clone(), restrict::drop_in_content(&algorithms, &listed)));
            managed.push((
                main_config.to_owned(),
                restrict::main_config_content(main_text, None, &next_block),
            ));
        }
        Placement::Inline(p) => {
            managed.push((
                p.clone(),
                restrict::main_config_content(main_text, Some(&settings), &next_block),
            ));
        }
    }
    for (path, content) in managed {
        let current = files::read_current(&path).map_err(io_err("cannot read", &path))?;
        let (mode, owner) = current.map_or((0o644, None), |c| (c.mode, Some((c.uid, c.gid))));
        out.push(Desired {
            path,
            content: Some(Zeroizing::new(content.into_bytes())),
            mode,
            owner,
        });
    }
    Ok(out)
}

/// Whether the file on disk already is as desired. Keys are compared as
/// keys (a private key file in another encoding of the same key is fine).
fn is_converged(want: &Desired) -> Result<bool, InstallError> {
    let current = files::read_current(&want.path).map_err(io_err("cannot read", &want.path))?;
    let (Some(current), Some(content)) = (current, &want.content) else {
        // Converged when both are absent.
        return Ok(want.content.is_none() && !want.path.exists());
    };
    let private = content.starts_with(b"-----BEGIN OPENSSH PRIVATE KEY-----");
    if private {
        if current.mode & 0o037 != 0 {
            return Ok(false);
        }
        let (Ok(have), Ok(wanted)) = (std::str::from_utf8(&current.content), std::str::from_utf8(content)) else {
            return Ok(false);
        };
        return Ok(match (HostKey::from_openssh(have), HostKey::from_openssh(wanted)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        });
    }
    Ok(current.content == *content)
}

/// Reads back every written key and its `.pub`.
fn read_back(keys: &KeySet, ssh_dir: &Path, next: Option<&KeySet>) -> Result<(), InstallError> {
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
fn fingerprints_on_disk(ssh_dir: &Path) -> BTreeMap<ScanAlgorithm, Fingerprint> {
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

/// Runs an install. Always returns a report; the status is the exit code.
pub async fn install(options: &InstallOptions, store: &impl SecretStore) -> (Status, InstallReport) {
    let mut report = InstallReport::default();
    match prepare(options, store, &mut report).await {
        Err(e) => {
            report.result = InstallResult::Refused;
            report.error = Some(e.to_string());
            (e.status_before_write(), report)
        }
        Ok(prepared) => converge(options, prepared, report).await,
    }
}

struct Prepared {
    settings_file: PathBuf,
    keys: KeySet,
    next_keys: Option<KeySet>,
    desired: Vec<Desired>,
    verify_address: Option<HostPort>,
    _lock: Lock,
}

async fn prepare(
    options: &InstallOptions,
    store: &impl SecretStore,
    report: &mut InstallReport,
) -> Result<Prepared, InstallError> {
    if !options.ssh_dir.is_dir() {
        return Err(InstallError::NoSshDir(options.ssh_dir.clone()));
    }
    let version = store.get(&options.secret_id, &options.selector).await?;
    report.secret = Some(version.arn.clone());
    report.version_id = Some(version.version_id.clone());
    let keys = version.document.keys;
    report.fingerprints = keys
        .keys()
        .map(|k| (k.algorithm().key_type().to_owned(), k.fingerprint().clone()))
        .collect();
    check_expect(&options.expect, &keys)?;
    let next_keys = match &options.next {
        None => None,
        Some(next) => {
            let version = store
                .get(&options.secret_id, &VersionSelector::VersionId(next.version_id.clone()))
                .await?;
            report.next_version_id = Some(version.version_id.clone());
            report.next_fingerprints = version
                .document
                .keys
                .keys()
                .map(|k| (k.algorithm().key_type().to_owned(), k.fingerprint().clone()))
                .collect();
            check_expect(&next.expect, &version.document.keys)?;
            if version.document.keys.algorithms() != keys.algorithms() {
                let names = |s: &KeySet| {
                    s.algorithms()
                        .iter()
                        .map(|a| a.key_type())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(InstallError::NextAlgorithms {
                    current: names(&keys),
                    next: names(&version.document.keys),
                });
            }
            Some(version.document.keys)
        }
    };
    let lock = lock(&options.lock_file, options.lock_timeout)?;
    for dir in [options.ssh_dir.clone(), options.ssh_dir.join("sshd_config.d")] {
        let removed = files::remove_leftovers(&dir).map_err(io_err("cannot clean up", &dir))?;
        for path in removed {
            tracing::info!("removed {} left by an interrupted install", path.display());
        }
    }
    let main_text =
        std::fs::read_to_string(&options.sshd.config).map_err(io_err("cannot read", &options.sshd.config))?;
    let placement = restrict::placement(&options.ssh_dir, &options.sshd.config, &main_text);
    if let Placement::DropIn(path) = &placement
        && let Some(parent) = path.parent()
    {
        crate::fsutil::create_dir_all(parent, 0o755).map_err(io_err("cannot create", parent))?;
    }
    // During an overlap, list sshd's own host keys explicitly, first, so
    // they stay the ones served; the next set's keys follow.
    let host_keys = if next_keys.is_some() {
        let mut seen = Vec::new();
        for path in options.sshd.effective()?.host_keys {
            let ours = KeyAlgorithm::ALL
                .iter()
                .any(|a| Path::new(&path) == next_private_path(&options.ssh_dir, *a));
            if !ours && !seen.contains(&path) {
                seen.push(path);
            }
        }
        seen
    } else {
        Vec::new()
    };
    let mut texts = vec![restrict::strip_blocks(&main_text)];
    if let Ok(entries) = std::fs::read_dir(options.ssh_dir.join("sshd_config.d")) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".conf") && name != restrict::DROP_IN_NAME {
                texts.push(std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
    }
    let explicit = restrict::has_host_key_lines(&texts);
    let desired = desired_files(
        &keys,
        next_keys.as_ref(),
        &host_keys,
        explicit,
        &options.ssh_dir,
        &placement,
        &options.sshd.config,
        &main_text,
    )?;
    let verify_address = match (&options.reload, &options.verify_address) {
        (ReloadMethod::None, _) => None,
        (_, Some(a)) => Some(a.clone()),
        (_, None) => Some(
            options
                .sshd
                .effective()?
                .verify_address()
                .ok_or(InstallError::NoVerifyAddress)?,
        ),
    };
    Ok(Prepared {
        settings_file: placement.path().to_owned(),
        keys,
        next_keys,
        desired,
        verify_address,
        _lock: lock,
    })
}

/// Checks by handshakes that sshd serves `expected` and nothing else.
/// Right after a reload the old sshd may still answer (SIGHUP is handled
/// asynchronously, and connections accepted before it keep the old keys),
/// so a difference is only final once it outlasts `verify_timeout`.
async fn verify(
    prepared: &Prepared,
    options: &InstallOptions,
    expected: &BTreeMap<ScanAlgorithm, Fingerprint>,
) -> Result<bool, InstallError> {
    let Some(address) = &prepared.verify_address else {
        return Ok(false);
    };
    let deadline = Instant::now() + options.verify_timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let served = served_keys(address, &ScanAlgorithm::ALL, left).await;
        let problems = compare_served(expected, &served);
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

async fn converge(options: &InstallOptions, prepared: Prepared, mut report: InstallReport) -> (Status, InstallReport) {
    let expected = expected_scan(&prepared.keys);
    let mut pending = Vec::new();
    for want in &prepared.desired {
        match is_converged(want) {
            Ok(true) => {}
            Ok(false) => pending.push(want),
            Err(e) => {
                report.result = InstallResult::Refused;
                report.error = Some(e.to_string());
                return (Status::Usage, report);
            }
        }
    }
    if pending.is_empty() {
        // Files are right. Make sure sshd serves them too: a run killed
        // between writing and reloading leaves exactly this state.
        report.result = InstallResult::Unchanged;
        match verify(&prepared, options, &expected).await {
            Ok(verified) => {
                report.verified = verified;
                return (Status::Success, report);
            }
            Err(first) => {
                tracing::warn!("files are current but sshd serves other keys ({first}); reloading");
                let outcome = match options.sshd.reload(&options.reload) {
                    Ok(_) => verify(&prepared, options, &expected).await,
                    Err(e) => Err(e.into()),
                };
                report.reloaded = true;
                return match outcome {
                    Ok(verified) => {
                        report.result = InstallResult::Reloaded;
                        report.verified = verified;
                        (Status::Success, report)
                    }
                    Err(e) => {
                        report.result = InstallResult::Failed;
                        report.error = Some(e.to_string());
                        (Status::Incomplete, report)
                    }
                };
            }
        }
    }

    let paths: Vec<PathBuf> = pending.iter().map(|d| d.path.clone()).collect();
    let label = report
        .version_id
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default()
        .chars()
        .take(8)
        .collect::<String>();
    let backup = match files::backup(&options.state_dir, &label, &paths) {
        Ok(dir) => dir,
        Err(e) => {
            report.result = InstallResult::Refused;
            report.error = Some(io_err("cannot back up the current files to", &options.state_dir)(e).to_string());
            return (Status::Incomplete, report);
        }
    };
    report.backup = Some(backup.clone());
    let old_served = fingerprints_on_disk(&options.ssh_dir);

    let mut tx = Transaction::default();
    let mut reload_attempted = false;
    let result: Result<bool, InstallError> = async {
        for want in &pending {
            tx.replace(want).map_err(io_err("cannot write", &want.path))?;
        }
        read_back(&prepared.keys, &options.ssh_dir, prepared.next_keys.as_ref())?;
        options.sshd.test()?;
        if !matches!(options.reload, ReloadMethod::None) {
            let effective = options.sshd.effective()?;
            let wanted = restrict::host_key_algorithms(&prepared.keys.algorithms());
            if effective.host_key_algorithms.as_deref() != Some(wanted.as_str()) {
                return Err(InstallError::NotApplied {
                    path: prepared.settings_file.clone(),
                    found: effective.host_key_algorithms,
                });
            }
            reload_attempted = true;
            options.sshd.reload(&options.reload)?;
        }
        verify(&prepared, options, &expected).await
    }
    .await;
    report.keys_changed = paths.iter().any(|p| {
        p.starts_with(&options.ssh_dir)
            && p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("ssh_host_"))
    });
    report.changed_files = paths;
    match result {
        Ok(verified) => {
            report.result = InstallResult::Changed;
            report.reloaded = reload_attempted;
            report.verified = verified;
            if let Err(e) = tx.commit() {
                tracing::warn!("could not remove rollback links: {e}");
            }
            if let Err(e) = files::prune_backups(&options.state_dir, options.keep_backups, &backup) {
                tracing::warn!("could not prune old backups: {e}");
            }
            (Status::Success, report)
        }
        Err(error) => {
            report.error = Some(error.to_string());
            let failures = tx.undo();
            let mut rollback_problems: Vec<String> = failures
                .iter()
                .map(|(p, e)| format!("cannot restore {}: {e}", p.display()))
                .collect();
            if rollback_problems.is_empty() && !matches!(options.reload, ReloadMethod::None) {
                // Reload again only if sshd was reloaded onto the new files:
                // otherwise it still holds the old keys (or, in re-exec mode,
                // reads the restored files per connection). And never reload
                // onto a config sshd -t refuses: sshd exits on SIGHUP then.
                let mut reload_error = None;
                if reload_attempted {
                    reload_error = match options.sshd.test() {
                        Ok(()) => options.sshd.reload(&options.reload).err().map(|e| e.to_string()),
                        Err(e) => Some(format!(
                            "the restored configuration fails sshd -t, so sshd was not reloaded: {e}"
                        )),
                    };
                }
                if let Err(e) = verify(&prepared, options, &old_served).await {
                    rollback_problems.push(e.to_string());
                    if let Some(r) = reload_error {
                        rollback_problems.push(format!("reload after restoring: {r}"));
                    }
                }
            }
            report.reloaded = reload_attempted;
            if rollback_problems.is_empty() {
                report.result = InstallResult::RolledBack;
                (Status::Incomplete, report)
            } else {
                report.result = InstallResult::RollbackFailed;
                report.rollback_error = Some(format!(
                    "{}; the previous files are kept in {}",
                    rollback_problems.join("; "),
                    backup.display()
                ));
                (Status::RollbackFailed, report)
            }
        }
    }
}

/// `install --check`: compares on-disk and served keys with the expected
/// fingerprints, changing nothing.
pub async fn check(
    expected_fps: &[Fingerprint],
    ssh_dir: &Path,
    verify_address: &HostPort,
    timeout: Duration,
) -> (Status, InstallReport) {
    let mut report = InstallReport::default();
    let on_disk = fingerprints_on_disk(ssh_dir);
    // Map each expected fingerprint to its type via the file that has it,
    // or else via what is served.
    let served = served_keys(verify_address, &ScanAlgorithm::ALL, timeout).await;
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
    let mut incomplete = false;
    for (algorithm, served_result) in &served {
        let want = expected.get(algorithm).cloned();
        let disk = on_disk.get(algorithm).cloned();
        let ok = match (&want, served_result) {
            (Some(w), Ok(s)) => w == s && disk.as_ref() == Some(w),
            (None, Err(ScanError::NotOffered(_))) => true,
            (None, Ok(_)) | (Some(_), Err(ScanError::NotOffered(_))) => false,
            (_, Err(_)) => {
                // Could not look: neither match nor drift.
                incomplete = true;
                true
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
        report.error = Some(format!(
            "expected fingerprints found neither on disk nor served: {unplaced:?}"
        ));
    }
    let status = if drift {
        report.result = InstallResult::Drift;
        Status::Drift
    } else if incomplete {
        report.result = InstallResult::Incomplete;
        Status::Incomplete
    } else {
        report.result = InstallResult::Match;
        Status::Success
    };
    (status, report)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::desired_files;
    use crate::install::restrict::Placement;
    use crate::keyset::{KeyAlgorithm, KeySet};

    /// RHEL keeps host keys root:ssh_keys 0640; a missing key must be
    /// created the same way (Debian's sshd refuses such files, so this is
    /// checked here rather than on the bed's sshd).
    #[test]
    fn new_key_files_follow_an_existing_private_keys_group_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let rsa = dir.path().join("ssh_host_rsa_key");
        std::fs::write(&rsa, b"x").unwrap();
        std::fs::set_permissions(&rsa, std::fs::Permissions::from_mode(0o640)).unwrap();
        let gid = 1;
        std::os::unix::fs::chown(&rsa, None, Some(gid)).unwrap();
        let keys = KeySet::generate(&[KeyAlgorithm::Ed25519], 3072).unwrap();
        let main = dir.path().join("sshd_config");
        let desired = desired_files(
            &keys,
            None,
            &[],
            false,
            dir.path(),
            &Placement::Inline(main.clone()),
            &main,
            "",
        )
        .unwrap();
        let ed = desired
            .iter()
            .find(|d| d.path.ends_with("ssh_host_ed25519_key"))
            .unwrap();
        assert_eq!(ed.mode, 0o640);
        assert_eq!(ed.owner.map(|(_, g)| g), Some(gid));
        let public = desired
            .iter()
            .find(|d| d.path.ends_with("ssh_host_ed25519_key.pub"))
            .unwrap();
        assert_eq!(public.mode, 0o644);
    }
}
