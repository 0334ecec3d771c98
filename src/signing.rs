//! `sign` as a flow over the store: host certificates on the current keys,
//! stored as a new version of the key set and made AWSCURRENT by a compare
//! and swap from the version read ([`crate::store::claim`]), so a rotation
//! finishing meanwhile is never undone. The keys stay, so no client sees a
//! change; nodes converge to the new version (push or their timers), which
//! writes the certificates and reloads sshd.
//!
//! While a rotation has announced a set (AWSPENDING: a pull rotation's
//! overlap can last a week, longer than a certificate), `sign` renews that
//! set too, so renewal and rotation coexist (issue 27). The announced set
//! is swapped first, from the version read: a rotation that finishes or
//! aborts before that swap makes it fail, and nothing changed. A finish
//! that lands between the two swaps promoted the set sign had just
//! replaced: sign then completes that promotion with its signed copy
//! (AWSCURRENT to it, AWSPENDING off, AWSPREVIOUS back on the old set), so
//! the rotation's outcome stands and the certificates are the new ones.

use std::collections::BTreeMap;

use ssh_key::Certificate;

use crate::certificate::{Principal, Signer, ca_fingerprint, default_signer, next_serial};
use crate::document::{KeySetPrefix, SecretDocument};
use crate::ids::{SecretId, VersionId};
use crate::keyset::KeyAlgorithm;
use crate::store::claim::{ClaimError, Moved, store_and_move};
use crate::store::{
    STAGE_CURRENT, STAGE_PENDING, STAGE_PREVIOUS, SecretStore, StoreError, VersionSelector, stage, tag_fingerprints,
};

/// What to sign, and how.
#[derive(Debug)]
pub struct SigningRequest<'a> {
    /// The key set secret.
    pub secret: &'a SecretId,
    /// The CA secret.
    pub ca_secret: &'a SecretId,
    /// Every name the certificates are valid for.
    pub principals: &'a [Principal],
    /// Validity from now, in seconds.
    pub validity: u64,
    /// The serial (default: one more than the current certificates').
    pub serial: Option<u64>,
    /// Do nothing while every key has a certificate from this CA for
    /// exactly these names with more than this many days left.
    pub renew_before_days: Option<u64>,
    /// Where the key sets live: a CA under it is refused.
    pub key_set_prefix: &'a KeySetPrefix,
    /// Now (Unix seconds).
    pub now: u64,
}

/// What signing did.
#[derive(Debug)]
pub struct Signed {
    /// New certificates stored (false: fresh enough, nothing stored).
    pub signed: bool,
    /// The AWSCURRENT version now.
    pub version_id: VersionId,
    /// Its certificates.
    pub certificates: BTreeMap<KeyAlgorithm, Certificate>,
    /// The AWSPENDING version now, when a rotation has announced one, and
    /// its certificates (signed with the current set's).
    pub pending: Option<(VersionId, BTreeMap<KeyAlgorithm, Certificate>)>,
    /// What else sign did (a racing finish it completed).
    pub notes: Vec<String>,
}

/// Why signing stopped; each says what the secret holds.
#[derive(Debug, thiserror::Error)]
pub enum SigningError {
    /// The CA is where every login node's role can read it.
    #[error("{0}; nothing was read or signed")]
    CaPlacement(String),
    /// The store failed before anything was written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The certificates could not be made (nothing was stored).
    #[error("{0}; nothing was stored")]
    Sign(String),
    /// KMS refused or failed to sign (nothing was stored): an AWS failure.
    #[error("{0}; nothing was stored")]
    Kms(String),
    /// A stage moved between the read and the swap.
    #[error(
        "{stage} of {secret} moved while signing (a rotation finished or was aborted?); nothing was made current and {state}. Run sign again"
    )]
    Moved {
        /// The secret.
        secret: SecretId,
        /// The stage that moved.
        stage: &'static str,
        /// What the secret holds.
        state: String,
    },
    /// Signed and current, but the tags naming the current version were
    /// not updated (the keys, so the fingerprints, are the same).
    #[error(
        "version {version} is AWSCURRENT with the new certificates, but its tags were not updated (the keys are unchanged; audits read the value until the next `hostkeyctl sign` or `rotate` rewrites the tags)"
    )]
    Untagged {
        /// Why.
        source: StoreError,
        /// The signed version.
        version: VersionId,
    },
    /// A write failed part-way.
    #[error("sign made nothing current, and {state}")]
    Interrupted {
        /// Why.
        source: StoreError,
        /// What the secret holds.
        state: String,
    },
}

/// Whether `--renew-before` finds nothing to do: every key certified by
/// this CA, for exactly these names, with more than `days` left.
pub fn fresh_enough(
    current: &SecretDocument,
    ca: &crate::certificate::CaKey,
    principals: &[Principal],
    days: u64,
    now: u64,
) -> bool {
    let mut wanted: Vec<&str> = principals.iter().map(Principal::as_str).collect();
    wanted.sort_unstable();
    wanted.dedup();
    current.keys.keys().all(|k| {
        current.certificates.get(&k.algorithm()).is_some_and(|c| {
            let mut listed: Vec<&str> = c.valid_principals().iter().map(String::as_str).collect();
            listed.sort_unstable();
            ca_fingerprint(c) == ca.fingerprint()
                && listed == wanted
                && c.valid_before().saturating_sub(now) > days.saturating_mul(86_400)
        })
    })
}

/// A copy of `document` with certificates from `signer`, and its token.
fn signed_copy(
    signer: &Signer,
    document: &SecretDocument,
) -> Result<(VersionId, SecretDocument), crate::certificate::SignError> {
    let token = VersionId::random();
    let mut copy = document.clone();
    copy.certificates = signer.sign(&copy.keys, &token)?;
    Ok((token, copy))
}

/// Nothing is stored when signing fails.
fn not_signed(e: crate::certificate::SignError) -> SigningError {
    match e {
        crate::certificate::SignError::Kms { by_kms: true, .. } => SigningError::Kms(e.to_string()),
        _ => SigningError::Sign(e.to_string()),
    }
}

/// Stores `document` and swaps `label` to it from `from`: the version, or
/// why not (a stage that moved is [`SigningError::Moved`]).
async fn swap(
    store: &impl SecretStore,
    secret: &SecretId,
    document: &SecretDocument,
    token: &VersionId,
    label: &'static str,
    from: &VersionId,
) -> Result<VersionId, SigningError> {
    match store_and_move(store, secret, document, token, &stage(label), Some(from)).await {
        Ok(Moved { version, claim_left }) => {
            if let Some((claim, e)) = claim_left {
                tracing::warn!(
                    "version {version} is {label} but still carries the label {claim} ({e}); it is no stage the nodes read, and the next rotate removes it"
                );
            }
            Ok(version)
        }
        Err(ClaimError::Put(e)) => Err(e.into()),
        Err(e) => {
            let state = e.state(secret);
            let ClaimError::Move { source, .. } = e else {
                unreachable!("Put is handled above")
            };
            Err(match source {
                StoreError::LabelHeld { .. } => SigningError::Moved {
                    secret: secret.clone(),
                    stage: label,
                    state,
                },
                source => SigningError::Interrupted { source, state },
            })
        }
    }
}

/// A finish that promoted `pending` (the version sign replaced) between
/// sign's two swaps: complete it with the signed copy. `None` when
/// AWSCURRENT moved some other way.
async fn complete_finish(
    store: &impl SecretStore,
    secret: &SecretId,
    current: &VersionId,
    pending: &VersionId,
    signed: &(VersionId, SecretDocument),
) -> Result<Option<VersionId>, SigningError> {
    let info = store.describe(secret).await?;
    let (copy, document) = signed;
    let now = info.version_with_stage(STAGE_CURRENT).map(|v| &v.version_id);
    if now == Some(copy) {
        // The finish read the announced set after sign's first swap.
        return Ok(Some(copy.clone()));
    }
    if now != Some(pending) {
        return Ok(None);
    }
    let interrupted = |source| SigningError::Interrupted {
        source,
        state: format!(
            "a rotation promoted version {pending} while sign ran; its signed copy {copy} is AWSPENDING: run `hostkeyctl rotate --pull --finish` to promote it"
        ),
    };
    store
        .move_stage(secret, &stage(STAGE_CURRENT), Some(copy), Some(pending))
        .await
        .map_err(interrupted)?;
    // Done already when the racing finish took it off the old version.
    if info.version_with_stage(STAGE_PENDING).map(|v| &v.version_id) == Some(copy) {
        match store.move_stage(secret, &stage(STAGE_PENDING), None, Some(copy)).await {
            Ok(()) | Err(StoreError::LabelHeld { .. }) => {}
            Err(e) => return Err(interrupted(e)),
        }
    }
    // Moving AWSCURRENT put AWSPREVIOUS on the old pending version; the
    // last good set is the one before the rotation.
    match store
        .move_stage(secret, &stage(STAGE_PREVIOUS), Some(current), Some(pending))
        .await
    {
        Ok(()) | Err(StoreError::LabelHeld { .. }) => {}
        Err(e) => return Err(interrupted(e)),
    }
    tag_fingerprints(store, secret, copy, &document.keys)
        .await
        .map_err(|source| SigningError::Untagged {
            source,
            version: copy.clone(),
        })?;
    Ok(Some(copy.clone()))
}

/// Signs the current set, and the announced one (see the module
/// documentation).
pub async fn sign_key_set(store: &impl SecretStore, req: &SigningRequest<'_>) -> Result<Signed, SigningError> {
    req.key_set_prefix
        .check_ca(req.ca_secret)
        .map_err(SigningError::CaPlacement)?;
    let ca = store.get_ca(req.ca_secret).await?;
    let info = store.describe(req.secret).await?;
    let current_id = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
    let pending_id = info
        .version_with_stage(STAGE_PENDING)
        .map(|v| v.version_id.clone())
        .filter(|p| Some(p) != current_id.as_ref());
    let current = store
        .get(req.secret, &VersionSelector::Stage(stage(STAGE_CURRENT)))
        .await?;
    // An empty AWSPENDING (Secrets Manager's staging before a scheduled
    // rotation's createSecret) has nothing to sign yet.
    let pending = match &pending_id {
        Some(id) => crate::store::value_of(store, req.secret, id).await?,
        None => None,
    };
    if let Some(days) = req.renew_before_days {
        let fresh = |d: &SecretDocument| fresh_enough(d, &ca.key, req.principals, days, req.now);
        if fresh(&current.document) && pending.as_ref().is_none_or(|p| fresh(&p.document)) {
            return Ok(Signed {
                signed: false,
                version_id: current.version_id,
                certificates: current.document.certificates,
                pending: pending.map(|p| (p.version_id, p.document.certificates)),
                notes: Vec::new(),
            });
        }
    }
    let serial = req.serial.unwrap_or_else(|| {
        let pending_next = pending.as_ref().map_or(1, |p| next_serial(&p.document.certificates));
        next_serial(&current.document.certificates).max(pending_next)
    });
    let signer = Signer {
        ca: ca.key,
        principals: req.principals.to_vec(),
        validity: req.validity,
        serial,
        signer: default_signer(),
    };
    // The announced set first: a rotation that finishes or aborts before
    // this swap makes it fail, with nothing changed.
    let mut signed_pending = None;
    if let Some(p) = &pending {
        let (token, document) = signed_copy(&signer, &p.document).map_err(not_signed)?;
        let id = swap(store, req.secret, &document, &token, STAGE_PENDING, &p.version_id).await?;
        signed_pending = Some((id, document));
    }
    let (token, document) = signed_copy(&signer, &current.document).map_err(not_signed)?;
    let id = match swap(store, req.secret, &document, &token, STAGE_CURRENT, &current.version_id).await {
        Ok(id) => id,
        Err(SigningError::Moved { stage, state, .. }) => {
            if let (Some(p), Some(copy)) = (&pending, &signed_pending)
                && let Some(promoted) =
                    complete_finish(store, req.secret, &current.version_id, &p.version_id, copy).await?
            {
                return Ok(Signed {
                    signed: true,
                    version_id: promoted.clone(),
                    certificates: copy.1.certificates.clone(),
                    pending: None,
                    notes: vec![format!(
                        "a rotation promoted the announced set while sign ran; its signed copy {promoted} is AWSCURRENT, and the set before it AWSPREVIOUS"
                    )],
                });
            }
            return Err(SigningError::Moved {
                secret: req.secret.clone(),
                stage,
                state: match &signed_pending {
                    Some((copy, _)) => format!("{state}; the announced set's signed copy {copy} is AWSPENDING"),
                    None => state,
                },
            });
        }
        Err(e) => return Err(e),
    };
    tag_fingerprints(store, req.secret, &id, &document.keys)
        .await
        .map_err(|source| SigningError::Untagged {
            source,
            version: id.clone(),
        })?;
    Ok(Signed {
        signed: true,
        version_id: id,
        certificates: document.certificates,
        pending: signed_pending.map(|(id, d)| (id, d.certificates)),
        notes: Vec::new(),
    })
}

impl crate::exit::ExitStatus for SigningError {
    /// The store's status (with what the secret holds); a refusal 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            SigningError::Store(s)
            | SigningError::Interrupted { source: s, .. }
            | SigningError::Untagged { source: s, .. } => s.status(),
            SigningError::Kms(_) => crate::exit::Status::Aws,
            _ => crate::exit::Status::Usage,
        }
    }
}
