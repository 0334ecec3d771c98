//! `install`'s flow ([`install()`]): its options, its errors, the lock, and
//! each phase in turn.

use super::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fingerprint::Fingerprint;
use crate::hostport::HostPort;
use crate::ids::{SecretId, VersionId};
use crate::scan::Prober;
use crate::store::{SecretStore, StoreError, VersionSelector};

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
    /// No version was named: converge to the desired state of the stages
    /// (AWSCURRENT, plus AWSPENDING as the next set when a rotation has
    /// announced one). `next` is then ignored.
    pub from_stages: bool,
    /// Names every certificate of the set must list.
    pub require_principals: Vec<crate::certificate::Principal>,
    /// What to do with certificates sshd serves that hostkeyctl did not
    /// install.
    pub existing_certificates: ExistingCertificates,
}

/// What install does with host certificates it did not install.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ExistingCertificates {
    /// Change nothing and say so (exit 2).
    #[default]
    Refuse,
    /// Write the set's certificate of the same key type into each such
    /// file (no line of sshd's configuration is touched).
    Replace,
    /// Leave them, when each certifies a key of the set (adopted keys).
    Keep,
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
    #[error("{what} {}: {source}{}", path.display(), read_only_hint(source))]
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
    /// sshd does not apply hostkeyctl's KexAlgorithms line.
    #[error("sshd does not apply hostkeyctl's KexAlgorithms from {} (it reports {found:?}); a KexAlgorithms line before it takes precedence", path.display())]
    KexNotApplied {
        /// Where the setting was written.
        path: PathBuf,
        /// What sshd -T reports.
        found: Option<String>,
    },
    /// After the reload, sshd's KEXINIT does not list the post-quantum
    /// exchange hostkeyctl's line put first.
    #[error(
        "sshd at {address} does not offer the post-quantum key exchange hostkeyctl configured; it offers {offered:?}"
    )]
    KexNotOffered {
        /// Where.
        address: String,
        /// What its KEXINIT listed.
        offered: String,
    },
    /// sshd refused the verifying connections (PerSourcePenalties): what
    /// it serves is not known, which is not the same as not served.
    #[error("sshd at {address} could not be checked: {detail}")]
    Penalized {
        /// Where.
        address: String,
        /// sshd's words and the remedies.
        detail: String,
    },
    /// The served keys are not the expected ones.
    #[error("sshd at {address} does not serve the installed keys: {detail}")]
    Verify {
        /// Where.
        address: String,
        /// Which keys differ.
        detail: String,
    },
    /// A hostkeyctl block in the config is damaged; nothing was written.
    #[error("{}: {source}; nothing was written", path.display())]
    DamagedBlock {
        /// The config file.
        path: PathBuf,
        /// Where and what.
        source: sshd_config::BlockError,
    },
    /// sshd serves host certificates hostkeyctl did not install.
    #[error(
        "sshd serves host certificates hostkeyctl did not install ({}); installing the canonical keys replaces the keys they certify and would lock out clients that trust only their CA. Nothing was written: choose --existing-certificates replace (write the set's certificates into those files; sign the set first with `hostkeyctl sign`) or keep (only if they certify the set's keys)",
        .0.iter().map(|c| format!("HostCertificate {c}")).collect::<Vec<_>>().join(", ")
    )]
    HostCertificates(Vec<String>),
    /// `keep` was chosen, but a certificate certifies a key being replaced.
    #[error(
        "--existing-certificates keep: {path} certifies {certified}, which is not a key of the set, so it would stop working; nothing was written. Use --existing-certificates replace"
    )]
    KeepWouldBreak {
        /// The certificate file.
        path: String,
        /// What it certifies (or why it cannot be read).
        certified: String,
    },
    /// A certificate of the set must not be served.
    #[error("refusing the set's certificates, nothing was written: {0}")]
    Certificate(#[from] crate::certificate::CertProblem),
    /// Principals are required but the set has no certificates.
    #[error(
        "--principal {0} is set, but the set carries no certificates; sign it (`hostkeyctl sign`) or drop the option"
    )]
    NoCertificates(String),
    /// No address to verify against.
    #[error(
        "cannot tell where to verify: sshd -T lists ListenAddress {}, and this host has none of those addresses; pass --verify-address HOST:PORT",
        if .0.is_empty() { "(none)".to_owned() } else { .0.join(", ") }
    )]
    NoVerifyAddress(Vec<String>),
}

impl From<StoreError> for InstallError {
    fn from(e: StoreError) -> Self {
        InstallError::Store(Box::new(e))
    }
}

impl InstallError {
    /// Why an error raised before anything was written stopped the install.
    fn refusal(&self) -> Refusal {
        match self {
            InstallError::Store(e) if matches!(**e, StoreError::Aws(_)) => Refusal::Aws,
            InstallError::Locked { .. } => Refusal::Unavailable,
            _ => Refusal::BadInput,
        }
    }
}

/// The lock file's name in the state directory, unless `--lock-file` says
/// otherwise.
pub const LOCK_FILE_NAME: &str = "install.lock";

/// What to add to an I/O error where the file system is read-only: the
/// shipped unit (ProtectSystem=strict) leaves only /etc/ssh and the state
/// directory writable.
fn read_only_hint(source: &std::io::Error) -> &'static str {
    if source.kind() == std::io::ErrorKind::ReadOnlyFilesystem {
        "; only /etc/ssh and /var/lib/hostkeyctl are writable under hostkeyctl-install.service (ProtectSystem=strict): for a file elsewhere (a symlinked sshd_config, a HostKey outside /etc/ssh) add its directory with a drop-in `ReadWritePaths=DIR` (docs/bootstrap.md)"
    } else {
        ""
    }
}

pub(super) fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> InstallError + 'a {
    move |source| InstallError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// Runs an install against the node's sshd. Always returns a report; the
/// caller maps its result to an exit code.
pub async fn install(
    options: &InstallOptions,
    store: &impl SecretStore,
    sshd: &impl SshdControl,
    prober: &impl Prober,
) -> InstallReport {
    let mut report = InstallReport::default();
    match plan::prepare(options, store, sshd, &mut report).await {
        Err(e) => apply::refused(report, e.refusal(), &e),
        Ok(prepared) => {
            let report = apply::Apply {
                options,
                sshd,
                prober,
                prepared,
            }
            .converge(report)
            .await;
            without_certificates(report)
        }
    }
}

/// A converged install that left out certificates (expired, not yet
/// valid) is `installed_without_certificates`: the keys are right, the
/// certificates need renewal.
fn without_certificates(mut report: InstallReport) -> InstallReport {
    if !report.result.is_done() || report.certificates_left_out.is_empty() {
        return report;
    }
    let version = report.version_id.as_ref().map_or("-", |v| v.as_str()).to_owned();
    let reasons: Vec<&str> = report.certificates_left_out.iter().map(|l| l.reason.as_str()).collect();
    report.error = Some(format!(
        "the host keys of version {version} are installed and served, but {} of the set's certificates were left out: {}. Clients that trust only the CA are refused until the set is signed again (`hostkeyctl sign`) and installed",
        reasons.len(),
        reasons.join("; ")
    ));
    report.result = InstallResult::InstalledWithoutCertificates;
    report
}
