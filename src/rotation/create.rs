//! Step create: a new set like the current one (signed like it, when it
//! carries certificates), claimed as AWSPENDING atomically.

use super::{Rotation, RotationError};
use crate::dispatch::Dispatcher;
use crate::document::SecretDocument;
use crate::ids::VersionId;
use crate::keyset::{DEFAULT_RSA_BITS, KeyAlgorithm, KeySet};
use crate::scan::Prober;
use crate::store::claim::{ClaimError, Moved, store_and_move};
use crate::store::{
    STAGE_CURRENT, STAGE_NEXT, STAGE_PENDING, SecretStore, StoreError, StoredVersion, VersionSelector, same_keys, stage,
};

/// What a run without a phase flag does ([`Rotation::check_immediate`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Immediate {
    /// Create and promote in this run (`--min-overlap 0`, or the
    /// announced set has been offered long enough).
    Rotate,
    /// Announce the new set, as `--overlap` does: clients are given this
    /// long before a `--finish` may promote it.
    AnnounceInstead(std::time::Duration),
}

impl<S: SecretStore, D: Dispatcher, P: Prober> Rotation<'_, S, D, P> {
    /// Step create: a new set like the current one, stored as AWSPENDING.
    ///
    /// Claiming AWSPENDING is atomic, so two admins rotating at once cannot
    /// both proceed: the set is stored under a claim label of its own, then
    /// AWSPENDING is moved to it *without* `RemoveFromVersionId`, which
    /// Secrets Manager refuses while another version holds the label. The
    /// loser takes its claim back and is refused, naming the winner.
    pub async fn create(
        &self,
        planned_from: &VersionId,
        current_doc: &SecretDocument,
    ) -> Result<VersionId, RotationError> {
        // A set announced for the schedule (HOSTKEYCTL_NEXT) is the one
        // clients have been learning: a manual rotation promotes it too.
        let announced = self.announced(planned_from).await?;
        let token = VersionId::random();
        let document = self.new_document(
            planned_from,
            current_doc,
            announced.as_ref().map(|a| &a.document),
            &token,
        )?;
        self.claim_pending(planned_from, &document, &token).await
    }

    /// Step create with the keys of `source` (a rollback's previous set),
    /// signed like the current set.
    pub(super) async fn create_from(
        &self,
        planned_from: &VersionId,
        current_doc: &SecretDocument,
        source: &SecretDocument,
    ) -> Result<VersionId, RotationError> {
        let token = VersionId::random();
        let mut document = self.new_document(planned_from, current_doc, Some(source), &token)?;
        // Announced now: its old `created` is when it was first made.
        document.created = super::gate::rfc3339(self.gate.now);
        self.claim_pending(planned_from, &document, &token).await
    }

    /// Before a run without a phase flag, which would create a set and
    /// promote it at once: refused when the set announced already (a
    /// scheduled one) has not been announced for the minimum overlap;
    /// otherwise at once only when the minimum overlap is zero, and else
    /// announced (`--overlap`): clients are given the overlap by default.
    pub(super) async fn check_immediate(&self, current: &StoredVersion) -> Result<Immediate, RotationError> {
        if let Some(announced) = self.announced(&current.version_id).await? {
            self.announced_long_enough(announced.version_id.as_ref(), &announced.document.keys)
                .await?;
            return Ok(Immediate::Rotate);
        }
        let min = self.min_overlap().await?;
        if min.is_zero() {
            return Ok(Immediate::Rotate);
        }
        Ok(Immediate::AnnounceInstead(min))
    }

    /// Stores `document` as version `token` and claims AWSPENDING for it
    /// (see [`Rotation::create`]). A version `token` stored by an earlier
    /// try (a scheduled step retried under its token) is claimed as it is.
    pub(super) async fn claim_pending(
        &self,
        planned_from: &VersionId,
        document: &SecretDocument,
        token: &VersionId,
    ) -> Result<VersionId, RotationError> {
        // Moved from nobody: refused while another version holds it.
        let claimed = store_and_move(self.store, self.secret, document, token, &stage(STAGE_PENDING), None).await;
        let id = match claimed {
            // Every failed call interrupts a rotation, so that a crash test
            // at each call sees it; the next run removes the claim.
            Ok(Moved {
                claim_left: Some((_, e)),
                ..
            }) => return Err(e.into()),
            Ok(Moved { version, .. }) => version,
            Err(ClaimError::Put(StoreError::TokenConflict { .. })) => {
                // Stored by an earlier try whose claim may be gone: the
                // version is there, claim AWSPENDING for it as it is.
                self.store
                    .move_stage(self.secret, &stage(STAGE_PENDING), Some(token), None)
                    .await?;
                if let Ok(claim) = crate::store::claim::claim_label(token) {
                    match self.store.move_stage(self.secret, &claim, None, Some(token)).await {
                        Ok(()) | Err(StoreError::LabelHeld { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                token.clone()
            }
            Err(ClaimError::Put(e)) => return Err(e.into()),
            Err(ClaimError::Move {
                source: StoreError::LabelHeld { holder, .. },
                claim_left: false,
                ..
            }) => {
                let winner = holder.map_or_else(|| "another version".to_owned(), |v| format!("version {v}"));
                return Err(RotationError::Refused(format!(
                    "another rotation claimed AWSPENDING first ({winner}); this run stored nothing that is staged. Follow that rotation with `hostkeyctl status`, or drop it with --abort"
                )));
            }
            Err(e) => {
                let state = e.state(self.secret);
                let ClaimError::Move { source, .. } = e else {
                    unreachable!("Put is handled above")
                };
                return Err(RotationError::Interrupted {
                    cause: Box::new(source),
                    state: format!("nothing was staged: {state}"),
                });
            }
        };
        // The plan was made from the stages read before the claim. If another
        // rotation finished in between, AWSCURRENT moved: give AWSPENDING
        // back rather than push a set planned against stale stages.
        let info = self.store.describe(self.secret).await?;
        let now = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
        if now.as_ref() != Some(planned_from) {
            self.store
                .move_stage(self.secret, &stage(STAGE_PENDING), None, Some(&id))
                .await?;
            return Err(RotationError::Refused(format!(
                "another rotation finished while this one started: AWSCURRENT is now {}; nothing was pushed, run again if another rotation is still wanted",
                now.map_or_else(|| "unset".to_owned(), |v| v.to_string())
            )));
        }
        Ok(id)
    }

    /// The set announced for the next scheduled rotation (HOSTKEYCTL_NEXT),
    /// when it holds other keys than `current`.
    pub(super) async fn announced(&self, current: &VersionId) -> Result<Option<StoredVersion>, RotationError> {
        let next = match self
            .store
            .get(self.secret, &VersionSelector::Stage(stage(STAGE_NEXT)))
            .await
        {
            Ok(v) => v,
            Err(StoreError::Aws(crate::aws_error::AwsError::NotFound { .. })) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if next.version_id == *current {
            return Ok(None);
        }
        let current = self
            .store
            .get(self.secret, &VersionSelector::VersionId(current.clone()))
            .await?;
        Ok((!same_keys(&current.document.keys, &next.document.keys)).then_some(next))
    }

    /// The document of a new version `token` ([`new_document`]), with this
    /// rotation's CA and clock.
    pub(super) fn new_document(
        &self,
        planned_from: &VersionId,
        current_doc: &SecretDocument,
        source: Option<&SecretDocument>,
        token: &VersionId,
    ) -> Result<SecretDocument, RotationError> {
        new_document(self.ca, self.gate.now, planned_from, current_doc, source, token)
    }
}

/// The document of a new version `token`: the keys of `source` (an
/// announced set, whose `created`, the announcement's date, it keeps)
/// or a new set of the current set's algorithms and RSA size (made at
/// the gate's now: the announcement starts), signed like the current set
/// when it carries certificates.
pub(super) fn new_document(
    ca: Option<&crate::certificate::CaKey>,
    now: i64,
    planned_from: &VersionId,
    current_doc: &SecretDocument,
    source: Option<&SecretDocument>,
    token: &VersionId,
) -> Result<SecretDocument, RotationError> {
    let current = &current_doc.keys;
    let signer = signer_like(ca, planned_from, current_doc)?;
    let mut document = match source {
        Some(source) => SecretDocument {
            created: source.created.clone(),
            keys: source.keys.clone(),
            certificates: std::collections::BTreeMap::new(),
            retiring: None,
        },
        None => {
            let rsa_bits = current
                .get(KeyAlgorithm::Rsa)
                .and_then(|k| k.rsa_bits())
                .unwrap_or(DEFAULT_RSA_BITS);
            let mut fresh = SecretDocument::new(KeySet::generate(&current.algorithms(), rsa_bits)?);
            fresh.created = super::gate::rfc3339(now);
            fresh
        }
    };
    if let Some(signer) = &signer {
        document.certificates = signer
            .sign(&document.keys, token)
            .map_err(|e| RotationError::Refused(format!("{e}; nothing was stored")))?;
    }
    Ok(document)
}

/// The signer of the new set: certificates like the current set's (same
/// names and validity length, the next serial). A signed set without
/// the CA is refused before anything is stored: a new set without
/// certificates would lock out clients that trust only the CA.
fn signer_like(
    ca: Option<&crate::certificate::CaKey>,
    current_id: &VersionId,
    current: &SecretDocument,
) -> Result<Option<crate::certificate::Signer>, RotationError> {
    let certificates = &current.certificates;
    match ca {
        None if certificates.is_empty() => Ok(None),
        None => Err(RotationError::Refused(format!(
            "the current set (version {current_id}) carries host certificates, and a new set without them would lock out clients that trust only the CA; pass --ca-secret-id to sign the new set. Nothing was stored"
        ))),
        Some(ca) => {
            crate::certificate::Signer::like(ca.clone(), certificates, crate::certificate::default_signer())
                .map(Some)
                .ok_or_else(|| {
                    RotationError::Refused(format!(
                        "the current set (version {current_id}) has no certificates to take the principals and validity from; sign it first with `hostkeyctl sign`. Nothing was stored"
                    ))
                })
        }
    }
}
