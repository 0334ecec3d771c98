//! The node's side of enrolment (`hostkeyctl enroll`):
//! read its own host keys, prove them over its identity document, ask the
//! signer, check what came back, and write each certificate beside its key.
//!
//! The private keys are read, used to sign the proof, and dropped; they
//! never leave the node. A certificate is written only if it certifies one
//! of this node's keys, as a host certificate, and every certificate came
//! from the same CA.

use std::path::{Path, PathBuf};

use ssh_key::{Certificate, HashAlg, PrivateKey, PublicKey};

use crate::certificate::Principal;
use crate::enrolment::proof::{EnrolRequest, request};
use crate::fsutil::{WriteOptions, write_atomic};

/// The managed host key files a node may enrol, by type.
pub const KEY_FILES: [&str; 3] = ["ssh_host_ed25519_key", "ssh_host_ecdsa_key", "ssh_host_rsa_key"];

/// Where a node's identity document comes from (IMDS).
pub trait Imds: Sync {
    /// The document and its base64 RSA-SHA256 signature.
    fn identity(&self) -> impl Future<Output = Result<(String, String), String>> + Send;
}

/// The signer, as the node reaches it (lambda:InvokeFunction).
pub trait Signer: Sync {
    /// Its ARN: the audience every proof names.
    fn audience(&self) -> &str;
    /// Sends the request; the signer's answer or its refusal.
    fn enrol(&self, request: &EnrolRequest, asked: &[Principal])
    -> impl Future<Output = Result<Answer, String>> + Send;
    /// The CA's public line and the revoked keys: for a login node with
    /// no listener, whose `request` claims its instance
    /// ([`TrustAsk::Claim`]), or for a node whose enrolment was refused
    /// ([`TrustAsk::Trust`]: binds nothing).
    fn trust(&self, request: &EnrolRequest, ask: TrustAsk) -> impl Future<Output = Result<Trust, String>> + Send;
}

/// What a request for the cluster's trust is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrustAsk {
    /// A login node's claim: its instance taken, certified for no key.
    Claim,
    /// The trust alone, binding nothing.
    Trust,
}

/// The cluster's trust: its CA, and the keys of revoked instances.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Trust {
    /// The CA's public line.
    pub ca: String,
    /// Revoked host keys (public lines).
    #[serde(default)]
    pub revoked: Vec<String>,
}

/// What the signer answers.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct Answer {
    /// The instance it enrolled.
    pub instance_id: String,
    /// The names certified.
    pub principals: Vec<String>,
    /// One certificate line per key.
    pub certificates: Vec<String>,
    /// Revoked host keys (public lines).
    #[serde(default)]
    pub revoked: Vec<String>,
}

/// What enrolment wrote.
#[derive(Debug)]
pub struct Written {
    /// The instance.
    pub instance_id: String,
    /// The names certified.
    pub principals: Vec<String>,
    /// The certificate files.
    pub files: Vec<PathBuf>,
    /// The CA's fingerprint.
    pub ca: String,
    /// The CA's public line, as the certificates name it.
    pub ca_line: String,
    /// Revoked host keys (public lines), from the signer.
    pub revoked: Vec<String>,
}

/// Why enrolment wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// What was asked cannot be done.
    #[error("{0}")]
    Usage(String),
    /// No managed host key in the directory.
    #[error("no host key to enrol in {0} (ssh_host_ed25519_key, _ecdsa_key or _rsa_key)")]
    NoKeys(PathBuf),
    /// A key file is unreadable.
    #[error("cannot read host key {path}: {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why (never the key).
        reason: String,
    },
    /// IMDS did not answer.
    #[error("the instance identity document: {0}")]
    Imds(String),
    /// The signer refused or could not be reached.
    #[error("the signer refused: {0}")]
    Signer(String),
    /// sshd cannot serve the certificates.
    #[error("sshd: {0}")]
    Sshd(String),
    /// The answer is not what was asked.
    #[error("the signer's answer cannot be used: {0}; nothing was written")]
    Answer(String),
    /// Writing failed.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl crate::exit::ExitStatus for NodeError {
    fn status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            NodeError::Usage(_) | NodeError::NoKeys(_) => Status::Usage,
            NodeError::Imds(_) | NodeError::Signer(_) => Status::Aws,
            NodeError::Key { .. } | NodeError::Answer(_) | NodeError::Write { .. } | NodeError::Sshd(_) => {
                Status::Incomplete
            }
        }
    }
}

/// The node's managed host keys in `ssh_dir`, with their files.
fn own_keys(ssh_dir: &Path) -> Result<Vec<(PathBuf, PrivateKey)>, NodeError> {
    let mut keys = Vec::new();
    for name in KEY_FILES {
        let path = ssh_dir.join(name);
        if !path.exists() {
            continue;
        }
        let key = PrivateKey::read_openssh_file(&path).map_err(|e| NodeError::Key {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        keys.push((path, key));
    }
    if keys.is_empty() {
        return Err(NodeError::NoKeys(ssh_dir.to_path_buf()));
    }
    Ok(keys)
}

/// Each certificate of `answer` paired with the key file it certifies;
/// refused unless each is a host certificate of one of `keys`, all by one CA.
fn match_certificates(
    answer: &Answer,
    keys: &[(PathBuf, PrivateKey)],
) -> Result<(Vec<(PathBuf, String)>, String), NodeError> {
    let bad = |m: String| NodeError::Answer(m);
    if answer.certificates.len() != keys.len() {
        return Err(bad(format!(
            "{} certificates for {} keys",
            answer.certificates.len(),
            keys.len()
        )));
    }
    let mut out = Vec::new();
    let mut cas = Vec::new();
    for line in &answer.certificates {
        let cert = Certificate::from_openssh(line).map_err(|e| bad(format!("not a certificate: {e}")))?;
        if cert.cert_type() != ssh_key::certificate::CertType::Host {
            return Err(bad("a certificate is not a host certificate".to_owned()));
        }
        let subject = PublicKey::from(cert.public_key().clone());
        let (path, _) = keys
            .iter()
            .find(|(_, k)| k.public_key().key_data() == subject.key_data())
            .ok_or_else(|| {
                bad(format!(
                    "a certificate is for {}, no key of this node",
                    subject.fingerprint(HashAlg::Sha256)
                ))
            })?;
        cas.push(
            PublicKey::from(cert.signature_key().clone())
                .to_openssh()
                .map_err(|e| bad(e.to_string()))?,
        );
        let mut file = path.clone().into_os_string();
        file.push("-cert.pub");
        // Written as its own encoding, with no comment of the answer's.
        let mut clean = cert.clone();
        clean.set_comment("");
        let text = clean.to_openssh().map_err(|e| bad(e.to_string()))?;
        out.push((PathBuf::from(file), format!("{text}\n")));
    }
    cas.dedup();
    if cas.len() != 1 {
        return Err(bad(format!("the certificates come from {} CAs", cas.len())));
    }
    Ok((out, cas.remove(0)))
}

/// The cluster's trust, asked with the proof of the keys in `ssh_dir`
/// over the node's identity document: a login node's claim, or the trust
/// alone ([`TrustAsk`]).
pub async fn trust_node(
    ssh_dir: &Path,
    imds: &impl Imds,
    signer: &impl Signer,
    now_ms: i64,
    ask: TrustAsk,
) -> Result<Trust, NodeError> {
    let keys = own_keys(ssh_dir)?;
    let (document, signature) = imds.identity().await.map_err(NodeError::Imds)?;
    let private: Vec<PrivateKey> = keys.into_iter().map(|(_, k)| k).collect();
    let req = request(&document, &signature, &private, now_ms, signer.audience()).map_err(|e| NodeError::Key {
        path: ssh_dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    drop(private);
    signer.trust(&req, ask).await.map_err(NodeError::Signer)
}

/// Enrols the node whose keys are in `ssh_dir` at `now_ms` (Unix
/// milliseconds): nothing is written unless every certificate checks.
pub async fn enrol_node(
    ssh_dir: &Path,
    asked: &[Principal],
    imds: &impl Imds,
    signer: &impl Signer,
    now_ms: i64,
) -> Result<Written, NodeError> {
    let keys = own_keys(ssh_dir)?;
    let (document, signature) = imds.identity().await.map_err(NodeError::Imds)?;
    let private: Vec<PrivateKey> = keys.iter().map(|(_, k)| k.clone()).collect();
    let req = request(&document, &signature, &private, now_ms, signer.audience()).map_err(|e| NodeError::Key {
        path: ssh_dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    drop(private);
    let answer = signer.enrol(&req, asked).await.map_err(NodeError::Signer)?;
    let (files, ca_line) = match_certificates(&answer, &keys)?;
    let ca = PublicKey::from_openssh(&ca_line)
        .map_err(|e| NodeError::Answer(e.to_string()))?
        .fingerprint(HashAlg::Sha256)
        .to_string();
    let options = WriteOptions {
        mode: 0o644,
        owner: None,
        overwrite: true,
    };
    for (path, text) in &files {
        write_atomic(path, text.as_bytes(), &options).map_err(|e| NodeError::Write {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    }
    Ok(Written {
        instance_id: answer.instance_id,
        principals: answer.principals,
        files: files.into_iter().map(|(p, _)| p).collect(),
        ca,
        ca_line,
        revoked: answer.revoked,
    })
}
