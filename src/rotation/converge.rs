//! The end of every rotation path: bring the nodes to the desired state
//! the stages now say (push unless a pull fleet, then audit by handshake,
//! waiting for a pull fleet's timers), and abort as a stage move followed
//! by that convergence.

use std::time::Duration;

use super::{Outcome, Report, Request, Rotation, RotationError};
use crate::audit::{Finding, Verdict};
use crate::dispatch::Dispatcher;
use crate::ids::VersionId;
use crate::keyset::KeySet;
use crate::scan::Prober;
use crate::store::{STAGE_PENDING, SecretStore, StoredVersion, stage};

impl<S: SecretStore, D: Dispatcher, P: Prober> Rotation<'_, S, D, P> {
    /// Drops the rotation in flight: AWSPENDING comes off (the desired
    /// state is AWSCURRENT alone again), then the nodes converge to it.
    pub async fn abort(
        &self,
        current_set: &StoredVersion,
        pending: &VersionId,
        request: Request,
        report: &mut Report,
    ) -> Result<Outcome, RotationError> {
        self.store
            .move_stage(self.secret, &stage(STAGE_PENDING), None, Some(pending))
            .await?;
        report.pending_version = None;
        report.steps.push(format!(
            "abort: AWSPENDING removed from {pending}; the nodes drop its keys and keep serving {}",
            current_set.version_id
        ));
        match self.converge(current_set, request, report).await? {
            Outcome::Completed => Ok(Outcome::Aborted),
            Outcome::PushFailed => Ok(Outcome::AbortPushFailed),
            other => Ok(other),
        }
    }

    /// Brings every node to the desired state `current` alone: pushes it
    /// (unless a pull fleet) and audits by handshake, for a pull fleet
    /// until its wait runs out.
    pub(super) async fn converge(
        &self,
        current: &StoredVersion,
        request: Request,
        report: &mut Report,
    ) -> Result<Outcome, RotationError> {
        if request.pull.is_none() {
            (self.say)(&format!(
                "converge: installing {} on {} node(s)",
                current.version_id,
                self.instances.len()
            ));
            // With the set announced for the schedule, if there is one: the
            // desired state, as the nodes' timers compute it.
            let next = crate::store::announced_next(self.store, self.secret, &current.version_id).await?;
            let pushed = self.set(current, next.as_ref()).await?;
            let ok = pushed.all_ok();
            report.push = Some(pushed);
            if !ok {
                report.steps.push(
                    "converge: some nodes failed to install; the stages are right, so their timers (or `hostkeyctl push`) finish"
                        .to_owned(),
                );
                return Ok(Outcome::PushFailed);
            }
        }
        let wait = request.pull.unwrap_or_default();
        (self.say)(&format!(
            "verify: auditing {} node(s) against {}",
            self.instances.len(),
            current.version_id
        ));
        match self.test_until(&current.document.keys, wait).await {
            None => {
                report.steps.push(format!(
                    "verify: every node serves {} and nothing else",
                    current.version_id
                ));
                Ok(Outcome::Completed)
            }
            Some(findings) => {
                let behind = findings
                    .iter()
                    .filter(|(_, f)| f.iter().any(|f| f.status != Verdict::Ok))
                    .count();
                // Still converging only when every node lagging was reached
                // and serves keys of the set's types (its timer has not
                // installed the promotion yet). A node not reached, or
                // missing a type, may never get there: not converged. An
                // abort's return to the current set is not a promotion.
                let reached = findings
                    .iter()
                    .flat_map(|(_, f)| f)
                    .all(|f| matches!(f.status, Verdict::Ok | Verdict::Mismatch));
                report.audit = findings;
                if request.pull.is_some() && request.phase == super::Phase::Finish && reached {
                    report.steps.push(format!(
                        "verify: {behind} of {} node(s) did not serve {} yet when the wait ended (listed below): their timers install it within their period (the shipped timer's: 15 min and up to 5 more); `hostkeyctl audit` shows when every node does",
                        report.audit.len(),
                        current.version_id
                    ));
                    return Ok(Outcome::Converging);
                }
                report.steps.push(format!(
                    "verify: {behind} of {} node(s) do not serve {} yet (listed below)",
                    report.audit.len(),
                    current.version_id
                ));
                Ok(Outcome::NotConverged)
            }
        }
    }

    /// [`Rotation::test`], again every few seconds until `wait` has passed.
    async fn test_until(&self, keys: &KeySet, wait: Duration) -> Option<Vec<(String, Vec<Finding>)>> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            let findings = self.test(keys).await?;
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Some(findings);
            }
            tokio::time::sleep(left.min(Duration::from_secs(5))).await;
        }
    }
}
