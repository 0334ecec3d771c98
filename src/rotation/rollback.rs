//! `rotate --rollback`: the previous set (AWSPREVIOUS) back, through the
//! same overlap as any rotation. The first run announces a copy of it (a
//! new version, so its announcement is dated now, signed like the current
//! set when that carries certificates); a run after the minimum overlap
//! promotes it, once every node serves it, as any promotion
//! ([`super::gate`]); the fingerprint tags follow. With `--min-overlap 0`
//! one run does both: every client that did not learn the keys again sees
//! a warning.

use super::{Outcome, Report, Request, Rotation, RotationError, Stages};
use crate::dispatch::Dispatcher;
use crate::scan::Prober;
use crate::store::{SecretStore, StoredVersion, VersionSelector, same_keys};

impl<S: SecretStore, D: Dispatcher, P: Prober> Rotation<'_, S, D, P> {
    /// Runs `rotate --rollback` (module documentation).
    pub(super) async fn rollback(
        &self,
        stages: &Stages,
        current_set: &StoredVersion,
        request: Request,
        report: &mut Report,
    ) -> Result<Outcome, RotationError> {
        let Some(previous) = &stages.previous else {
            return Err(RotationError::Refused(
                "no AWSPREVIOUS version: there is no earlier set to roll back to. Nothing was changed".to_owned(),
            ));
        };
        let previous_set = self
            .store
            .get(self.secret, &VersionSelector::VersionId(previous.clone()))
            .await?;
        if same_keys(&previous_set.document.keys, &current_set.document.keys) {
            return Err(RotationError::Refused(format!(
                "AWSPREVIOUS (version {previous}) holds the current keys (a renewal or a copy), so there is no other set to roll back to. Nothing was changed"
            )));
        }
        self.revocation_allows(previous, &previous_set, request, report).await?;
        let pending = match &stages.pending {
            Some((id, _)) => {
                let pending = self
                    .store
                    .get(self.secret, &VersionSelector::VersionId(id.clone()))
                    .await?;
                if !same_keys(&pending.document.keys, &previous_set.document.keys) {
                    return Err(RotationError::Refused(format!(
                        "a rotation to other keys is in flight (version {id} is AWSPENDING): promote it with `hostkeyctl rotate --finish` or drop it with `hostkeyctl rotate --abort`, then roll back. Nothing was changed"
                    )));
                }
                (self.say)(&format!(
                    "rollback: version {id} (the keys of AWSPREVIOUS {previous}) is announced; promoting it"
                ));
                pending
            }
            None => {
                // Nodes serve one extra set: during the rollback's overlap
                // it is the previous set, so a set announced for the
                // schedule is not served and is no announcement any more.
                if let Some(next) = self.announced(&stages.current).await?
                    && !same_keys(&next.document.keys, &previous_set.document.keys)
                {
                    self.store
                        .move_stage(self.secret, &super::next_label(), None, Some(&next.version_id))
                        .await?;
                    report.steps.push(format!(
                        "rollback: the set announced for the schedule (version {}) is withdrawn; the next scheduled rotation announces anew",
                        next.version_id
                    ));
                }
                let id = self
                    .create_from(&stages.current, &current_set.document, &previous_set.document)
                    .await?;
                report.pending_version = Some(id.clone());
                report.steps.push(format!(
                    "rollback: the keys of AWSPREVIOUS (version {previous}) are announced again as version {id} (AWSPENDING)"
                ));
                let pending = self
                    .store
                    .get(self.secret, &VersionSelector::VersionId(id.clone()))
                    .await?;
                let announced = if request.pull.is_some() {
                    Outcome::Announced
                } else {
                    match self.overlap(current_set, &pending, report).await? {
                        Outcome::OverlapStarted => Outcome::OverlapStarted,
                        stopped => return Ok(stopped),
                    }
                };
                let min = self.min_overlap().await?;
                if !min.is_zero() {
                    report.steps.push(format!(
                        "rollback: OpenSSH clients with UpdateHostKeys learn the previous keys again when they log in; run `hostkeyctl rotate --rollback` again after {} to promote them (clients that did not log in meanwhile see a host key warning then)",
                        super::gate::human(min)
                    ));
                    return Ok(announced);
                }
                pending
            }
        };
        report.pending_version = Some(pending.version_id.clone());
        let request = Request {
            phase: super::Phase::Finish,
            ..request
        };
        self.promote(current_set, &pending, request, report).await
    }

    /// Refuses a rollback to keys that a revocation hostkeyctl produced
    /// names ([`crate::revocation::TAG_REVOKED`]): clients that trust the
    /// CA with it would refuse every node. `--force` goes on, saying which
    /// clients refuse and which revocation to hand out instead.
    async fn revocation_allows(
        &self,
        previous: &crate::ids::VersionId,
        previous_set: &StoredVersion,
        request: Request,
        report: &mut Report,
    ) -> Result<(), RotationError> {
        let info = self.store.describe(self.secret).await?;
        let keys: Vec<crate::fingerprint::Fingerprint> = previous_set
            .document
            .keys
            .keys()
            .map(|k| k.fingerprint().clone())
            .collect();
        let revoked = crate::revocation::revoked_before(&info.tags, &keys);
        if revoked.is_empty() {
            return Ok(());
        }
        let named: Vec<String> = revoked.iter().map(ToString::to_string).collect();
        let message = format!(
            "the keys of AWSPREVIOUS (version {previous}) are revoked by the last KRL or @revoked lines hostkeyctl produced ({}): every client that trusts the CA with that revocation (RevokedHostKeys, @revoked lines) refuses every node that serves them. Roll forward instead (`hostkeyctl rotate`), or roll back with --force and then hand out a revocation produced after it (`hostkeyctl known-hosts --secret-id {} --krl FILE`, or `--revoked`), which no longer names them",
            named.join(", "),
            self.secret
        );
        if request.phase != (super::Phase::Rollback { force: true }) {
            return Err(RotationError::Refused(format!("{message}. Nothing was changed")));
        }
        (self.say)(&format!("rollback --force: {message}"));
        report.steps.push(format!("rollback --force: {message}"));
        Ok(())
    }
}
