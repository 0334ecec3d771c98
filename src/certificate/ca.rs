//! The host CA that signs: a private key held in the CA secret, or a key
//! in AWS KMS that never leaves it ([`super::kms`]). Every reader of a CA
//! (sign, rotations, known-hosts) takes a [`CaKey`], so both kinds work
//! everywhere a CA does.

use std::sync::Arc;

use ssh_key::PublicKey;
use ssh_key::public::KeyData;

use super::kms::KmsCa;
use crate::fingerprint::Fingerprint;
use crate::keyset::{HostKey, fingerprint_of};

/// A host CA.
#[derive(Clone, Debug)]
pub enum CaKey {
    /// The private key, from the CA secret (`hostkeyctl-ca/v1`).
    Held(Box<HostKey>),
    /// A KMS signing key (`hostkeyctl-ca/kms-v1`): the secret holds its ARN
    /// and public key only.
    Kms(Arc<KmsCa>),
}

impl CaKey {
    /// The CA's public key.
    pub fn public_key(&self) -> &PublicKey {
        match self {
            CaKey::Held(key) => key.public_key(),
            CaKey::Kms(kms) => &kms.public,
        }
    }

    /// The CA's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        match self {
            CaKey::Held(key) => key.fingerprint().clone(),
            CaKey::Kms(kms) => fingerprint_of(&kms.public),
        }
    }

    /// The CA's public line (`ssh-ed25519 AAAA...`), without a comment.
    pub fn public_line(&self) -> String {
        match self {
            CaKey::Held(key) => key.public_line(),
            CaKey::Kms(kms) => kms.public.to_openssh().unwrap_or_default(),
        }
    }

    /// The key type (`ssh-ed25519`, `ecdsa-sha2-nistp384`, ...).
    pub fn key_type(&self) -> String {
        self.public_key().algorithm().as_str().to_owned()
    }

    /// Where the private key is, for messages: `the CA secret` or the KMS
    /// key's ARN.
    pub fn location(&self) -> String {
        match self {
            CaKey::Held(_) => "the CA secret".to_owned(),
            CaKey::Kms(kms) => format!("KMS key {}", kms.key_arn),
        }
    }

    /// Why the last KMS signature failed (ssh-key's error says only
    /// "signature error"), and whether KMS refused or failed.
    pub fn take_error(&self) -> Option<(String, bool)> {
        match self {
            CaKey::Held(_) => None,
            CaKey::Kms(kms) => kms.take_error(),
        }
    }
}

impl From<HostKey> for CaKey {
    fn from(key: HostKey) -> CaKey {
        CaKey::Held(Box::new(key))
    }
}

impl From<&CaKey> for KeyData {
    fn from(ca: &CaKey) -> KeyData {
        ca.public_key().key_data().clone()
    }
}

impl signature::Signer<ssh_key::Signature> for CaKey {
    fn try_sign(&self, message: &[u8]) -> Result<ssh_key::Signature, signature::Error> {
        match self {
            CaKey::Held(key) => key.private_key().try_sign(message),
            CaKey::Kms(kms) => kms.try_sign(message),
        }
    }
}

/// What `ca init` created, as `--output json` prints it.
#[derive(Debug, serde::Serialize)]
pub struct CaReport {
    /// The CA secret's ARN.
    pub arn: String,
    /// The CA key's type.
    pub algorithm: String,
    /// Its SHA-256 fingerprint.
    pub fingerprint: String,
    /// Its public line (what clients' `@cert-authority` lines hold).
    pub public_key: String,
    /// The file it was adopted from (`--from-file`).
    pub adopted_from: Option<std::path::PathBuf>,
    /// The KMS key that holds it, when KMS does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kms_key_arn: Option<String>,
}

impl CaReport {
    /// The report of the CA `key`, stored as `arn`.
    pub fn new(arn: String, key: &CaKey, adopted_from: Option<std::path::PathBuf>) -> Self {
        Self {
            arn,
            algorithm: key.key_type(),
            fingerprint: key.fingerprint().to_string(),
            public_key: key.public_line(),
            adopted_from,
            kms_key_arn: match key {
                CaKey::Kms(kms) => Some(kms.key_arn.clone()),
                CaKey::Held(_) => None,
            },
        }
    }

    /// What the text output says.
    pub fn text(&self) -> String {
        let mut out = format!("created CA {}\n", self.arn);
        if let Some(kms) = &self.kms_key_arn {
            out.push_str(&format!("its private key is KMS key {kms} and never leaves KMS\n"));
        }
        out.push_str(&format!("fingerprint {}\n{}\n", self.fingerprint, self.public_key));
        out
    }
}
