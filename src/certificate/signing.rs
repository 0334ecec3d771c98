//! `sign` as a flow over the store: host certificates on the current keys,
//! stored as a new version of the key set and made AWSCURRENT by a compare
//! and swap from the version read ([`crate::store::claim`]), so a rotation
//! finishing meanwhile is never undone. The keys stay, so no client sees a
//! change; nodes converge to the new version (push or their timers), which
//! writes the certificates and reloads sshd.

use std::collections::BTreeMap;

use ssh_key::Certificate;

use super::{Principal, Signer, ca_fingerprint, default_signer, next_serial};
use crate::document::{KeySetPrefix, SecretDocument};
use crate::ids::{SecretId, VersionId};
use crate::keyset::{HostKey, KeyAlgorithm};
use crate::store::claim::{ClaimError, Moved, store_and_move};
use crate::store::{STAGE_CURRENT, STAGE_PENDING, SecretStore, StoreError, VersionSelector, stage, tag_fingerprints};

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
    /// A rotation's set is announced: `rotate` signs it.
    #[error(
        "a rotation is in flight (AWSPENDING is version {0}); finish it (`hostkeyctl rotate --resume --ca-secret-id ...` signs its set) or abort it, then sign"
    )]
    InFlight(VersionId),
    /// The certificates could not be made (nothing was stored).
    #[error("{0}; nothing was stored")]
    Sign(String),
    /// AWSCURRENT moved between the read and the swap.
    #[error(
        "AWSCURRENT of {secret} moved while signing (a rotation finished?); nothing was made current and {state}. Run sign again"
    )]
    Moved {
        /// The secret.
        secret: SecretId,
        /// What the secret holds.
        state: String,
    },
    /// Signed and current, but the tags naming the current version were
    /// not updated (the keys, so the fingerprints, are the same).
    #[error(
        "version {version} is AWSCURRENT with the new certificates, but tagging it failed: {source}. The keys are unchanged; audits read the value until the next `hostkeyctl sign` or `rotate` rewrites the tags"
    )]
    Untagged {
        /// Why.
        source: StoreError,
        /// The signed version.
        version: VersionId,
    },
    /// A write failed part-way.
    #[error("sign made nothing current, and {state}: {source}")]
    Interrupted {
        /// Why.
        source: StoreError,
        /// What the secret holds.
        state: String,
    },
}

/// Whether `--renew-before` finds nothing to do: every key certified by
/// this CA, for exactly these names, with more than `days` left.
pub fn fresh_enough(current: &SecretDocument, ca: &HostKey, principals: &[Principal], days: u64, now: u64) -> bool {
    let mut wanted: Vec<&str> = principals.iter().map(Principal::as_str).collect();
    wanted.sort_unstable();
    wanted.dedup();
    current.keys.keys().all(|k| {
        current.certificates.get(&k.algorithm()).is_some_and(|c| {
            let mut listed: Vec<&str> = c.valid_principals().iter().map(String::as_str).collect();
            listed.sort_unstable();
            ca_fingerprint(c) == *ca.fingerprint()
                && listed == wanted
                && c.valid_before().saturating_sub(now) > days.saturating_mul(86_400)
        })
    })
}

/// Signs the current set (see the module documentation).
pub async fn sign_key_set(store: &impl SecretStore, req: &SigningRequest<'_>) -> Result<Signed, SigningError> {
    req.key_set_prefix
        .check_ca(req.ca_secret)
        .map_err(SigningError::CaPlacement)?;
    let ca = store.get_ca(req.ca_secret).await?;
    let info = store.describe(req.secret).await?;
    let current_id = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
    if let Some(pending) = info.version_with_stage(STAGE_PENDING)
        && Some(&pending.version_id) != current_id.as_ref()
    {
        return Err(SigningError::InFlight(pending.version_id.clone()));
    }
    let current = store
        .get(req.secret, &VersionSelector::Stage(stage(STAGE_CURRENT)))
        .await?;
    if let Some(days) = req.renew_before_days
        && fresh_enough(&current.document, &ca.key, req.principals, days, req.now)
    {
        return Ok(Signed {
            signed: false,
            version_id: current.version_id,
            certificates: current.document.certificates,
        });
    }
    let signer = Signer {
        ca: ca.key,
        principals: req.principals.to_vec(),
        validity: req.validity,
        serial: req
            .serial
            .unwrap_or_else(|| next_serial(&current.document.certificates)),
        signer: default_signer(),
    };
    let token = VersionId::random();
    let mut document = current.document.clone();
    document.certificates = signer
        .sign(&document.keys, &token)
        .map_err(|e| SigningError::Sign(e.to_string()))?;
    let id = match store_and_move(
        store,
        req.secret,
        &document,
        &token,
        &stage(STAGE_CURRENT),
        Some(&current.version_id),
    )
    .await
    {
        Ok(Moved { version, claim_left }) => {
            if let Some((claim, e)) = claim_left {
                tracing::warn!(
                    "version {version} is AWSCURRENT but still carries the label {claim} ({e}); it is no stage the nodes read, and the next rotate removes it"
                );
            }
            version
        }
        Err(ClaimError::Put(e)) => return Err(e.into()),
        Err(e) => {
            let state = e.state(req.secret);
            let ClaimError::Move { source, .. } = e else {
                unreachable!("Put is handled above")
            };
            return Err(match source {
                StoreError::LabelHeld { .. } => SigningError::Moved {
                    secret: req.secret.clone(),
                    state,
                },
                source => SigningError::Interrupted { source, state },
            });
        }
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
    })
}
