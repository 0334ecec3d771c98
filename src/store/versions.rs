//! The store's seam ([`SecretStore`]) and what it answers: the secret's
//! versions, their stages and their documents.

use std::future::Future;

use zeroize::Zeroizing;

use crate::aws_error::AwsError;
use crate::document::{CaDocument, CaError, DocumentError, SecretDocument};
use crate::fingerprint::{Fingerprint, FingerprintError};
use crate::ids::{IdError, SecretId, StageLabel, VersionId};
use crate::keyset::{KeyAlgorithm, KeySet};

/// The stage nodes must serve.
pub const STAGE_CURRENT: &str = "AWSCURRENT";
/// A rotation in flight.
pub const STAGE_PENDING: &str = "AWSPENDING";
/// The last good set.
pub const STAGE_PREVIOUS: &str = "AWSPREVIOUS";
/// The set announced for the next scheduled rotation (docs/rotation.md,
/// "Scheduled rotation"): nodes serve it as extra host keys between
/// rotations, so clients learn it a whole interval before it is promoted.
pub const STAGE_NEXT: &str = "HOSTKEYCTL_NEXT";
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
    Stage(StageLabel),
    /// This exact version id.
    VersionId(VersionId),
}

/// A staging label hostkeyctl names in its own code.
pub fn stage(label: &'static str) -> StageLabel {
    // The constants above are valid labels; a test holds it.
    StageLabel::parse(label).unwrap_or_else(|_| unreachable!("{label} is a valid staging label"))
}

impl VersionSelector {
    /// From `--version-id` / `--stage` options: the version id wins, and
    /// neither means AWSCURRENT.
    pub fn from_options(version_id: Option<&VersionId>, stage_label: Option<&StageLabel>) -> Self {
        match (version_id, stage_label) {
            (Some(v), _) => VersionSelector::VersionId(v.clone()),
            (None, Some(s)) => VersionSelector::Stage(s.clone()),
            (None, None) => VersionSelector::Stage(stage(STAGE_CURRENT)),
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
    pub arn: SecretId,
    /// The secret's name.
    pub name: String,
    /// The version id.
    pub version_id: VersionId,
    /// Its staging labels.
    pub stages: Vec<String>,
    /// The key set.
    pub document: SecretDocument,
}

/// The fingerprints in the tags, by key type, with the version they are of.
pub type TaggedFingerprints = (VersionId, Vec<(KeyAlgorithm, Fingerprint)>);

/// A version's metadata.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VersionInfo {
    /// The version id.
    pub version_id: VersionId,
    /// Its staging labels (as AWS returns them; compared, never passed on).
    pub stages: Vec<String>,
    /// When Secrets Manager created it (RFC 3339), if known.
    pub created: Option<String>,
}

/// The secret's metadata (no values).
#[derive(Clone, Debug, serde::Serialize)]
pub struct SecretInfo {
    /// ARN.
    pub arn: SecretId,
    /// Name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// The KMS key, when not the AWS managed key.
    pub kms_key_id: Option<String>,
    /// Tags.
    pub tags: Vec<(String, String)>,
    /// Versions that carry at least one stage (newest first when read with
    /// [`SecretStore::describe_versions`]).
    pub versions: Vec<VersionInfo>,
    /// Secrets Manager's rotation schedule (`DescribeSecret`).
    pub rotation: RotationSchedule,
}

/// A secret's rotation schedule as `DescribeSecret` answers it: what
/// Security Hub's `SecretsManager.1` (`RotationEnabled`) and
/// `SecretsManager.4` (`LastRotatedDate`) read.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RotationSchedule {
    /// Rotation is on.
    pub enabled: bool,
    /// The rotation function.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lambda_arn: Option<String>,
    /// `rate(...)` or `cron(...)`, or every N days.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The last rotation (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_rotated: Option<String>,
    /// The next one Secrets Manager plans (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_rotation: Option<String>,
}

impl SecretInfo {
    /// The version carrying `stage`.
    pub fn version_with_stage(&self, label: &str) -> Option<&VersionInfo> {
        self.versions.iter().find(|v| v.stages.iter().any(|s| s == label))
    }

    /// The fingerprints recorded in the tags, with the version they are of.
    /// Tags can be written by anyone with `secretsmanager:TagResource`, so
    /// each value is parsed strictly; one that does not parse is an error
    /// naming the tag, never a value passed on.
    pub fn tagged_fingerprints(&self) -> Result<Option<TaggedFingerprints>, TagError> {
        let Some((_, version)) = self.tags.iter().find(|(k, _)| k == TAG_VERSION) else {
            return Ok(None);
        };
        let version = VersionId::parse(version).map_err(|source| TagError::Version {
            secret: self.arn.to_string(),
            source,
        })?;
        let mut fps = Vec::new();
        for (key, value) in &self.tags {
            let Some(key_type) = key.strip_prefix(TAG_FP_PREFIX) else {
                continue;
            };
            let Some(algorithm) = KeyAlgorithm::from_key_type(key_type) else {
                continue;
            };
            let fp = Fingerprint::parse(value).map_err(|source| TagError::Fingerprint {
                secret: self.arn.to_string(),
                tag: crate::escape::escape(key),
                source,
            })?;
            fps.push((algorithm, fp));
        }
        Ok(Some((version, fps)))
    }
}

/// A hostkeyctl tag on the secret holds something that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum TagError {
    /// `hostkeyctl:version` is not a version id.
    #[error(
        "tag {TAG_VERSION} on {secret} is not a version id ({source}); it was changed outside hostkeyctl: restore it with `hostkeyctl rotate --resume` or remove the hostkeyctl:* tags, and find out who can tag the secret"
    )]
    Version {
        /// The secret.
        secret: String,
        /// Why.
        source: IdError,
    },
    /// A `hostkeyctl:fp:*` tag is not a fingerprint.
    #[error(
        "tag {tag} on {secret} is not a fingerprint ({source}); it was changed outside hostkeyctl: nothing was sent to any node. Audit with --stage AWSCURRENT (reads the value) and find out who can tag the secret"
    )]
    Fingerprint {
        /// The secret.
        secret: String,
        /// The tag key, escaped.
        tag: String,
        /// Why.
        source: FingerprintError,
    },
}

/// What `create` needs.
#[derive(Debug)]
pub struct CreateRequest<'a> {
    /// Secret name.
    pub name: &'a SecretId,
    /// The key set.
    pub document: &'a SecretDocument,
    /// Description.
    pub description: &'a str,
    /// Extra tags.
    pub tags: &'a [(String, String)],
    /// Customer managed KMS key, if any.
    pub kms_key_id: Option<&'a str>,
}

/// What `create_ca` needs.
#[derive(Debug)]
pub struct CaCreateRequest<'a> {
    /// The CA secret's name.
    pub name: &'a SecretId,
    /// The CA.
    pub ca: &'a CaDocument,
    /// Description.
    pub description: &'a str,
    /// Extra tags.
    pub tags: &'a [(String, String)],
    /// Customer managed KMS key, if any.
    pub kms_key_id: Option<&'a str>,
}

/// The tag holding a CA's public fingerprint (read by auditors, who need no
/// access to the value).
pub const TAG_CA_FINGERPRINT: &str = "hostkeyctl:ca-fingerprint";

/// The tags a CA secret gets: its format and public fingerprint, then the
/// caller's.
pub fn ca_tags(req: &CaCreateRequest<'_>) -> Vec<(String, String)> {
    let mut all = vec![
        (TAG_FORMAT.to_owned(), req.ca.format().to_owned()),
        (TAG_CA_FINGERPRINT.to_owned(), req.ca.key.fingerprint().to_string()),
    ];
    all.extend(req.tags.iter().cloned());
    all
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
        secret: SecretId,
        /// Which version was read.
        selector: VersionSelector,
        /// Why.
        source: Box<DocumentError>,
    },
    /// The secret has a binary value.
    #[error("secret {secret} ({selector}) holds SecretBinary, not a hostkeyctl JSON document; check the secret id")]
    Binary {
        /// The secret id.
        secret: SecretId,
        /// Which version was read.
        selector: VersionSelector,
    },
    /// AWS answered with metadata that does not parse.
    #[error("Secrets Manager returned {what} for {secret} that hostkeyctl cannot use: {source}")]
    BadMetadata {
        /// The secret.
        secret: String,
        /// Which field.
        what: &'static str,
        /// Why.
        source: IdError,
    },
    /// A hostkeyctl tag does not parse.
    #[error(transparent)]
    Tag(#[from] TagError),
    /// UpdateSecretVersionStage was refused because the label is not where
    /// the move said: another version holds it and was not named as
    /// `from`, or `from` does not hold it. `holder` is where it is (none:
    /// on no version). A caller that moved from a version it read (compare
    /// and swap) learns that someone moved the label meanwhile.
    #[error(
        "staging label {label} of {secret} is {} (not where this move expected it); someone moved it meanwhile",
        holder.as_ref().map_or_else(|| "on no version".to_owned(), |h| format!("on version {h}"))
    )]
    LabelHeld {
        /// The secret.
        secret: String,
        /// The label.
        label: StageLabel,
        /// The version that holds it.
        holder: Option<VersionId>,
    },
    /// A CA secret that holds no usable CA (never contains key material).
    #[error("{secret}: {source}")]
    NotCa {
        /// The secret id.
        secret: SecretId,
        /// Why.
        source: Box<CaError>,
    },
    /// A version id was reused for different content.
    #[error(
        "version {version_id} of {secret} already exists with different content; a ClientRequestToken must not be reused for another key set"
    )]
    TokenConflict {
        /// The secret.
        secret: String,
        /// The version id.
        version_id: VersionId,
    },
}

/// The secret store: Secrets Manager, or an in-memory double with the same
/// rules (feature `testing`). Every value it returns is parsed into types.
pub trait SecretStore: Sync {
    /// Unix seconds now, on the clock the store's versions are dated by
    /// (the in-memory double has its own, which tests move).
    fn clock(&self) -> i64 {
        time::OffsetDateTime::now_utc().unix_timestamp()
    }

    /// Creates the secret with `document` as its first (AWSCURRENT) version
    /// and the given tags. Returns the ARN and version id.
    fn create(&self, req: &CreateRequest<'_>)
    -> impl Future<Output = Result<(SecretId, VersionId), StoreError>> + Send;

    /// Reads and validates one version.
    fn get(
        &self,
        secret: &SecretId,
        selector: &VersionSelector,
    ) -> impl Future<Output = Result<StoredVersion, StoreError>> + Send;

    /// The secret's metadata and staged versions: no values, and no
    /// creation dates (`DescribeSecret` alone, all the auditor role and the
    /// signer are granted).
    fn describe(&self, secret: &SecretId) -> impl Future<Output = Result<SecretInfo, StoreError>> + Send;

    /// [`SecretStore::describe`] with each staged version's creation date,
    /// newest first (adds `ListSecretVersionIds`), for what shows ages:
    /// `status` and a rotation in flight. The default has no dates to add
    /// and returns `describe`'s answer; the stores override it.
    fn describe_versions(&self, secret: &SecretId) -> impl Future<Output = Result<SecretInfo, StoreError>> + Send {
        self.describe(secret)
    }

    /// Every version the secret keeps, deprecated ones (no stage) included,
    /// newest first: ListSecretVersionIds with IncludeDeprecated. What a
    /// rotation retired is there, for revocation ([`crate::revocation`]).
    fn all_versions(&self, secret: &SecretId) -> impl Future<Output = Result<Vec<VersionInfo>, StoreError>> + Send;

    /// Stores `document` as a new version with id `token` carrying `stages`
    /// (PutSecretValue: the labels move to it from other versions). The
    /// same token with the same document is a no-op; with another document
    /// it is refused ([`StoreError::TokenConflict`]).
    fn put_version(
        &self,
        secret: &SecretId,
        document: &SecretDocument,
        token: &VersionId,
        stages: &[StageLabel],
    ) -> impl Future<Output = Result<VersionId, StoreError>> + Send;

    /// UpdateSecretVersionStage: attaches `label` to `to` and/or removes it
    /// from `from`. As in Secrets Manager, moving a label that another
    /// version holds needs that version as `from` ([`StoreError::LabelHeld`]
    /// otherwise, as when `from` does not hold it), and moving AWSCURRENT
    /// puts AWSPREVIOUS on the version that held it.
    fn move_stage(
        &self,
        secret: &SecretId,
        label: &StageLabel,
        to: Option<&VersionId>,
        from: Option<&VersionId>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Adds or overwrites tags.
    fn tag(&self, secret: &SecretId, tags: &[(String, String)]) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Creates a CA secret (never overwrites) holding `req.ca`, tagged with
    /// its format and public fingerprint ([`ca_tags`]). Returns its ARN.
    fn create_ca(&self, req: &CaCreateRequest<'_>) -> impl Future<Output = Result<SecretId, StoreError>> + Send;

    /// Reads and checks a CA (AWSCURRENT): [`StoreError::NotCa`] when the
    /// secret holds something else.
    fn get_ca(&self, name: &SecretId) -> impl Future<Output = Result<CaDocument, StoreError>> + Send;
}

/// Whether two sets hold the same public keys.
pub fn same_keys(a: &KeySet, b: &KeySet) -> bool {
    let fps = |k: &KeySet| k.keys().map(|k| k.fingerprint().to_string()).collect::<Vec<_>>();
    fps(a) == fps(b)
}

/// A schedule to set on a secret (`RotateSecret`'s configuration).
#[derive(Clone, Copy, Debug)]
pub struct ScheduleSettings<'a> {
    /// The rotation function's ARN (none: keep the one set).
    pub function: Option<&'a str>,
    /// `rate(...)`, `cron(...)` or a number of days.
    pub every: &'a str,
    /// The window each rotation may take (`Duration`).
    pub window: Option<&'a str>,
}

/// Secrets Manager's rotation schedule on a secret: Secrets Manager, or a
/// double (feature `testing`).
pub trait Schedules: Sync {
    /// RotateSecret: sets the schedule (`settings`), and rotates at once
    /// (`now`) or only checks the configuration (testSecret alone).
    fn rotate_secret(
        &self,
        secret: &SecretId,
        settings: Option<ScheduleSettings<'_>>,
        now: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// CancelRotateSecret: turns the schedule off.
    fn cancel_rotation(&self, secret: &SecretId) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// Records the fingerprints of the set at `version_id` in the secret's tags.
pub async fn tag_fingerprints(
    store: &impl SecretStore,
    secret: &SecretId,
    version_id: &VersionId,
    keys: &KeySet,
) -> Result<(), StoreError> {
    store.tag(secret, &fingerprint_tags(version_id, keys)).await
}

/// Builds a [`StoredVersion`] from what the store returned, parsing every
/// value; shared by the adapters so they validate alike.
pub fn stored_version(
    secret: &SecretId,
    selector: &VersionSelector,
    arn: Option<&str>,
    name: Option<&str>,
    version_id: Option<&str>,
    stages: Vec<String>,
    text: Option<Zeroizing<String>>,
) -> Result<StoredVersion, StoreError> {
    let Some(text) = text else {
        return Err(StoreError::Binary {
            secret: secret.clone(),
            selector: selector.clone(),
        });
    };
    let document = SecretDocument::parse(&text).map_err(|source| StoreError::NotHostkeyctl {
        secret: secret.clone(),
        selector: selector.clone(),
        source: Box::new(source),
    })?;
    Ok(StoredVersion {
        arn: parse_meta(secret, "an ARN", arn, SecretId::parse)?,
        name: name.unwrap_or_default().to_owned(),
        version_id: parse_meta(secret, "a version id", version_id, VersionId::parse)?,
        stages,
        document,
    })
}

/// Parses one metadata field AWS returned.
pub fn parse_meta<T>(
    secret: &SecretId,
    what: &'static str,
    value: Option<&str>,
    parse: fn(&str) -> Result<T, IdError>,
) -> Result<T, StoreError> {
    parse(value.unwrap_or_default()).map_err(|source| StoreError::BadMetadata {
        secret: secret.to_string(),
        what,
        source,
    })
}

/// The fingerprint tags for a set at a version.
pub fn fingerprint_tags(version_id: &VersionId, keys: &KeySet) -> Vec<(String, String)> {
    let mut tags = vec![(TAG_VERSION.to_owned(), version_id.to_string())];
    tags.extend(keys.keys().map(|k| {
        (
            format!("{TAG_FP_PREFIX}{}", k.algorithm().key_type()),
            k.fingerprint().to_string(),
        )
    }));
    tags
}

impl crate::exit::ExitStatus for StoreError {
    /// AWS trouble is AWS's status; bad data and refusals are 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            StoreError::Aws(a) => a.status(),
            _ => crate::exit::Status::Usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{STAGE_CURRENT, STAGE_NEXT, STAGE_PENDING, STAGE_PREVIOUS, stage};

    #[test]
    fn own_stage_names_are_valid_labels() {
        for label in [STAGE_CURRENT, STAGE_PENDING, STAGE_PREVIOUS, STAGE_NEXT] {
            assert_eq!(stage(label).as_str(), label);
        }
    }
}
