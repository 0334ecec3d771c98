//! Step create: a new set like the current one (signed like it, when it
//! carries certificates), claimed as AWSPENDING atomically.

use super::{Rotation, RotationError};
use crate::dispatch::Dispatcher;
use crate::document::SecretDocument;
use crate::ids::VersionId;
use crate::keyset::{DEFAULT_RSA_BITS, KeyAlgorithm, KeySet};
use crate::scan::Prober;
use crate::store::claim::{ClaimError, Moved, store_and_move};
use crate::store::{STAGE_CURRENT, STAGE_PENDING, SecretStore, StoreError, stage};

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
        let current = &current_doc.keys;
        let signer = self.signer_like(planned_from, current_doc)?;
        let rsa_bits = current
            .get(KeyAlgorithm::Rsa)
            .and_then(|k| k.rsa_bits())
            .unwrap_or(DEFAULT_RSA_BITS);
        let keys = KeySet::generate(&current.algorithms(), rsa_bits)?;
        let token = VersionId::random();
        let mut document = SecretDocument::new(keys);
        if let Some(signer) = &signer {
            document.certificates = signer
                .sign(&document.keys, &token)
                .map_err(|e| RotationError::Refused(format!("{e}; nothing was stored")))?;
        }
        // Moved from nobody: refused while another version holds it.
        let claimed = store_and_move(self.store, self.secret, &document, &token, &stage(STAGE_PENDING), None).await;
        let id = match claimed {
            // Every failed call interrupts a rotation, so that a crash test
            // at each call sees it; the next run removes the claim.
            Ok(Moved {
                claim_left: Some((_, e)),
                ..
            }) => return Err(e.into()),
            Ok(Moved { version, .. }) => version,
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
                    source: Box::new(source),
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

    /// The signer of the new set: certificates like the current set's (same
    /// names and validity length, the next serial). A signed set without
    /// the CA is refused before anything is stored: a new set without
    /// certificates would lock out clients that trust only the CA.
    fn signer_like(
        &self,
        current_id: &VersionId,
        current: &SecretDocument,
    ) -> Result<Option<crate::certificate::Signer>, RotationError> {
        let certificates = &current.certificates;
        match self.ca {
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
}
