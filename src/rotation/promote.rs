//! The steps after create: set and test (offer the new set beside the
//! current one), finish through the gate, converge; and the overlap's
//! first phase, which stops after test.

use super::{Outcome, Report, Request, Rotation, RotationError, Step, audit_failed};
use crate::dispatch::Dispatcher;
use crate::scan::Prober;
use crate::store::{SecretStore, StoredVersion};

impl<S: SecretStore, D: Dispatcher, P: Prober> Rotation<'_, S, D, P> {
    /// Runs a rotation as `request` asks and reports it whole: the steps,
    /// what clients' users fetch now, and the retired keys to revoke.
    pub async fn rotate(&self, request: Request) -> Result<Report, RotationError> {
        let mut report = Report::new(self.secret.clone());
        let outcome = self.run(request, &mut report).await?;
        report.result = Some(outcome);
        report.clients = super::text::client_advice(outcome, self.secret);
        report.user_notice = super::text::user_notice(outcome, self.secret);
        match self.revocation(outcome).await {
            Ok(advice) => report.revocation = advice,
            Err(e) => report.steps.push(format!(
                "revocation: the retired keys could not be listed ({e}); `hostkeyctl known-hosts --revoked` lists them"
            )),
        }
        Ok(report)
    }

    /// set and test (unless a pull fleet, whose timers did that), finish,
    /// and converge to `pending` as the new AWSCURRENT.
    pub(super) async fn promote(
        &self,
        current_set: &StoredVersion,
        pending: &StoredVersion,
        request: Request,
        report: &mut Report,
    ) -> Result<Outcome, RotationError> {
        let current = &current_set.version_id;
        let id = &pending.version_id;
        if request.pull.is_none()
            && let Some(stopped) = self.offer(current_set, pending, request, report).await?
        {
            return Ok(stopped);
        }
        self.finish(current, pending).await?;
        report
            .steps
            .push(format!("finish: AWSCURRENT is {id}, AWSPREVIOUS is {current}"));
        // On a scheduled secret (or one that had a set announced), the next
        // set is announced now, as the schedule's finishSecret does.
        let info = self.store.describe(self.secret).await?;
        if info.rotation.enabled || info.version_with_stage(crate::store::STAGE_NEXT).is_some() {
            let fleet = if request.pull.is_some() {
                super::FleetMode::Pull
            } else {
                super::FleetMode::Push
            };
            let next = self.announce_after(pending, fleet).await?;
            report.steps.push(format!(
                "announce: version {next} is HOSTKEYCTL_NEXT, for the next scheduled rotation"
            ));
        }
        report.previous_version = Some(current.clone());
        report.current_version = id.clone();
        report.pending_version = None;
        match self.converge(pending, request, report).await? {
            Outcome::Completed => Ok(Outcome::Rotated),
            Outcome::PushFailed => Ok(Outcome::NotConverged),
            other => Ok(other),
        }
    }

    /// Steps set and test: every node installs the desired state (the
    /// current set, the new one as extra keys), proving it loads the new
    /// set, and still serves the current set and nothing else. `Some` when
    /// a node failed or `--stop-after` stopped here.
    pub(super) async fn offer(
        &self,
        current_set: &StoredVersion,
        pending: &StoredVersion,
        request: Request,
        report: &mut Report,
    ) -> Result<Option<Outcome>, RotationError> {
        let current = &current_set.version_id;
        (self.say)(&format!(
            "set: {} node(s) keep serving {current} and load {} as extra keys",
            self.instances.len(),
            pending.version_id
        ));
        let pushed = self.set(current_set, Some(pending)).await?;
        let ok = pushed.all_ok();
        report.push = Some(pushed);
        if !ok {
            report.steps.push(format!(
                "set: some nodes failed; AWSCURRENT stays {current}. Fix them and run --resume, or --abort"
            ));
            return Ok(Some(Outcome::PushFailed));
        }
        report
            .steps
            .push("set: every node installed the new set beside the current one".to_owned());
        if request.stop_after == Some(Step::Set) {
            return Ok(Some(Outcome::StoppedAfterSet));
        }
        (self.say)("test: auditing every node against the current set");
        if let Some(findings) = self.test(&current_set.document.keys).await {
            report.steps.push(format!(
                "test: a node does not serve the current set first; AWSCURRENT stays {current}"
            ));
            return Ok(Some(audit_failed(findings, report)));
        }
        report
            .steps
            .push("test: every node serves the current set and nothing else".to_owned());
        if request.stop_after == Some(Step::Test) {
            return Ok(Some(Outcome::StoppedAfterTest));
        }
        Ok(None)
    }

    /// Phase one of an overlapping rotation: every node keeps serving the
    /// current set and also offers the pending one; nothing is promoted.
    pub(super) async fn overlap(
        &self,
        current_set: &StoredVersion,
        pending: &StoredVersion,
        report: &mut Report,
    ) -> Result<Outcome, RotationError> {
        let request = Request::default();
        if let Some(stopped) = self.offer(current_set, pending, request, report).await? {
            if stopped == Outcome::PushFailed {
                report
                    .steps
                    .push("overlap: fix the failed nodes and run --overlap --resume, or --abort".to_owned());
            }
            return Ok(stopped);
        }
        report.steps.push(format!(
            "overlap: every node serves {} and offers {}; clients with UpdateHostKeys learn the new keys when they log in. Run `rotate --finish` when ready",
            current_set.version_id, pending.version_id
        ));
        Ok(Outcome::OverlapStarted)
    }
}
