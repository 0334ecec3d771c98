//! The secret document ([`SecretDocument`]): the key set, its certificates
//! and its retiring keys as Secrets Manager holds them.

use super::*;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use ssh_key::{Certificate, PublicKey};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use zeroize::Zeroizing;

use crate::keyset::{HostKey, KeyAlgorithm, KeyError, KeySet, fingerprint_of};

/// The `format` value of version 1 documents.
pub const FORMAT_V1: &str = "hostkeyctl/v1";

/// Secrets Manager's limit on a `SecretString`, in bytes.
pub const MAX_SECRET_BYTES: usize = 65_536;

/// A key set with the metadata stored beside it.
#[derive(Clone, Debug, PartialEq)]
pub struct SecretDocument {
    /// When the set was made (RFC 3339, UTC).
    pub created: String,
    /// The keys.
    pub keys: KeySet,
    /// Host certificates on the keys (`hostkeyctl sign`), by algorithm.
    pub certificates: BTreeMap<KeyAlgorithm, Certificate>,
    /// On a set announced at a promotion: the set it retired, still
    /// offered as extra keys for a while ([`Retiring`]).
    pub retiring: Option<Retiring>,
}

/// Why a secret's text is not a valid hostkeyctl document. Each variant
/// names the field at fault; none ever contains private key material.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    /// Larger than Secrets Manager can store.
    #[error("the document is {size} bytes; Secrets Manager stores at most {MAX_SECRET_BYTES} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
    },
    /// Not JSON at all.
    #[error("the secret is not JSON ({detail}), so it is not a hostkeyctl key set; check the secret id")]
    NotJson {
        /// Where parsing stopped.
        detail: String,
    },
    /// JSON, but not of the document's shape.
    #[error("the secret is not a hostkeyctl key set: {detail}; check the secret id")]
    Schema {
        /// What is missing or of the wrong type.
        detail: String,
    },
    /// A `format` this version does not understand.
    #[error(
        "field `format` is {found:?}, but this hostkeyctl reads only {FORMAT_V1:?}; upgrade hostkeyctl or check the secret id"
    )]
    UnknownFormat {
        /// The value found.
        found: String,
    },
    /// `created` is not an RFC 3339 time.
    #[error("field `created` is {found:?}, not an RFC 3339 time such as \"2026-01-31T12:00:00Z\"")]
    BadCreated {
        /// The value found.
        found: String,
    },
    /// No key at all.
    #[error("field `keys` is empty; a key set needs at least one host key")]
    NoKeys,
    /// An algorithm hostkeyctl does not manage.
    #[error("keys[{index}].algorithm is {found:?}; supported are ssh-ed25519, ecdsa-sha2-nistp256 and ssh-rsa")]
    UnsupportedAlgorithm {
        /// Position in `keys`.
        index: usize,
        /// The value found.
        found: String,
    },
    /// Two entries for one algorithm.
    #[error(
        "keys[{index}].algorithm {algorithm} appears twice (first in keys[{first}]); a set has one key per algorithm"
    )]
    DuplicateAlgorithm {
        /// Position of the second entry.
        index: usize,
        /// Position of the first entry.
        first: usize,
        /// The algorithm.
        algorithm: KeyAlgorithm,
    },
    /// The private key is unusable.
    #[error("keys[{index}].private_key: {source}")]
    PrivateKey {
        /// Position in `keys`.
        index: usize,
        /// What is wrong with it.
        source: KeyError,
    },
    /// The private key is of another algorithm than the entry says.
    #[error("keys[{index}].private_key is a {found} key, but keys[{index}].algorithm says {expected}")]
    WrongSlot {
        /// Position in `keys`.
        index: usize,
        /// What the entry says.
        expected: KeyAlgorithm,
        /// What the key is.
        found: KeyAlgorithm,
    },
    /// `public_key` is not a public key line.
    #[error("keys[{index}].public_key is not an OpenSSH public key line ({source})")]
    BadPublicKey {
        /// Position in `keys`.
        index: usize,
        /// Why it did not parse.
        source: ssh_key::Error,
    },
    /// `public_key` is not the private key's public half.
    #[error("keys[{index}].public_key ({stated}) is not the public half of keys[{index}].private_key ({actual})")]
    PublicKeyMismatch {
        /// Position in `keys`.
        index: usize,
        /// Fingerprint of the stated public key.
        stated: String,
        /// Fingerprint of the private key.
        actual: String,
    },
    /// `certificate` is not an OpenSSH certificate line.
    #[error(
        "keys[{index}].certificate is not an OpenSSH certificate line ({source}); sign the set again with `hostkeyctl sign`"
    )]
    BadCertificate {
        /// Position in `keys`.
        index: usize,
        /// Why it did not parse.
        source: ssh_key::Error,
    },
    /// `certificate` certifies another key.
    #[error(
        "keys[{index}].certificate certifies key {certified}, not keys[{index}].private_key ({actual}); sign the set again with `hostkeyctl sign`"
    )]
    CertificateMismatch {
        /// Position in `keys`.
        index: usize,
        /// What the certificate certifies.
        certified: String,
        /// The entry's key.
        actual: String,
    },
    /// `fingerprint` is not the key's fingerprint.
    #[error("keys[{index}].fingerprint is {stated:?}, but the key's SHA256 fingerprint is {actual}")]
    FingerprintMismatch {
        /// Position in `keys`.
        index: usize,
        /// The value found.
        stated: String,
        /// The key's real fingerprint.
        actual: String,
    },
}

#[derive(Serialize, Deserialize)]
struct RawDocument {
    format: String,
    created: String,
    keys: Vec<RawKey>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retiring: Option<retiring::RawRetiring>,
}

#[derive(Serialize, Deserialize)]
struct RawKey {
    algorithm: String,
    public_key: String,
    fingerprint: String,
    #[serde(with = "zeroizing_string")]
    private_key: Zeroizing<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    certificate: Option<String>,
}

/// serde for `Zeroizing<String>` (zeroize has no serde support): the
/// string is moved into the zeroizing wrapper as soon as it is decoded.
mod zeroizing_string {
    use serde::{Deserialize, Deserializer, Serializer};
    use zeroize::Zeroizing;

    pub fn serialize<S: Serializer>(value: &Zeroizing<String>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(value)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Zeroizing<String>, D::Error> {
        String::deserialize(deserializer).map(Zeroizing::new)
    }
}

impl SecretDocument {
    /// A document for `keys`, stamped with the current time.
    pub fn new(keys: KeySet) -> Self {
        let now = OffsetDateTime::now_utc()
            .replace_nanosecond(0)
            .unwrap_or(OffsetDateTime::UNIX_EPOCH);
        SecretDocument {
            created: now.format(&Rfc3339).unwrap_or_default(),
            keys,
            certificates: BTreeMap::new(),
            retiring: None,
        }
    }

    /// The JSON text, ready for `SecretString`. Secret: zeroized on drop.
    pub fn to_json(&self) -> Result<Zeroizing<String>, DocumentError> {
        let raw = RawDocument {
            format: FORMAT_V1.to_owned(),
            created: self.created.clone(),
            keys: self
                .keys
                .keys()
                .map(|k| RawKey {
                    algorithm: k.algorithm().key_type().to_owned(),
                    public_key: k.public_line(),
                    fingerprint: k.fingerprint().to_string(),
                    private_key: k.reveal_private_openssh(),
                    certificate: self
                        .certificates
                        .get(&k.algorithm())
                        .map(crate::certificate::certificate_line),
                })
                .collect(),
            retiring: self.retiring.as_ref().map(Retiring::to_raw),
        };
        // Reserve more than the largest document up front so the buffer never
        // reallocates, which would leave unzeroized copies of key material.
        let mut buf = Zeroizing::new(Vec::with_capacity(4 * MAX_SECRET_BYTES));
        serde_json::to_writer_pretty(&mut *buf, &raw).map_err(|e| DocumentError::Schema { detail: e.to_string() })?;
        if buf.len() > MAX_SECRET_BYTES {
            return Err(DocumentError::TooLarge { size: buf.len() });
        }
        let text = String::from_utf8(std::mem::take(&mut *buf)).map_err(|_| DocumentError::Schema {
            detail: "serialised document is not UTF-8".to_owned(),
        })?;
        Ok(Zeroizing::new(text))
    }

    /// Parses and validates a document. All-or-nothing.
    pub fn parse(text: &str) -> Result<Self, DocumentError> {
        if text.len() > MAX_SECRET_BYTES {
            return Err(DocumentError::TooLarge { size: text.len() });
        }
        let raw: RawDocument = serde_json::from_str(text).map_err(classify_json_error)?;
        if raw.format != FORMAT_V1 {
            return Err(DocumentError::UnknownFormat { found: raw.format });
        }
        if OffsetDateTime::parse(&raw.created, &Rfc3339).is_err() {
            return Err(DocumentError::BadCreated { found: raw.created });
        }
        if raw.keys.is_empty() {
            return Err(DocumentError::NoKeys);
        }
        let mut keys = KeySet::default();
        let mut certificates = BTreeMap::new();
        let mut seen: Vec<(KeyAlgorithm, usize)> = Vec::new();
        for (index, entry) in raw.keys.iter().enumerate() {
            let algorithm =
                KeyAlgorithm::from_key_type(&entry.algorithm).ok_or_else(|| DocumentError::UnsupportedAlgorithm {
                    index,
                    found: entry.algorithm.clone(),
                })?;
            if let Some(&(_, first)) = seen.iter().find(|(a, _)| *a == algorithm) {
                return Err(DocumentError::DuplicateAlgorithm {
                    index,
                    first,
                    algorithm,
                });
            }
            seen.push((algorithm, index));
            let key = HostKey::from_openssh(&entry.private_key)
                .map_err(|source| DocumentError::PrivateKey { index, source })?;
            if key.algorithm() != algorithm {
                return Err(DocumentError::WrongSlot {
                    index,
                    expected: algorithm,
                    found: key.algorithm(),
                });
            }
            let stated = PublicKey::from_openssh(entry.public_key.trim())
                .map_err(|source| DocumentError::BadPublicKey { index, source })?;
            if stated.key_data() != key.public_key().key_data() {
                return Err(DocumentError::PublicKeyMismatch {
                    index,
                    stated: fingerprint_of(&stated).to_string(),
                    actual: key.fingerprint().to_string(),
                });
            }
            if entry.fingerprint != key.fingerprint().as_str() {
                return Err(DocumentError::FingerprintMismatch {
                    index,
                    stated: entry.fingerprint.clone(),
                    actual: key.fingerprint().to_string(),
                });
            }
            if let Some(line) = &entry.certificate {
                let cert = Certificate::from_openssh(line.trim())
                    .map_err(|source| DocumentError::BadCertificate { index, source })?;
                if cert.public_key() != key.public_key().key_data() {
                    return Err(DocumentError::CertificateMismatch {
                        index,
                        certified: crate::certificate::subject_fingerprint(&cert).to_string(),
                        actual: key.fingerprint().to_string(),
                    });
                }
                certificates.insert(algorithm, cert);
            }
            keys.insert(key);
        }
        let retiring = raw.retiring.map(Retiring::from_raw).transpose()?;
        Ok(SecretDocument {
            created: raw.created,
            keys,
            certificates,
            retiring,
        })
    }
}

/// Turns a serde_json error into a [`DocumentError`] that cannot leak key
/// material: serde quotes offending string values in its messages, so those
/// messages are replaced by the position alone.
fn classify_json_error(e: serde_json::Error) -> DocumentError {
    use serde_json::error::Category;
    let position = format!("line {} column {}", e.line(), e.column());
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => DocumentError::NotJson {
            detail: format!("invalid JSON at {position}"),
        },
        Category::Data => {
            let message = e.to_string();
            let detail = if message.contains('"') {
                format!("a field has the wrong type at {position}")
            } else {
                message
            };
            DocumentError::Schema { detail }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{DocumentError, SecretDocument};
    use crate::keyset::{KeyAlgorithm, KeySet};

    #[test]
    fn round_trips_and_names_missing_fields() {
        let set = KeySet::generate(&[KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa], 3072).unwrap();
        let doc = SecretDocument::new(set);
        let json = doc.to_json().unwrap();
        assert_eq!(SecretDocument::parse(&json).unwrap(), doc);

        let err = SecretDocument::parse(r#"{"format":"hostkeyctl/v1","created":"2026-01-01T00:00:00Z"}"#).unwrap_err();
        assert!(
            matches!(&err, DocumentError::Schema { detail } if detail.contains("missing field `keys`")),
            "{err}"
        );
    }

    #[test]
    fn schema_errors_never_echo_string_values() {
        let err = SecretDocument::parse(r#"{"format":"hostkeyctl/v1","created":"x","keys":"SECRETPEM"}"#).unwrap_err();
        let text = err.to_string();
        assert!(!text.contains("SECRETPEM"), "{text}");
        assert!(text.contains("line 1"), "{text}");
    }
}
