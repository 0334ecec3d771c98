//! The CA secret's value: one private key, never a key set
//! (`hostkeyctl-ca/v1`), or the ARN and public key of a CA in KMS whose
//! private key never leaves it (`hostkeyctl-ca/kms-v1`).

use std::sync::Arc;

use serde::Serialize;
use ssh_key::PublicKey;

use crate::certificate::CaKey;
use crate::certificate::kms::KmsCa;
use crate::ids::SecretId;
use crate::keyset::{HostKey, KeyError};

/// The `format` of a CA document holding the private key.
pub const CA_FORMAT_V1: &str = "hostkeyctl-ca/v1";
/// The `format` of a CA document naming a KMS key.
pub const CA_FORMAT_KMS_V1: &str = "hostkeyctl-ca/kms-v1";

/// The CA secret's value: one CA, not a key set.
pub struct CaDocument {
    /// When it was made (RFC 3339).
    pub created: String,
    /// The CA key.
    pub key: CaKey,
}

impl std::fmt::Debug for CaDocument {
    /// The CA's public fingerprint, never its key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CaDocument")
            .field("created", &self.created)
            .field("fingerprint", &self.key.fingerprint().as_str())
            .field("location", &self.key.location())
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    private_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kms_key_arn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kms_key_spec: Option<String>,
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
    #[error(
        "field `format` is {0:?}, not {CA_FORMAT_V1:?} or {CA_FORMAT_KMS_V1:?}: this secret is not a hostkeyctl CA; check --ca-secret-id"
    )]
    Format(String),
    /// The key is unusable.
    #[error("the CA's private_key: {0}")]
    Key(#[from] KeyError),
    /// A field its format needs is missing, or one it must not have is there.
    #[error("a {format} CA {problem}")]
    Field {
        /// The format.
        format: &'static str,
        /// What is wrong.
        problem: &'static str,
    },
    /// The KMS key cannot be a CA as the document says.
    #[error("the CA's KMS key: {0}")]
    Kms(String),
    /// The document could not be written (nothing was stored).
    #[error("cannot encode the CA document ({0}); nothing was stored")]
    Encode(String),
    /// Public fields disagree with the key.
    #[error("the CA's {0} does not match its key")]
    Mismatch(&'static str),
}

impl CaDocument {
    /// Parses and checks a CA document. A KMS CA comes back unbound: the
    /// store gives it the client that signs ([`KmsCa::bind`]).
    pub fn parse(text: &str) -> Result<Self, CaError> {
        let raw: RawCa = serde_json::from_str(text).map_err(|e| CaError::Shape {
            line: e.line(),
            column: e.column(),
        })?;
        let private = zeroize::Zeroizing::new(raw.private_key.unwrap_or_default());
        let key = match raw.format.as_str() {
            CA_FORMAT_V1 => {
                if private.is_empty() {
                    return Err(CaError::Field {
                        format: CA_FORMAT_V1,
                        problem: "has no private_key",
                    });
                }
                CaKey::from(HostKey::from_openssh(&private)?)
            }
            CA_FORMAT_KMS_V1 => {
                if !private.is_empty() {
                    return Err(CaError::Field {
                        format: CA_FORMAT_KMS_V1,
                        problem: "must hold no private_key: its private key is in KMS",
                    });
                }
                let (Some(arn), Some(spec)) = (raw.kms_key_arn, raw.kms_key_spec) else {
                    return Err(CaError::Field {
                        format: CA_FORMAT_KMS_V1,
                        problem: "needs kms_key_arn and kms_key_spec",
                    });
                };
                let public =
                    PublicKey::from_openssh(raw.public_key.trim()).map_err(|_| CaError::Mismatch("public_key"))?;
                CaKey::Kms(Arc::new(KmsCa::new(arn, spec, &public).map_err(CaError::Kms)?))
            }
            _ => return Err(CaError::Format(raw.format)),
        };
        if key.key_type() != raw.algorithm {
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

    /// The document's `format`: where the private key is.
    pub fn format(&self) -> &'static str {
        match self.key {
            CaKey::Held(_) => CA_FORMAT_V1,
            CaKey::Kms(_) => CA_FORMAT_KMS_V1,
        }
    }

    /// The JSON text (secret: zeroized on drop). Built in a buffer reserved
    /// large enough never to reallocate, as the key set document is, so no
    /// unzeroized copy of the key is left behind.
    pub fn to_json(&self) -> Result<zeroize::Zeroizing<String>, CaError> {
        let (private_key, kms_key_arn, kms_key_spec) = match &self.key {
            CaKey::Held(key) => (Some(key.reveal_private_openssh().to_string()), None, None),
            CaKey::Kms(kms) => (None, Some(kms.key_arn.clone()), Some(kms.key_spec.clone())),
        };
        let mut raw = RawCa {
            format: self.format().to_owned(),
            created: self.created.clone(),
            algorithm: self.key.key_type(),
            public_key: self.key.public_line(),
            fingerprint: self.key.fingerprint().to_string(),
            private_key,
            kms_key_arn,
            kms_key_spec,
        };
        let mut buf = zeroize::Zeroizing::new(Vec::with_capacity(4 * crate::document::MAX_SECRET_BYTES));
        let written = serde_json::to_writer_pretty(&mut *buf, &raw);
        if let Some(private) = raw.private_key.as_mut() {
            zeroize::Zeroize::zeroize(private);
        }
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
            key: crate::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap()),
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

    #[test]
    fn a_kms_ca_document_holds_no_private_key_and_must_agree_with_its_key_spec() {
        use p256::pkcs8::EncodePublicKey;
        let signing = p256::ecdsa::SigningKey::from_slice(&[5u8; 32]).unwrap();
        let der = signing.verifying_key().to_public_key_der().unwrap();
        let algorithm = crate::certificate::kms::KmsAlgorithm::P256;
        let public = algorithm.public_key(der.as_bytes()).unwrap();
        let arn = "arn:aws:kms:us-east-1:111122223333:key/k".to_owned();
        let kms = crate::certificate::kms::KmsCa::new(arn.clone(), "ECC_NIST_P256".to_owned(), &public).unwrap();
        let doc = CaDocument {
            created: "2026-12-04T00:00:00Z".to_owned(),
            key: crate::certificate::CaKey::Kms(std::sync::Arc::new(kms)),
        };
        let json = doc.to_json().unwrap();
        assert!(
            json.contains("hostkeyctl-ca/kms-v1") && !json.contains("private_key"),
            "{}",
            *json
        );
        let back = CaDocument::parse(&json).unwrap();
        assert_eq!(back.key.fingerprint(), doc.key.fingerprint());
        assert_eq!(back.format(), super::CA_FORMAT_KMS_V1);
        // A private key beside a KMS key, or a key spec of another curve.
        let with_private = json.replace("\"kms_key_arn\"", "\"private_key\": \"x\",\n  \"kms_key_arn\"");
        let err = CaDocument::parse(&with_private).unwrap_err().to_string();
        assert!(err.contains("must hold no private_key"), "{err}");
        let alias = json.replace(&arn, "alias/ssh-ca");
        let err = CaDocument::parse(&alias).unwrap_err().to_string();
        assert!(err.contains("is not a KMS key ARN"), "{err}");
        let p384 = json.replace("ECC_NIST_P256", "ECC_NIST_P384");
        let err = CaDocument::parse(&p384).unwrap_err().to_string();
        assert!(err.contains("cannot have the public key"), "{err}");
    }
}
