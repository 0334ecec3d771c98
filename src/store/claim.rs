//! A new version made to hold a stage, in one safe shape: stored under a
//! claim label of its own (a version stored without labels would take
//! AWSCURRENT at once), the stage moved to it (refused by Secrets Manager
//! when another version holds the label and is not `from`, which makes the
//! move a compare and swap), then the claim taken off whatever happened.
//! A rotation claims AWSPENDING this way; `sign` makes its version
//! AWSCURRENT this way.

use super::{SecretStore, StoreError};
use crate::document::SecretDocument;
use crate::ids::{IdError, SecretId, StageLabel, VersionId};

/// The prefix of a claim label.
pub const CLAIM_PREFIX: &str = "hostkeyctl-claim-";

/// The label a new version carries until it holds its stage.
pub fn claim_label(token: &VersionId) -> Result<StageLabel, IdError> {
    let short: String = token
        .as_str()
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(12)
        .collect();
    StageLabel::parse(&format!("{CLAIM_PREFIX}{short}"))
}

/// Why [`store_and_move`] did not end with the stage on the new version.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// The version was not stored: the secret is as it was.
    #[error(transparent)]
    Put(StoreError),
    /// The version was stored but the stage did not move to it: the
    /// stages are as they were, and `claim_left` says whether the claim
    /// label could not be taken off the new version either.
    #[error("{source}")]
    Move {
        /// Why the move failed ([`StoreError::LabelHeld`]: someone holds
        /// the label, or moved it from `from` meanwhile).
        source: StoreError,
        /// The version stored.
        version: VersionId,
        /// Its claim label.
        claim: StageLabel,
        /// Whether the claim label is still on it.
        claim_left: bool,
    },
}

impl ClaimError {
    /// What the secret holds after this failure, for the person reading it.
    pub fn state(&self, secret: &SecretId) -> String {
        match self {
            ClaimError::Put(_) => "nothing was stored".to_owned(),
            ClaimError::Move { claim_left: false, .. } => "the secret's stages are as they were".to_owned(),
            ClaimError::Move { version, claim, .. } => format!(
                "the stages are as they were; version {version} still carries the label {claim}, as removing it failed too: it is no stage the nodes read, and the next `hostkeyctl rotate` or `aws secretsmanager update-secret-version-stage --secret-id {secret} --version-stage {claim} --remove-from-version-id {version}` removes it"
            ),
        }
    }
}

/// A version that holds its stage.
#[derive(Debug)]
pub struct Moved {
    /// The version.
    pub version: VersionId,
    /// Its claim label, when taking it off failed (and why): harmless (no
    /// stage the nodes read; the next rotate removes it), but a caller that
    /// treats every failed call as an interruption can.
    pub claim_left: Option<(StageLabel, StoreError)>,
}

/// Stores `document` as version `token` under a claim label, moves `label`
/// to it from `from` (or from nobody), and takes the claim off.
pub async fn store_and_move(
    store: &impl SecretStore,
    secret: &SecretId,
    document: &SecretDocument,
    token: &VersionId,
    label: &StageLabel,
    from: Option<&VersionId>,
) -> Result<Moved, ClaimError> {
    let claim = claim_label(token).map_err(|source| {
        ClaimError::Put(StoreError::BadMetadata {
            secret: secret.to_string(),
            what: "a claim label",
            source,
        })
    })?;
    let version = store
        .put_version(secret, document, token, std::slice::from_ref(&claim))
        .await
        .map_err(ClaimError::Put)?;
    let moved = store.move_stage(secret, label, Some(&version), from).await;
    let left = match store.move_stage(secret, &claim, None, Some(&version)).await {
        // Already gone (another run's clean-up) is gone.
        Ok(()) | Err(StoreError::LabelHeld { .. }) => None,
        Err(e) => Some(e),
    };
    match moved {
        Ok(()) => Ok(Moved {
            version,
            claim_left: left.map(|e| (claim, e)),
        }),
        Err(source) => Err(ClaimError::Move {
            source,
            version,
            claim,
            claim_left: left.is_some(),
        }),
    }
}
