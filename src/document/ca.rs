//! The CA secret's value (`hostkeyctl-ca/v1`): one private key, never a
//! key set.

use serde::Serialize;
use ssh_key::PublicKey;

use crate::ids::SecretId;
use crate::keyset::{HostKey, KeyError};

/// The `format` of a CA document.
pub const CA_FORMAT_V1: &str = "hostkeyctl-ca/v1";

/// The CA secret's value: one private key, not a key set.
pub struct CaDocument {
    /// When it was made (RFC 3339).
    pub created: String,
    /// The CA key.
    pub key: HostKey,
}

impl std::fmt::Debug for CaDocument {
    /// The CA's public fingerprint, never its key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaDocument")
            .field("created", &self.created)
            .field("fingerprint", &self.key.fingerprint().as_str())
            .finish()
    }
}

#[derive(serde::Deserialize, Serialize)]
struct RawCa {
    format: String,
    created: String,
    algorithm: String,
    public_key: String,
    fingerprint: String,
    private_key: String,
}

/// Why a CA secret's value is unusable. Never contains key material.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    /// Not the CA document's shape (the position only: serde may quote values).
    #[error("the secret is not a hostkeyctl CA (invalid at line {line} column {column}); check --ca-secret-id")]
    Shape {
        /// Line.
        line: usize,
        /// Column.
        column: usize,
    },
    /// Another format.
    #[error("field `format` is {0:?}, not {CA_FORMAT_V1:?}: this secret is not a hostkeyctl CA; check --ca-secret-id")]
    Format(String),
    /// The key is unusable.
    #[error("the CA's private_key: {0}")]
    Key(#[from] KeyError),
    /// The document could not be written (nothing was stored).
    #[error("cannot encode the CA document ({0}); nothing was stored")]
    Encode(String),
    /// Public fields disagree with the key.
    #[error("the CA's {0} does not match its private key")]
    Mismatch(&'static str),
}

impl CaDocument {
    /// Parses and checks a CA document.
    pub fn parse(text: &str) -> Result<Self, CaError> {
        let raw: RawCa = serde_json::from_str(text).map_err(|e| CaError::Shape {
            line: e.line(),
            column: e.column(),
        })?;
        let private = zeroize::Zeroizing::new(raw.private_key);
        if raw.format != CA_FORMAT_V1 {
            return Err(CaError::Format(raw.format));
        }
        let key = HostKey::from_openssh(&private)?;
        if key.algorithm().key_type() != raw.algorithm {
            return Err(CaError::Mismatch("algorithm"));
        }
        if key.fingerprint().as_str() != raw.fingerprint {
            return Err(CaError::Mismatch("fingerprint"));
        }
        let stated = PublicKey::from_openssh(raw.public_key.trim()).map_err(|_| CaError::Mismatch("public_key"))?;
        if stated.key_data() != key.public_key().key_data() {
            return Err(CaError::Mismatch("public_key"));
        }
        Ok(CaDocument {
            created: raw.created,
            key,
        })
    }

    /// The JSON text (secret: zeroized on drop). Built in a buffer reserved
    /// large enough never to reallocate, as the key set document is, so no
    /// unzeroized copy of the key is left behind.
    pub fn to_json(&self) -> Result<zeroize::Zeroizing<String>, CaError> {
        let mut raw = RawCa {
            format: CA_FORMAT_V1.to_owned(),
            created: self.created.clone(),
            algorithm: self.key.algorithm().key_type().to_owned(),
            public_key: self.key.public_line(),
            fingerprint: self.key.fingerprint().to_string(),
            private_key: self.key.reveal_private_openssh().to_string(),
        };
        let mut buf = zeroize::Zeroizing::new(Vec::with_capacity(4 * crate::document::MAX_SECRET_BYTES));
        let written = serde_json::to_writer_pretty(&mut *buf, &raw);
        zeroize::Zeroize::zeroize(&mut raw.private_key);
        written.map_err(|e| CaError::Encode(e.to_string()))?;
        let text = String::from_utf8(std::mem::take(&mut *buf)).map_err(|_| CaError::Encode("not UTF-8".to_owned()))?;
        Ok(zeroize::Zeroizing::new(text))
    }
}

/// The prefix of the key set secrets' names: every login node's role may
/// read every secret under it (`iam/node.json`, the template's
/// `SecretNamePrefix`), so a CA must never live there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySetPrefix(String);

/// The key sets' prefix of the shipped policies.
pub const DEFAULT_KEY_SET_PREFIX: &str = "hostkeys/";

impl KeySetPrefix {
    /// Parses a prefix: 1 to 256 characters a secret name may hold.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.is_empty() || text.len() > 256 {
            return Err(format!(
                "the key set prefix must be 1 to 256 characters long (the shipped policies use {DEFAULT_KEY_SET_PREFIX})"
            ));
        }
        if let Some(bad) = text
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || "/_+=.@-".contains(*c)))
        {
            return Err(format!(
                "{} is not allowed in a key set prefix: a secret name has ASCII letters, digits and /_+=.@- only",
                crate::escape::escape(&bad.to_string())
            ));
        }
        Ok(KeySetPrefix(text.to_owned()))
    }

    /// The prefix.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Refuses a CA secret whose name is under the prefix: the login
    /// nodes' role could read its private key. By name, since that is what
    /// the policy grants by.
    pub fn check_ca(&self, ca: &SecretId) -> Result<(), String> {
        if ca.name_part().starts_with(&self.0) {
            return Err(format!(
                "CA secret {ca} is under {}, the prefix every login node's role may read (iam/node.json): every node could read the CA's private key. Keep CAs under hostkeyctl-ca/ (docs/certificates.md); if your key sets live under another prefix, say so with --key-set-prefix",
                self.0
            ));
        }
        Ok(())
    }
}

impl std::str::FromStr for KeySetPrefix {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KeySetPrefix::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::{CaDocument, KeySetPrefix};
    use crate::ids::SecretId;

    #[test]
    fn a_ca_under_the_key_set_prefix_is_refused_by_name_or_arn() {
        let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
        for refused in [
            "hostkeys/ca",
            "hostkeys/x/y",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:hostkeys/ca-AbCdEf",
        ] {
            let err = prefix.check_ca(&SecretId::parse(refused).unwrap()).unwrap_err();
            assert!(err.contains("hostkeys/") && err.contains("iam/node.json"), "{err}");
        }
        for allowed in [
            "hostkeyctl-ca/demo",
            "hostkeys",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:hostkeyctl-ca/x-AbCdEf",
        ] {
            assert!(prefix.check_ca(&SecretId::parse(allowed).unwrap()).is_ok(), "{allowed}");
        }
        assert!(KeySetPrefix::parse("").is_err());
        assert!(KeySetPrefix::parse("a b").is_err());
    }
    use crate::keyset::{HostKey, KeyAlgorithm};

    #[test]
    fn a_ca_document_round_trips_and_is_no_key_set() {
        let doc = CaDocument {
            created: "2026-12-01T00:00:00Z".to_owned(),
            key: HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap(),
        };
        let json = doc.to_json().unwrap();
        let back = CaDocument::parse(&json).unwrap();
        assert_eq!(back.key.fingerprint(), doc.key.fingerprint());
        assert!(crate::document::SecretDocument::parse(&json).is_err());
        let err = CaDocument::parse(
            r#"{"format":"x","created":"","algorithm":"","public_key":"","fingerprint":"","private_key":"SECRET"}"#,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(!err.contains("SECRET") && err.contains("not a hostkeyctl CA"), "{err}");
    }
}
