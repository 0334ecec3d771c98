//! The Secrets Manager store: the single source of truth for key sets.
//!
//! One secret holds the canonical key set as a [`SecretDocument`]. Version
//! stages carry the rotation state (`AWSCURRENT`, `AWSPENDING`,
//! `AWSPREVIOUS`). Reads always name a stage or a version id explicitly;
//! the service's "default version" is never relied on.
//!
//! The public half of the current set is also recorded in the secret's tags
//! (`hostkeyctl:fp:<key type>` and `hostkeyctl:version`), readable with
//! `secretsmanager:DescribeSecret` alone, so auditors never need permission
//! to read private keys (docs/iam.md).

use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::types::Tag;
use zeroize::Zeroizing;

use crate::aws::{AwsError, Call};
use crate::document::{DocumentError, SecretDocument};
use crate::keyset::{KeyAlgorithm, KeySet};

/// The stage nodes must serve.
pub const STAGE_CURRENT: &str = "AWSCURRENT";
/// A rotation in flight.
pub const STAGE_PENDING: &str = "AWSPENDING";
/// The last good set.
pub const STAGE_PREVIOUS: &str = "AWSPREVIOUS";
/// Tag marking a secret as a hostkeyctl key set.
pub const TAG_FORMAT: &str = "hostkeyctl:format";
/// Tag naming the version whose fingerprints the `hostkeyctl:fp:*` tags hold.
pub const TAG_VERSION: &str = "hostkeyctl:version";
/// Prefix of the fingerprint tags, followed by the key type.
pub const TAG_FP_PREFIX: &str = "hostkeyctl:fp:";

/// Which version of a secret to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionSelector {
    /// The version carrying this staging label.
    Stage(String),
    /// This exact version id.
    VersionId(String),
}

impl VersionSelector {
    /// From `--version-id` / `--stage` options: the version id wins, and
    /// neither means AWSCURRENT.
    pub fn from_options(version_id: Option<&String>, stage: Option<&String>) -> Self {
        match (version_id, stage) {
            (Some(v), _) => VersionSelector::VersionId(v.clone()),
            (None, Some(s)) => VersionSelector::Stage(s.clone()),
            (None, None) => VersionSelector::Stage(STAGE_CURRENT.to_owned()),
        }
    }
}

impl std::fmt::Display for VersionSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionSelector::Stage(s) => write!(f, "stage {s}"),
            VersionSelector::VersionId(v) => write!(f, "version {v}"),
        }
    }
}

/// One version of the secret, read and validated.
#[derive(Debug)]
pub struct StoredVersion {
    /// The secret's ARN.
    pub arn: String,
    /// The secret's name.
    pub name: String,
    /// The version id.
    pub version_id: String,
    /// Its staging labels.
    pub stages: Vec<String>,
    /// The key set.
    pub document: SecretDocument,
}

/// A version's metadata.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VersionInfo {
    /// The version id.
    pub version_id: String,
    /// Its staging labels.
    pub stages: Vec<String>,
    /// When Secrets Manager created it (RFC 3339), if known.
    pub created: Option<String>,
}

/// The secret's metadata (no values).
#[derive(Clone, Debug, serde::Serialize)]
pub struct SecretInfo {
    /// ARN.
    pub arn: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// The KMS key, when not the AWS managed key.
    pub kms_key_id: Option<String>,
    /// Tags.
    pub tags: Vec<(String, String)>,
    /// Versions that carry at least one stage, newest first.
    pub versions: Vec<VersionInfo>,
}

impl SecretInfo {
    /// The version carrying `stage`.
    pub fn version_with_stage(&self, stage: &str) -> Option<&VersionInfo> {
        self.versions.iter().find(|v| v.stages.iter().any(|s| s == stage))
    }

    /// The fingerprints recorded in the tags, with the version they are of.
    pub fn tagged_fingerprints(&self) -> Option<(String, Vec<(KeyAlgorithm, String)>)> {
        let version = self.tags.iter().find(|(k, _)| k == TAG_VERSION)?.1.clone();
        let fps = self
            .tags
            .iter()
            .filter_map(|(k, v)| {
                let key_type = k.strip_prefix(TAG_FP_PREFIX)?;
                Some((KeyAlgorithm::from_key_type(key_type)?, v.clone()))
            })
            .collect();
        Some((version, fps))
    }
}

/// What `create` needs.
#[derive(Debug)]
pub struct CreateRequest<'a> {
    /// Secret name.
    pub name: &'a str,
    /// The key set.
    pub document: &'a SecretDocument,
    /// Description.
    pub description: &'a str,
    /// Extra tags.
    pub tags: &'a [(String, String)],
    /// Customer managed KMS key, if any.
    pub kms_key_id: Option<&'a str>,
}

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An AWS call failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// `init` on an existing secret.
    #[error(
        "secret {name} already exists and init never overwrites a key set; `hostkeyctl status --secret-id {name}` shows it, and rotating its keys replaces them"
    )]
    AlreadyExists {
        /// The name given.
        name: String,
    },
    /// The secret holds something else.
    #[error("secret {secret} ({selector}) is not a hostkeyctl key set: {source}")]
    NotHostkeyctl {
        /// The secret id.
        secret: String,
        /// Which version was read.
        selector: VersionSelector,
        /// Why.
        source: DocumentError,
    },
    /// The secret has a binary value.
    #[error("secret {secret} ({selector}) holds SecretBinary, not a hostkeyctl JSON document; check the secret id")]
    Binary {
        /// The secret id.
        secret: String,
        /// Which version was read.
        selector: VersionSelector,
    },
    /// A version id was reused for different content.
    #[error(
        "version {version_id} of {secret} already exists with different content; a ClientRequestToken must not be reused for another key set"
    )]
    TokenConflict {
        /// The secret.
        secret: String,
        /// The version id.
        version_id: String,
    },
}

/// A fresh random version id / ClientRequestToken (a UUID v4).
pub fn new_token() -> String {
    let b: [u8; 16] = rand::random();
    format!(
        "{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-4{:01x}{:02x}-{:01x}{:01x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
        b[0],
        b[1],
        b[2],
        b[3],
        b[4],
        b[5],
        b[6] & 0x0f,
        b[7],
        8 | (b[8] & 0x3),
        b[8] >> 4,
        b[9],
        b[10],
        b[11],
        b[12],
        b[13],
        b[14],
        b[15]
    )
}

/// The fingerprint tags for a set at a version.
pub fn fingerprint_tags(version_id: &str, keys: &KeySet) -> Vec<(String, String)> {
    let mut tags = vec![(TAG_VERSION.to_owned(), version_id.to_owned())];
    tags.extend(keys.keys().map(|k| {
        (
            format!("{TAG_FP_PREFIX}{}", k.algorithm().key_type()),
            k.fingerprint().to_owned(),
        )
    }));
    tags
}

fn to_tags(pairs: &[(String, String)]) -> Vec<Tag> {
    pairs
        .iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

fn time_string(t: Option<&aws_sdk_secretsmanager::primitives::DateTime>) -> Option<String> {
    t.and_then(|t| t.fmt(aws_sdk_secretsmanager::primitives::DateTimeFormat::DateTime).ok())
}

/// Secrets Manager through the AWS SDK.
#[derive(Clone, Debug)]
pub struct SecretsManagerStore {
    client: Client,
}

impl SecretsManagerStore {
    /// A store using `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        SecretsManagerStore {
            client: Client::new(config),
        }
    }

    /// Creates the secret with the document as its first (AWSCURRENT)
    /// version. Returns the ARN and version id.
    pub async fn create(&self, req: &CreateRequest<'_>) -> Result<(String, String), StoreError> {
        let version_id = new_token();
        let mut tags = vec![(TAG_FORMAT.to_owned(), crate::document::FORMAT_V1.to_owned())];
        tags.extend(fingerprint_tags(&version_id, &req.document.keys));
        tags.extend(req.tags.iter().cloned());
        let json = req.document.to_json().map_err(|source| StoreError::NotHostkeyctl {
            secret: req.name.to_owned(),
            selector: VersionSelector::VersionId(version_id.clone()),
            source,
        })?;
        let call = Call::new("secretsmanager:CreateSecret", format!("secret {}", req.name));
        let out = self
            .client
            .create_secret()
            .name(req.name)
            .description(req.description)
            .secret_string(json.as_str())
            .client_request_token(&version_id)
            .set_kms_key_id(req.kms_key_id.map(str::to_owned))
            .set_tags(Some(to_tags(&tags)))
            .send()
            .await
            .map_err(|e| {
                if e.as_service_error().is_some_and(|s| s.is_resource_exists_exception()) {
                    StoreError::AlreadyExists {
                        name: req.name.to_owned(),
                    }
                } else {
                    StoreError::Aws(AwsError::from_sdk(e, &call))
                }
            })?;
        Ok((
            out.arn().unwrap_or_default().to_owned(),
            out.version_id().unwrap_or(&version_id).to_owned(),
        ))
    }

    /// Reads and validates one version.
    pub async fn get(&self, secret_id: &str, selector: &VersionSelector) -> Result<StoredVersion, StoreError> {
        let call = Call::new(
            "secretsmanager:GetSecretValue",
            format!("secret {secret_id} ({selector})"),
        );
        let mut request = self.client.get_secret_value().secret_id(secret_id);
        request = match selector {
            VersionSelector::Stage(s) => request.version_stage(s),
            VersionSelector::VersionId(v) => request.version_id(v),
        };
        let mut out = request.send().await.map_err(|e| AwsError::from_sdk(e, &call))?;
        let Some(text) = out.secret_string.take().map(Zeroizing::new) else {
            return Err(StoreError::Binary {
                secret: secret_id.to_owned(),
                selector: selector.clone(),
            });
        };
        let document = SecretDocument::parse(&text).map_err(|source| StoreError::NotHostkeyctl {
            secret: secret_id.to_owned(),
            selector: selector.clone(),
            source,
        })?;
        Ok(StoredVersion {
            arn: out.arn().unwrap_or_default().to_owned(),
            name: out.name().unwrap_or_default().to_owned(),
            version_id: out.version_id().unwrap_or_default().to_owned(),
            stages: out.version_stages().to_vec(),
            document,
        })
    }

    /// The secret's metadata and staged versions (no values).
    pub async fn describe(&self, secret_id: &str) -> Result<SecretInfo, StoreError> {
        let call = Call::new("secretsmanager:DescribeSecret", format!("secret {secret_id}"));
        let out = self
            .client
            .describe_secret()
            .secret_id(secret_id)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        let call = Call::new("secretsmanager:ListSecretVersionIds", format!("secret {secret_id}"));
        let mut versions = Vec::new();
        let mut pages = self
            .client
            .list_secret_version_ids()
            .secret_id(secret_id)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::from_sdk(e, &call))?;
            for v in page.versions() {
                if v.version_stages().is_empty() {
                    continue;
                }
                versions.push((
                    v.created_date().copied(),
                    VersionInfo {
                        version_id: v.version_id().unwrap_or_default().to_owned(),
                        stages: v.version_stages().to_vec(),
                        created: time_string(v.created_date()),
                    },
                ));
            }
        }
        versions.sort_by_key(|v| std::cmp::Reverse(v.0));
        Ok(SecretInfo {
            arn: out.arn().unwrap_or_default().to_owned(),
            name: out.name().unwrap_or_default().to_owned(),
            description: out.description().map(str::to_owned),
            kms_key_id: out.kms_key_id().map(str::to_owned),
            tags: out
                .tags()
                .iter()
                .map(|t| {
                    (
                        t.key().unwrap_or_default().to_owned(),
                        t.value().unwrap_or_default().to_owned(),
                    )
                })
                .collect(),
            versions: versions.into_iter().map(|(_, v)| v).collect(),
        })
    }

    /// Stores `document` as a new version labelled AWSPENDING, with
    /// `token` as its version id. Retrying with the same token and the same
    /// document is a no-op; the same token with another document is refused.
    pub async fn put_pending(
        &self,
        secret_id: &str,
        document: &SecretDocument,
        token: &str,
    ) -> Result<String, StoreError> {
        // Secrets Manager refuses a reused token with other content; the
        // emulator overwrites silently. Check first so both behave alike.
        match self.get(secret_id, &VersionSelector::VersionId(token.to_owned())).await {
            Ok(existing) if existing.document.keys == document.keys => return Ok(existing.version_id),
            Ok(_) => {
                return Err(StoreError::TokenConflict {
                    secret: secret_id.to_owned(),
                    version_id: token.to_owned(),
                });
            }
            Err(StoreError::Aws(AwsError::NotFound { .. })) => {}
            Err(other) => return Err(other),
        }
        let json = document.to_json().map_err(|source| StoreError::NotHostkeyctl {
            secret: secret_id.to_owned(),
            selector: VersionSelector::VersionId(token.to_owned()),
            source,
        })?;
        let call = Call::new("secretsmanager:PutSecretValue", format!("secret {secret_id}"));
        let out = self
            .client
            .put_secret_value()
            .secret_id(secret_id)
            .client_request_token(token)
            .secret_string(json.as_str())
            .version_stages(STAGE_PENDING)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(out.version_id().unwrap_or(token).to_owned())
    }

    /// Moves `stage` to `to_version` (from `from_version`, which Secrets
    /// Manager requires when the stage is attached elsewhere).
    pub async fn move_stage(
        &self,
        secret_id: &str,
        stage: &str,
        to_version: Option<&str>,
        from_version: Option<&str>,
    ) -> Result<(), StoreError> {
        let call = Call::new("secretsmanager:UpdateSecretVersionStage", format!("secret {secret_id}"));
        self.client
            .update_secret_version_stage()
            .secret_id(secret_id)
            .version_stage(stage)
            .set_move_to_version_id(to_version.map(str::to_owned))
            .set_remove_from_version_id(from_version.map(str::to_owned))
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }

    /// Records the fingerprints of the set at `version_id` in the tags.
    pub async fn tag_fingerprints(&self, secret_id: &str, version_id: &str, keys: &KeySet) -> Result<(), StoreError> {
        let call = Call::new("secretsmanager:TagResource", format!("secret {secret_id}"));
        self.client
            .tag_resource()
            .secret_id(secret_id)
            .set_tags(Some(to_tags(&fingerprint_tags(version_id, keys))))
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::new_token;

    #[test]
    fn tokens_are_uuid_shaped_and_distinct() {
        let a = new_token();
        assert_eq!(a.len(), 36, "{a}");
        assert_eq!(a.matches('-').count(), 4);
        assert_eq!(&a[14..15], "4");
        assert_ne!(a, new_token());
    }
}
