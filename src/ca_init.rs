//! `ca init` as a flow over the store and KMS: a host CA's secret
//! (docs/certificates.md), never under the prefix the login nodes' role
//! reads, never overwriting a CA, and never leaving a new KMS key unnamed.
//!
//! The CA is adopted from a file, generated, an existing KMS key, or a new
//! one. A KMS key is billed from its creation, so a new one is created
//! only after every check that needs no AWS and a lookup that the CA
//! secret does not exist yet; every error after its creation names it.

use std::path::Path;

use crate::certificate::kms::{CaKeys, KmsAlgorithm, KmsCaError};
use crate::certificate::{CaKey, CaReport};
use crate::document::{CaDocument, KeySetPrefix};
use crate::exit::{ExitStatus, Status};
use crate::ids::SecretId;
use crate::keyset::{HostKey, KeyAlgorithm};
use crate::store::{CaCreateRequest, SecretStore, StoreError};

/// Where the CA's key comes from.
#[derive(Clone, Copy, Debug)]
pub enum CaSource<'a> {
    /// Adopted from a private key file.
    File(&'a Path),
    /// Generated here, held in the CA secret.
    Generate(KeyAlgorithm),
    /// An existing KMS key (an id, ARN, alias name or alias ARN).
    Kms(&'a str),
    /// A new KMS key of this algorithm, created for this CA.
    NewKms(KeyAlgorithm),
}

/// What `ca init` is asked for.
#[derive(Clone, Copy, Debug)]
pub struct InitRequest<'a> {
    /// The CA secret.
    pub secret: &'a SecretId,
    /// Where the key sets live: the CA may not be under it.
    pub key_set_prefix: &'a KeySetPrefix,
    /// The CA's key.
    pub source: CaSource<'a>,
    /// Extra tags on the secret.
    pub tags: &'a [(String, String)],
    /// The customer managed KMS key that encrypts the secret, if any.
    pub kms_key_id: Option<&'a str>,
}

/// Why no CA secret was made, and what was left.
#[derive(Debug, thiserror::Error)]
pub enum CaInitError {
    /// What the request itself, or the CA secret already there, refuses (2).
    #[error("{0}")]
    Refused(String),
    /// The store refused or could not be reached.
    #[error("{error}; {left}")]
    Store {
        /// The store's error.
        error: StoreError,
        /// What was left.
        left: String,
    },
    /// KMS refused, could not be reached, or the key cannot be a CA.
    #[error("{error}; {left}")]
    Kms {
        /// KMS's error.
        error: KmsCaError,
        /// What was left.
        left: String,
    },
}

impl ExitStatus for CaInitError {
    /// A refusal 2; the store's or KMS's status otherwise.
    fn status(&self) -> Status {
        match self {
            CaInitError::Refused(_) => Status::Usage,
            CaInitError::Store { error, .. } => error.status(),
            CaInitError::Kms { error, .. } => error.status(),
        }
    }
}

const NOTHING: &str = "nothing was created";

impl InitRequest<'_> {
    /// What the request alone refuses, before any AWS configuration or
    /// call: a CA under the prefix every login node's role may read.
    pub fn check(&self) -> Result<(), String> {
        self.key_set_prefix
            .check_ca(self.secret)
            .map_err(|e| format!("{e}; {NOTHING}"))
    }
}

/// Makes the CA secret `request` asks for; its report.
pub async fn init(
    store: &impl SecretStore,
    kms: &impl CaKeys,
    request: &InitRequest<'_>,
) -> Result<CaReport, CaInitError> {
    request.check().map_err(CaInitError::Refused)?;
    let key = ca_key(store, kms, request).await?;
    let ca = CaDocument {
        created: crate::document::SecretDocument::new(crate::keyset::KeySet::default()).created,
        key,
    };
    let created = store
        .create_ca(&CaCreateRequest {
            name: request.secret,
            ca: &ca,
            description: "SSH host certificate authority (managed by hostkeyctl)",
            tags: request.tags,
            kms_key_id: request.kms_key_id,
        })
        .await;
    let arn = match (created, &ca.key, request.source) {
        (Ok(arn), _, _) => arn,
        // Never leave a new KMS key unnamed.
        (Err(error), CaKey::Kms(kms), CaSource::NewKms(_)) => {
            let left = format!(
                "the new KMS key {} is the CA of no secret: pass it as --kms-ca-key to try again, or schedule its deletion",
                kms.key_arn
            );
            return Err(match error {
                StoreError::AlreadyExists { name } => CaInitError::Refused(format!("{}; {left}", exists(&name))),
                error => CaInitError::Store { error, left },
            });
        }
        (Err(StoreError::AlreadyExists { name }), _, _) => return Err(CaInitError::Refused(exists(&name))),
        // CreateSecret may have taken effect (a lost answer, one that
        // cannot be read): say how to tell, never that nothing was made.
        (Err(error), _, _) => {
            return Err(CaInitError::Store {
                error,
                left: format!(
                    "the CA secret may or may not exist now: `aws secretsmanager describe-secret --secret-id {}` tells (ca init never overwrites one)",
                    request.secret
                ),
            });
        }
    };
    let adopted = match request.source {
        CaSource::File(path) => Some(path.to_path_buf()),
        _ => None,
    };
    Ok(CaReport::new(arn.to_string(), &ca.key, adopted))
}

fn exists(name: &impl std::fmt::Display) -> String {
    format!(
        "secret {name} already exists and ca init never overwrites a CA; to replace a CA, create a new one under another name (docs/certificates.md, \"Rotating the CA\")"
    )
}

/// The CA's key: adopted, generated, an existing KMS key, or a new one
/// (created only once the CA secret is known not to exist).
async fn ca_key(store: &impl SecretStore, kms: &impl CaKeys, request: &InitRequest<'_>) -> Result<CaKey, CaInitError> {
    let key = match request.source {
        CaSource::File(path) => {
            let text = zeroize::Zeroizing::new(
                std::fs::read_to_string(path)
                    .map_err(|e| CaInitError::Refused(format!("cannot read the CA key {}: {e}", path.display())))?,
            );
            return HostKey::from_openssh(&text)
                .map(CaKey::from)
                .map_err(|e| CaInitError::Refused(format!("{} cannot be the CA: {e}", path.display())));
        }
        CaSource::Generate(algorithm) => {
            return HostKey::generate(algorithm, crate::keyset::DEFAULT_RSA_BITS)
                .map(CaKey::from)
                .map_err(|e| CaInitError::Refused(format!("generating the CA key: {e}")));
        }
        CaSource::Kms(key) => key.to_owned(),
        CaSource::NewKms(algorithm) => {
            match store.describe(request.secret).await {
                Err(StoreError::Aws(crate::aws_error::AwsError::NotFound { .. })) => {}
                Ok(_) => {
                    return Err(CaInitError::Refused(format!(
                        "secret {} already exists and ca init never overwrites a CA; {NOTHING} (docs/certificates.md, \"Rotating the CA\")",
                        request.secret
                    )));
                }
                Err(error) => {
                    return Err(CaInitError::Store {
                        error,
                        left: NOTHING.to_owned(),
                    });
                }
            }
            let description = format!("SSH host CA of {} (managed by hostkeyctl)", request.secret);
            kms.create(kms_algorithm(algorithm), &description)
                .await
                .map_err(|error| CaInitError::Kms {
                    error,
                    left: NOTHING.to_owned(),
                })?
        }
    };
    let new = matches!(request.source, CaSource::NewKms(_));
    let ca = kms.ca(&key, new).await.map_err(|error| CaInitError::Kms {
        error,
        left: if new {
            format!(
                "the CA secret was not created (the KMS key {key} was created: schedule its deletion or pass it as --kms-ca-key)"
            )
        } else {
            "the CA secret was not created".to_owned()
        },
    })?;
    Ok(CaKey::Kms(std::sync::Arc::new(ca)))
}

fn kms_algorithm(algorithm: KeyAlgorithm) -> KmsAlgorithm {
    match algorithm {
        KeyAlgorithm::Ed25519 => KmsAlgorithm::Ed25519,
        KeyAlgorithm::Ecdsa => KmsAlgorithm::P256,
        KeyAlgorithm::Rsa => KmsAlgorithm::Rsa,
    }
}
