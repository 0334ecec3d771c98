//! `install` and `install --check` as one flow, from a plain request: what
//! the command and the in-process SSM double both run. Its outcome is a
//! report ([`InstallReport`], which knows its exit status); an error means
//! the run could not start (bad options, no secret to read).

use std::path::PathBuf;
use std::time::Duration;

use super::sshd::{SshdControl, SshdError};
use super::{InstallError, InstallOptions, InstallReport, InstallResult, Refusal};
use crate::exit::{ExitStatus, Status};
use crate::fingerprint::Fingerprint;
use crate::hostport::HostPort;
use crate::ids::SecretId;
use crate::scan::Prober;
use crate::store::{SecretStore, StoreError, VersionSelector};

/// What `install --check` compares: the secret's set (when given) and the
/// fingerprints given, against what is on disk and what sshd serves.
#[derive(Clone, Debug)]
pub struct CheckRequest {
    /// The secret and the version to read, when the set comes from it.
    pub secret: Option<(SecretId, VersionSelector)>,
    /// Fingerprints the set must have besides (or instead of) the secret's.
    pub expect: Vec<Fingerprint>,
    /// The host key directory.
    pub ssh_dir: PathBuf,
    /// Where to ask sshd; `None` for its first listen address.
    pub verify_address: Option<HostPort>,
    /// The state directory (an interrupted install's marker).
    pub state_dir: PathBuf,
    /// How long sshd may take to answer.
    pub verify_timeout: Duration,
}

/// What a run is asked to do.
#[derive(Clone, Debug)]
pub enum RunRequest {
    /// Converge the node to the set.
    Install(Box<InstallOptions>),
    /// Report whether the node serves the set; change nothing.
    Check(CheckRequest),
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `install` without a secret.
    #[error("--secret-id is required (or HOSTKEYCTL_SECRET_ID); `install --check` may use --expect instead")]
    NoSecret,
    /// `install --check` with nothing to compare.
    #[error("install --check needs --secret-id or --expect SHA256:...")]
    NothingExpected,
    /// The secret could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// sshd's configuration could not be read.
    #[error(transparent)]
    Sshd(#[from] SshdError),
    /// sshd's configuration names no address to ask.
    #[error(transparent)]
    Install(#[from] InstallError),
}

impl ExitStatus for RunError {
    /// The store's status; bad options 2.
    fn status(&self) -> Status {
        match self {
            RunError::Store(s) => s.status(),
            _ => Status::Usage,
        }
    }
}

impl ExitStatus for InstallReport {
    /// The one place where install outcomes become exit codes.
    fn status(&self) -> Status {
        match self.result {
            InstallResult::Changed | InstallResult::Unchanged | InstallResult::Reloaded | InstallResult::Match => {
                Status::Success
            }
            InstallResult::Drift => Status::Drift,
            InstallResult::Refused => match self.refusal {
                Some(Refusal::Aws) => Status::Aws,
                Some(Refusal::Unavailable) => Status::Incomplete,
                Some(Refusal::BadInput) | None => Status::Usage,
            },
            InstallResult::RolledBack | InstallResult::Failed | InstallResult::Incomplete => Status::Incomplete,
            InstallResult::RollbackFailed => Status::RollbackFailed,
            InstallResult::InstalledWithoutCertificates => Status::CertificatesNeedRenewal,
        }
    }
}

/// Runs `request` against the store (none for a check that reads no
/// secret), sshd and the prober.
pub async fn execute(
    request: &RunRequest,
    store: Option<&impl SecretStore>,
    sshd: &impl SshdControl,
    prober: &impl Prober,
) -> Result<InstallReport, RunError> {
    let check = match request {
        RunRequest::Install(options) => {
            let store = store.ok_or(RunError::NoSecret)?;
            return Ok(super::install(options, store, sshd, prober).await);
        }
        RunRequest::Check(check) => check,
    };
    let address = match &check.verify_address {
        Some(a) => a.clone(),
        None => {
            let effective = sshd.effective()?;
            effective
                .verify_address()
                .ok_or(InstallError::NoVerifyAddress(effective.listen))?
        }
    };
    let mut expected = check.expect.clone();
    let mut read = None;
    match (&check.secret, store) {
        (Some((secret, selector)), Some(store)) => {
            let version = store.get(secret, selector).await?;
            expected.extend(version.document.keys.keys().map(|k| k.fingerprint().clone()));
            read = Some((version.arn, version.version_id));
        }
        _ if expected.is_empty() => return Err(RunError::NothingExpected),
        _ => {}
    }
    expected.sort();
    expected.dedup();
    let mut report = super::check(prober, &expected, &check.ssh_dir, &address, check.verify_timeout).await;
    if let Some((arn, version)) = read {
        report.secret = Some(arn);
        report.version_id = Some(version);
    }
    super::check::note_interrupted(&mut report, &check.state_dir);
    Ok(report)
}

/// Longest error text in the JSON line: SSM returns at most 2,500
/// characters of a command's output to `push`, and the line must parse.
const MAX_ERROR_CHARS: usize = 700;

fn cut(text: Option<&String>) -> Option<String> {
    cut_to(text, MAX_ERROR_CHARS)
}

fn cut_to(text: Option<&String>, most: usize) -> Option<String> {
    text.map(|t| {
        if t.chars().count() <= most {
            t.clone()
        } else {
            format!(
                "{}... (cut; the full text is on stderr)",
                t.chars().take(most).collect::<String>()
            )
        }
    })
}

/// The longest JSON line: SSM returns at most 2,500 characters of a
/// step's output to `push` (ListCommandInvocations), other lines may come
/// first, and a cut line does not parse: the node would count as failed.
pub const MAX_LINE_CHARS: usize = 2_200;

/// The report's one JSON line (for stdout, what `push` reads back from
/// SSM), with long errors cut, and within [`MAX_LINE_CHARS`]: the list of
/// changed files goes first (`keys_changed` and the summary on stderr
/// stay), then the errors are cut shorter.
pub fn json_line(report: &InstallReport) -> Result<String, serde_json::Error> {
    let mut line = report.clone();
    line.error = cut(report.error.as_ref());
    line.rollback_error = cut(report.rollback_error.as_ref());
    let mut text = serde_json::to_string(&line)?;
    if text.len() > MAX_LINE_CHARS {
        line.changed_files.clear();
        text = serde_json::to_string(&line)?;
    }
    if text.len() > MAX_LINE_CHARS {
        line.error = cut_to(report.error.as_ref(), 200);
        line.rollback_error = cut_to(report.rollback_error.as_ref(), 200);
        text = serde_json::to_string(&line)?;
    }
    Ok(text)
}

/// The human summary (for stderr); `None` when there is nothing to say
/// and `quiet` asks for silence.
pub fn summary(report: &InstallReport, quiet: bool) -> Option<String> {
    if quiet && report.error.is_none() {
        return None;
    }
    let version = report.version_id.as_ref().map_or("-", |v| v.as_str());
    let mut text = match report.result {
        InstallResult::Changed => format!(
            "installed version {version}: {} file(s) changed, sshd {}, {}",
            report.changed_files.len(),
            if report.reloaded { "reloaded" } else { "not reloaded" },
            if report.verified {
                "served keys verified"
            } else {
                "served keys not verified"
            }
        ),
        InstallResult::Unchanged => format!("version {version} is already installed and served; nothing to do"),
        InstallResult::Reloaded => {
            format!("version {version} was on disk but not served; sshd reloaded and verified")
        }
        InstallResult::Match => "on-disk and served host keys match the expected set".to_owned(),
        other => failed_summary(report, other),
    };
    if let Some(line) = report.kex.as_ref().and_then(kex_summary) {
        text.push('\n');
        text.push_str(&line);
    }
    Some(text)
}

/// What users of OpenSSH 10.1 and later will see, when install changed it
/// or cannot (docs/clients.md, "Messages clients print").
fn kex_summary(kex: &super::kex::KexReport) -> Option<String> {
    use super::kex::KexStatus;
    match kex.status {
        KexStatus::Added => Some(format!(
            "post-quantum key exchange added ({}): OpenSSH 10.1 and later no longer warn",
            kex.post_quantum.join(", ")
        )),
        KexStatus::Unsupported => Some(format!(
            "this sshd has no post-quantum key exchange: OpenSSH 10.1 and later warn at every login; upgrade: {}",
            kex.upgrade.as_deref().unwrap_or("OpenSSH 8.5 or later")
        )),
        _ => None,
    }
}

fn failed_summary(report: &InstallReport, result: InstallResult) -> String {
    let mut lines = vec![format!(
        "install {}: {}",
        result.as_str(),
        report.error.as_deref().unwrap_or("see the JSON report")
    )];
    if let Some(r) = &report.rollback_error {
        lines.push(format!("ROLLBACK FAILED: {r}"));
    } else if result == InstallResult::RolledBack {
        lines.push("the previous host keys were restored and are served again".to_owned());
    }
    for row in report.checks.iter().filter(|r| !r.ok) {
        lines.push(format!(
            "  {}: expected {}, on disk {}, served {}",
            row.key_type,
            row.expected.as_ref().map_or("nothing", |f| f.as_str()),
            row.on_disk.as_ref().map_or("nothing", |f| f.as_str()),
            match &row.served {
                Ok(fp) => fp.to_string(),
                Err(e) => e.to_string(),
            }
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::{MAX_ERROR_CHARS, cut};
    use crate::install::InstallReport;
    use crate::install::kex::{KexReport, KexStatus};

    #[test]
    fn the_summary_says_what_current_clients_will_see() {
        let mut report = InstallReport {
            result: crate::install::InstallResult::Unchanged,
            ..InstallReport::default()
        };
        assert!(!super::summary(&report, false).unwrap().contains("post-quantum"));
        report.kex = Some(KexReport {
            status: KexStatus::Added,
            post_quantum: vec!["sntrup761x25519-sha512@openssh.com".to_owned()],
            upgrade: None,
        });
        let added = super::summary(&report, false).unwrap();
        assert!(
            added.ends_with("added (sntrup761x25519-sha512@openssh.com): OpenSSH 10.1 and later no longer warn"),
            "{added}"
        );
        report.kex = Some(KexReport {
            status: KexStatus::Unsupported,
            post_quantum: vec![],
            upgrade: Some("Debian 12 (OpenSSH 9.2)".to_owned()),
        });
        assert!(
            super::summary(&report, false)
                .unwrap()
                .ends_with("upgrade: Debian 12 (OpenSSH 9.2)")
        );
        assert_eq!(super::summary(&report, true), None);
    }

    /// A node deep in a file system, during an overlap, with certificates
    /// and a failure on top: the line still fits what SSM returns and
    /// parses (issue 57's `kex` had pushed the demo's over 2,500).
    #[test]
    fn the_json_line_fits_what_ssm_returns_to_push() {
        let fp = crate::fingerprint::Fingerprint::parse(&format!("SHA256:{}", "A".repeat(43))).unwrap();
        let mut report = InstallReport {
            result: crate::install::InstallResult::RolledBack,
            error: Some("e".repeat(5_000)),
            rollback_error: Some("r".repeat(5_000)),
            ..InstallReport::default()
        };
        for t in ["ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"] {
            report.fingerprints.insert(t.to_owned(), fp.clone());
            report.next_fingerprints.insert(t.to_owned(), fp.clone());
        }
        let deep = format!("/tmp/{}/etc/ssh", "d".repeat(60));
        report.changed_files = (0..14)
            .map(|i| format!("{deep}/hostkeyctl_next_{i}_key").into())
            .collect();
        report.kex = Some(KexReport {
            status: KexStatus::Added,
            post_quantum: vec![
                "sntrup761x25519-sha512".to_owned(),
                "sntrup761x25519-sha512@openssh.com".to_owned(),
            ],
            upgrade: None,
        });
        let full = serde_json::to_string(&report).unwrap();
        assert!(
            full.len() > super::MAX_LINE_CHARS,
            "the case is big enough: {}",
            full.len()
        );
        let line = super::json_line(&report).unwrap();
        assert!(line.len() <= super::MAX_LINE_CHARS, "{}", line.len());
        let back = InstallReport::from_output(&line).unwrap();
        assert_eq!(back.result, report.result);
        assert_eq!(back.fingerprints, report.fingerprints);
        assert_eq!(back.kex, report.kex);
        // A small report keeps everything.
        let small = InstallReport::default();
        assert_eq!(
            super::json_line(&small).unwrap(),
            serde_json::to_string(&small).unwrap()
        );
    }

    #[test]
    fn long_errors_are_cut_for_the_json_line() {
        assert_eq!(cut(Some(&"short".to_owned())), Some("short".to_owned()));
        let long = "x".repeat(5_000);
        let cut_text = cut(Some(&long)).unwrap();
        assert!(cut_text.len() < MAX_ERROR_CHARS + 60, "{}", cut_text.len());
        assert!(cut_text.ends_with("(cut; the full text is on stderr)"));
        assert_eq!(cut(None), None);
    }
}
