//! `hostkeyctl enroll`'s one flow, on the node: enrol its own keys, make
//! sshd serve the certificates, make its ssh client trust the CA for the
//! cluster's patterns, strictly.
//!
//! A login node whose keys `hostkeyctl install` manages serves the
//! canonical set, shared by every login node and rotated: it is certified
//! for its own names on the set's keys (and, during a rotation's overlap,
//! the next set's), into files of its own, except a key the set's own
//! certificate covers (sshd holds one certificate per key, and the set's
//! serves the users behind the load balancer). Before its install it takes
//! the trust alone, and binds nothing (docs/cluster-trust.md, "Login
//! nodes").

use std::path::{Path, PathBuf};

use super::configure::{HostPattern, configure_client, configure_sshd};
use super::node::{
    Imds, LOGIN_CERT_SUFFIX, NodeError, Signer, Written, enrol_login_node, enrol_node, login_keys, trust_node,
};
use crate::certificate::Principal;
use crate::install::sshd::{ReloadMethod, SshdControl};

/// What the node is asked to do.
#[derive(Debug)]
pub struct Setup<'a> {
    /// Where its host keys are.
    pub ssh_dir: &'a Path,
    /// Names it expects its certificates to carry.
    pub asked: &'a [Principal],
    /// The ssh client's directory.
    pub client_dir: &'a Path,
    /// The cluster's host patterns.
    pub trust: &'a [HostPattern],
    /// A login node (it serves, or will serve, the canonical set), even
    /// before `install` has run.
    pub login: bool,
}

/// What `enroll` did.
#[derive(Debug)]
pub struct Report {
    /// The certificates written, or `None` on a login node before its
    /// install.
    pub enrolled: Option<Written>,
    /// A login node (it serves the set).
    pub login: bool,
    /// Why a login node got fewer certificates than keys, if it did.
    pub note: Option<String>,
    /// The CA's fingerprint.
    pub ca: String,
    /// How sshd was reloaded (`None` when it was left alone).
    pub reload: Option<String>,
    /// The patterns this node's ssh now checks strictly against the CA.
    pub trusted: Vec<String>,
    /// How many revoked keys its trust lists.
    pub revoked: usize,
}

/// True when `hostkeyctl install` manages the host keys sshd serves (its
/// drop-in, or its block in the main config).
pub fn serves_the_set(sshd_config: &Path) -> bool {
    let drop_in = sshd_config
        .parent()
        .unwrap_or(Path::new("/"))
        .join("sshd_config.d")
        .join(crate::install::sshd_config::DROP_IN_NAME);
    drop_in.exists()
        || std::fs::read_to_string(sshd_config)
            .is_ok_and(|t| t.lines().any(|l| l == crate::install::sshd_config::BEGIN_MARK))
}

/// What one branch of [`enroll`] leaves: the certificates, the CA's line,
/// the revoked keys, the reload, and a note.
type Done = (Option<Written>, String, Vec<String>, Option<String>, Option<String>);

/// Enrols the node (a login node as the module says) and configures sshd
/// and the client. Nothing is written unless the signer's answer checks;
/// a failed `sshd -t` puts the old drop-in back. `now_ms`: Unix
/// milliseconds.
pub async fn enroll(
    setup: &Setup<'_>,
    imds: &impl Imds,
    signer: &impl Signer,
    sshd: &impl SshdControl,
    method: &ReloadMethod,
    now_ms: i64,
) -> Result<Report, NodeError> {
    if setup.trust.is_empty() {
        return Err(NodeError::Usage(
            "no --trust pattern: name the cluster's nodes (`--trust 'ip-10-1-*,10.1.*'`), so its ssh checks them against the CA".to_owned(),
        ));
    }
    let serves = serves_the_set(sshd.config());
    let login = setup.login || serves;
    if login && !setup.asked.is_empty() {
        return Err(NodeError::Usage(
            "--principal is for nodes that enrol their own keys: a login node's certificates carry the names AWS gives it, and it asks for none".to_owned(),
        ));
    }
    let (enrolled, ca_line, revoked, reload, note): Done = if login && !serves {
        let trust = trust_node(setup.ssh_dir, imds, signer, now_ms).await?;
        let note = "hostkeyctl install has not run here: no certificate until it has (the timer enrols again)";
        (None, trust.ca, trust.revoked, None, Some(note.to_owned()))
    } else if login {
        enrol_login(setup.ssh_dir, imds, signer, sshd, method, now_ms).await?
    } else {
        super::configure::preflight_sshd(sshd)?;
        let written = enrol_node(setup.ssh_dir, setup.asked, imds, signer, now_ms).await?;
        let files: Vec<PathBuf> = written.files.clone();
        let reload = configure_sshd(sshd, method, &files)?;
        let line = written.ca_line.clone();
        let revoked = written.revoked.clone();
        (Some(written), line, revoked, Some(reload), None)
    };
    let ca = ssh_key::PublicKey::from_openssh(ca_line.trim())
        .map_err(|e| NodeError::Answer(format!("the CA is not a public key: {e}")))?
        .fingerprint(ssh_key::HashAlg::Sha256)
        .to_string();
    configure_client(setup.client_dir, &ca_line, &revoked, setup.trust)?;
    Ok(Report {
        enrolled,
        login,
        note,
        ca,
        reload,
        trusted: setup.trust.iter().map(|p| p.as_str().to_owned()).collect(),
        revoked: revoked.len(),
    })
}

/// A login node that serves the set: its keys proven, those no other
/// certificate covers certified, sshd told, stale certificates removed.
/// If sshd cannot read enrolment's drop-in, the node binds and certifies
/// nothing new, and the note says why.
async fn enrol_login(
    ssh_dir: &Path,
    imds: &impl Imds,
    signer: &impl Signer,
    sshd: &impl SshdControl,
    method: &ReloadMethod,
    now_ms: i64,
) -> Result<Done, NodeError> {
    let keys = login_keys(ssh_dir)?;
    let readable = super::configure::preflight_sshd(sshd);
    let (certify, mut note) = match &readable {
        Ok(()) => to_certify(sshd, &keys)?,
        Err(e) => (Vec::new(), Some(format!("no certificate: {e}"))),
    };
    let written = enrol_login_node(ssh_dir, &keys, &certify, imds, signer, now_ms).await?;
    drop(keys);
    let reload = if readable.is_ok() {
        let reload = configure_sshd(sshd, method, &written.files)?;
        let stale = remove_stale(ssh_dir, &written.files);
        if !stale.is_empty() {
            note.get_or_insert_with(|| format!("removed {}", stale.join(", ")));
        }
        Some(reload)
    } else {
        None
    };
    let line = written.ca_line.clone();
    let revoked = written.revoked.clone();
    Ok((Some(written), line, revoked, reload, note))
}

/// The key files a login node asks to certify: each of `keys` unless a
/// certificate sshd is configured with, other than enrolment's own,
/// already certifies it (the set's, which users behind the load balancer
/// may trust). The note names those left to it.
fn to_certify(
    sshd: &impl SshdControl,
    keys: &[(PathBuf, ssh_key::PrivateKey)],
) -> Result<(Vec<PathBuf>, Option<String>), NodeError> {
    let effective = sshd.effective().map_err(|e| NodeError::Sshd(format!("sshd -T: {e}")))?;
    let others: Vec<ssh_key::Certificate> = effective
        .host_certificates
        .iter()
        .filter(|p| !p.ends_with(LOGIN_CERT_SUFFIX))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|t| ssh_key::Certificate::from_openssh(t.trim()).ok())
        .collect();
    let mut certify = Vec::new();
    let mut covered = Vec::new();
    for (path, key) in keys {
        if others.iter().any(|c| c.public_key() == key.public_key().key_data()) {
            covered.push(path.display().to_string());
        } else {
            certify.push(path.clone());
        }
    }
    let note =
        (!covered.is_empty()).then(|| format!("the set's own certificates cover {}: left to them", covered.join(", ")));
    Ok((certify, note))
}

/// Deletes enrolment's login certificates in `ssh_dir` that are not
/// `kept` (for keys the node no longer holds); the names removed.
fn remove_stale(ssh_dir: &Path, kept: &[PathBuf]) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(ssh_dir) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(LOGIN_CERT_SUFFIX) && !kept.contains(&path) && std::fs::remove_file(&path).is_ok() {
            removed.push(name);
        }
    }
    removed.sort();
    removed
}
