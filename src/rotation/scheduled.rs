//! Scheduled rotation: Secrets Manager's rotation schedule calls one
//! Lambda once per step (`createSecret`, `setSecret`, `testSecret`,
//! `finishSecret`) with the new version's id as `ClientRequestToken`
//! (docs/rotation.md, "Scheduled rotation").
//!
//! A host key needs days of overlap before it is promoted, and the steps
//! run for minutes. So each rotation promotes the set announced one
//! interval earlier (HOSTKEYCTL_NEXT, which every node serves as extra
//! host keys) and announces the next one:
//!
//! - create: the announced keys are stored as version `token`, claimed as
//!   AWSPENDING (a new set on the first rotation, with nothing announced);
//! - set: a push fleet installs the desired state (AWSCURRENT plus the
//!   announced keys, which the nodes serve already); a pull fleet's timers
//!   follow the stages, so nothing is sent;
//! - test: the new version is a key set like the current one; on a push
//!   fleet every node still serves AWSCURRENT and nothing else;
//! - finish: AWSCURRENT moves to `token` as `rotate` finishes, a new set is
//!   announced, and a push fleet converges to the new desired state.
//!
//! The announced keys are AWSPENDING's while the steps run, so nodes serve
//! AWSCURRENT plus one set at every moment. Each step is idempotent under
//! its token. A set or test step that fails takes AWSPENDING back off
//! (the announcement stays): Secrets Manager refuses every later rotation
//! while AWSPENDING is on a version that is not AWSCURRENT, and the next
//! scheduled rotation must complete. These are the same steps `rotate`
//! runs (create, set, test, finish): a manual rotation promotes an
//! announced set too and, on a secret with a schedule, announces the next.

use serde::Serialize;

use super::{Rotation, RotationError, Stages};
use crate::dispatch::Dispatcher;
use crate::ids::{StageLabel, VersionId};
use crate::scan::Prober;
use crate::store::{
    STAGE_CURRENT, STAGE_NEXT, STAGE_PENDING, SecretStore, StoreError, StoredVersion, VersionSelector, same_keys, stage,
};

/// A step of Secrets Manager's rotation protocol, as the event names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LambdaStep {
    /// Store the new version as AWSPENDING.
    CreateSecret,
    /// Install it where it is used.
    SetSecret,
    /// Check it works.
    TestSecret,
    /// Make it AWSCURRENT.
    FinishSecret,
}

impl LambdaStep {
    /// The step an event names: `createSecret` (what Secrets Manager
    /// sends) or `create_secret` (how its guide spells it).
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "createSecret" | "create_secret" => Some(LambdaStep::CreateSecret),
            "setSecret" | "set_secret" => Some(LambdaStep::SetSecret),
            "testSecret" | "test_secret" => Some(LambdaStep::TestSecret),
            "finishSecret" | "finish_secret" => Some(LambdaStep::FinishSecret),
            _ => None,
        }
    }
}

impl std::fmt::Display for LambdaStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LambdaStep::CreateSecret => "createSecret",
            LambdaStep::SetSecret => "setSecret",
            LambdaStep::TestSecret => "testSecret",
            LambdaStep::FinishSecret => "finishSecret",
        })
    }
}

/// Whether the rotation function pushes (SSM reaches the nodes) or leaves
/// the nodes' timers to follow the stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FleetMode {
    /// setSecret pushes, testSecret audits, finishSecret converges.
    Push,
    /// The nodes' timers follow the stages; the steps only move them.
    Pull,
}

/// The version id of the set announced by the rotation to `token`: derived
/// from it, so that a retried finish stores it once.
pub fn announce_token(token: &VersionId) -> VersionId {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("hostkeyctl-next:{token}").as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
    VersionId::parse(&uuid.hyphenated().to_string())
        .unwrap_or_else(|_| unreachable!("a hyphenated UUID is a version id"))
}

impl<S: SecretStore, D: Dispatcher, P: Prober> Rotation<'_, S, D, P> {
    /// Runs one step of a scheduled rotation to version `token`; what it
    /// did, for the function's log. Idempotent: a step run again under the
    /// same token (a retry after a crash anywhere) ends in the same stages.
    pub async fn scheduled_step(
        &self,
        step: LambdaStep,
        token: &VersionId,
        mode: FleetMode,
    ) -> Result<String, RotationError> {
        let mut notes = Vec::new();
        let (stages, current_set, _) = self.stages(&mut notes).await?;
        if stages.current == *token {
            if step != LambdaStep::FinishSecret {
                return Ok(format!("{step}: version {token} is AWSCURRENT already; nothing to do"));
            }
            // A finish that moved AWSCURRENT and stopped: the stages' repair
            // above took AWSPENDING off and the tags over; announce.
            let announced = self.announce_after(&current_set).await?;
            return self.finish_converge(&current_set, mode, announced).await;
        }
        let pending = match (&stages.pending, step) {
            (Some((id, _)), _) if id == token => Some(id.clone()),
            (Some((id, _)), LambdaStep::CreateSecret) => {
                return Err(RotationError::Refused(format!(
                    "createSecret: version {id} is AWSPENDING (another rotation is in flight), not {token}; finish it with `hostkeyctl rotate --resume` or drop it with `hostkeyctl rotate --abort`, and the next scheduled rotation proceeds"
                )));
            }
            (None, LambdaStep::CreateSecret) => None,
            (None, LambdaStep::TestSecret)
                if !self
                    .store
                    .all_versions(self.secret)
                    .await?
                    .iter()
                    .any(|v| v.version_id == *token) =>
            {
                // RotateSecret with RotateImmediately false: Secrets Manager
                // runs testSecret alone to check the configuration.
                return Ok(format!(
                    "testSecret: no version {token}: a check of the configuration (no rotation runs); the function reads the secret, AWSCURRENT is {}",
                    stages.current
                ));
            }
            (_, _) => {
                return Err(RotationError::Refused(format!(
                    "{step}: version {token} is not AWSPENDING; its createSecret did not run or its rotation was given up (AWSCURRENT stays {}). The next scheduled rotation starts over",
                    stages.current
                )));
            }
        };
        match step {
            LambdaStep::CreateSecret => {
                if pending.is_some() {
                    return Ok(format!("createSecret: version {token} is AWSPENDING already"));
                }
                let announced = self.announced(&stages.current).await?;
                if announced.is_none() && self.interrupted_announcement(&current_set).await? {
                    // The last finish moved AWSCURRENT and stopped before it
                    // announced: promoting a set nobody learned would warn
                    // every client. Announce now; the next rotation
                    // promotes it.
                    let next = self.announce_after(&current_set).await?;
                    return Err(RotationError::Refused(format!(
                        "createSecret: the last rotation's finishSecret stopped before it announced a set, so nothing clients learned is there to promote; version {next} is announced now and the next scheduled rotation promotes it. Nothing was staged"
                    )));
                }
                let from = if announced.is_some() {
                    "the announced set"
                } else {
                    "a new set (none was announced)"
                };
                let document = self.new_document(&stages.current, &current_set.document, announced.as_ref(), token)?;
                self.claim_pending(&stages.current, &document, token).await?;
                Ok(format!("createSecret: version {token} is AWSPENDING, holding {from}"))
            }
            LambdaStep::SetSecret | LambdaStep::TestSecret => {
                let result = self.offer_scheduled(step, &stages, &current_set, token, mode).await;
                match result {
                    Ok(done) => Ok(done),
                    Err(e) => Err(self.give_up(step, token, &stages, e).await),
                }
            }
            LambdaStep::FinishSecret => {
                let pending = self
                    .store
                    .get(self.secret, &VersionSelector::VersionId(token.clone()))
                    .await?;
                if let Err(e) = self.finish(&stages.current, &pending).await {
                    return Err(self.give_up(step, token, &stages, e).await);
                }
                let announced = self.announce_after(&pending).await?;
                self.finish_converge(&pending, mode, announced).await
            }
        }
    }

    /// setSecret and testSecret.
    async fn offer_scheduled(
        &self,
        step: LambdaStep,
        stages: &Stages,
        current_set: &StoredVersion,
        token: &VersionId,
        mode: FleetMode,
    ) -> Result<String, RotationError> {
        let pending = self
            .store
            .get(self.secret, &VersionSelector::VersionId(token.clone()))
            .await?;
        if step == LambdaStep::TestSecret {
            let (want, have) = (
                current_set.document.keys.algorithms(),
                pending.document.keys.algorithms(),
            );
            if want != have {
                return Err(RotationError::Refused(format!(
                    "testSecret: version {token} holds {have:?}, the current set {want:?}"
                )));
            }
        }
        if mode == FleetMode::Pull {
            return Ok(format!(
                "{step}: a pull fleet; the nodes' timers serve {} and the announced keys",
                stages.current
            ));
        }
        if step == LambdaStep::SetSecret {
            let pushed = self.set(current_set, Some(&pending)).await?;
            if !pushed.all_ok() {
                let failed: Vec<String> = pushed
                    .results
                    .iter()
                    .filter(|r| !r.ok)
                    .map(|r| r.instance_id.clone())
                    .collect();
                return Err(RotationError::Refused(format!(
                    "setSecret: {} of {} node(s) did not install {token} beside {} ({})",
                    failed.len(),
                    pushed.results.len(),
                    stages.current,
                    failed.join(", ")
                )));
            }
            return Ok(format!(
                "setSecret: {} node(s) serve {} and load {token} as extra keys",
                pushed.results.len(),
                stages.current
            ));
        }
        if let Some(findings) = self.test(&current_set.document.keys).await {
            let bad: Vec<&str> = findings
                .iter()
                .filter(|(_, f)| f.iter().any(|f| f.status != crate::audit::Verdict::Ok))
                .map(|(n, _)| n.as_str())
                .collect();
            return Err(RotationError::Refused(format!(
                "testSecret: {} node(s) do not serve AWSCURRENT {} alone ({})",
                bad.len(),
                stages.current,
                bad.join(", ")
            )));
        }
        Ok(format!(
            "testSecret: every node serves {} and nothing else",
            stages.current
        ))
    }

    /// Whether a set was announced once (HOSTKEYCTL_NEXT is on a version)
    /// but holds the current keys: a finish that moved AWSCURRENT to it and
    /// stopped before announcing the next.
    async fn interrupted_announcement(&self, current: &StoredVersion) -> Result<bool, RotationError> {
        let info = self.store.describe(self.secret).await?;
        let Some(holder) = info.version_with_stage(STAGE_NEXT) else {
            return Ok(false);
        };
        if holder.version_id == current.version_id {
            return Ok(true);
        }
        let next = self
            .store
            .get(self.secret, &VersionSelector::VersionId(holder.version_id.clone()))
            .await?;
        Ok(same_keys(&next.document.keys, &current.document.keys))
    }

    /// A failed set, test or finish step takes AWSPENDING off `token` (the
    /// announcement stays on its own version), so that the next scheduled
    /// rotation is not refused. AWSCURRENT moves only in finish, and only
    /// as its first write: when that failed, it never moved.
    async fn give_up(&self, step: LambdaStep, token: &VersionId, stages: &Stages, e: RotationError) -> RotationError {
        let undone = self
            .store
            .move_stage(self.secret, &stage(STAGE_PENDING), None, Some(token))
            .await;
        let moved = match self.store.describe(self.secret).await {
            Ok(info) => info
                .version_with_stage(STAGE_CURRENT)
                .is_some_and(|v| v.version_id == *token),
            Err(_) => false,
        };
        let state = match undone {
            Ok(()) | Err(StoreError::LabelHeld { .. }) if moved => format!(
                "AWSCURRENT is {token} already and AWSPENDING is off it; the next rotation announces a set and the one after promotes it"
            ),
            Ok(()) | Err(StoreError::LabelHeld { .. }) => format!(
                "AWSPENDING was taken off {token}; AWSCURRENT stays {}, the announced set stays announced, and the next scheduled rotation starts over",
                stages.current
            ),
            Err(undo) => format!(
                "taking AWSPENDING off {token} failed too ({undo}); AWSCURRENT stays {}. Until `hostkeyctl rotate --abort` takes it off, Secrets Manager refuses the next rotation",
                stages.current
            ),
        };
        RotationError::Refused(format!("{step} failed: {e}\n  {state}"))
    }

    /// finishSecret's end: a push fleet installs the new desired state.
    async fn finish_converge(
        &self,
        current: &StoredVersion,
        mode: FleetMode,
        announced: VersionId,
    ) -> Result<String, RotationError> {
        let id = &current.version_id;
        let done = format!("finishSecret: AWSCURRENT is {id}; version {announced} is announced (HOSTKEYCTL_NEXT)");
        if mode == FleetMode::Pull {
            return Ok(format!("{done}; the nodes' timers follow"));
        }
        let desired = crate::store::desired_state(self.store, self.secret).await?;
        let pushed = self.set(&desired.current, desired.next.as_ref()).await?;
        if !pushed.all_ok() {
            let failed = pushed.results.iter().filter(|r| !r.ok).count();
            return Err(RotationError::Refused(format!(
                "{done}, but {failed} of {} node(s) did not install it; the stages are complete, a retried finishSecret, `hostkeyctl push` or the next rotation's setSecret brings them",
                pushed.results.len()
            )));
        }
        Ok(format!("{done}; {} node(s) serve it", pushed.results.len()))
    }

    /// After `promoted` became AWSCURRENT: a new set announced as
    /// HOSTKEYCTL_NEXT (version [`announce_token`] of `promoted`), unless
    /// one with other keys than AWSCURRENT's is announced already. Returns
    /// the announced version.
    pub async fn announce_after(&self, promoted: &StoredVersion) -> Result<VersionId, RotationError> {
        let info = self.store.describe(self.secret).await?;
        let token = announce_token(&promoted.version_id);
        let holder = info.version_with_stage(STAGE_NEXT).map(|v| v.version_id.clone());
        if let Some(holder) = &holder {
            if *holder == token {
                return Ok(token);
            }
            let next = self
                .store
                .get(self.secret, &VersionSelector::VersionId(holder.clone()))
                .await?;
            if *holder != promoted.version_id && !same_keys(&next.document.keys, &promoted.document.keys) {
                return Ok(holder.clone());
            }
        }
        let current = info
            .version_with_stage(STAGE_CURRENT)
            .map(|v| v.version_id.clone())
            .unwrap_or_else(|| promoted.version_id.clone());
        let document = self.new_document(&current, &promoted.document, None, &token)?;
        match self
            .store
            .put_version(self.secret, &document, &token, &[next_label()])
            .await
        {
            Ok(_) => {}
            // Stored by an earlier try, the label moved off it since.
            Err(StoreError::TokenConflict { .. }) => {
                self.store
                    .move_stage(self.secret, &next_label(), Some(&token), holder.as_ref())
                    .await?;
            }
            Err(e) => return Err(e.into()),
        }
        Ok(token)
    }
}

/// HOSTKEYCTL_NEXT as a label.
pub fn next_label() -> StageLabel {
    stage(STAGE_NEXT)
}

#[cfg(test)]
mod tests {
    use super::{LambdaStep, announce_token};
    use crate::ids::VersionId;

    #[test]
    fn steps_parse_as_secrets_manager_and_its_guide_spell_them() {
        for (a, b, step) in [
            ("createSecret", "create_secret", LambdaStep::CreateSecret),
            ("setSecret", "set_secret", LambdaStep::SetSecret),
            ("testSecret", "test_secret", LambdaStep::TestSecret),
            ("finishSecret", "finish_secret", LambdaStep::FinishSecret),
        ] {
            assert_eq!(LambdaStep::parse(a), Some(step));
            assert_eq!(LambdaStep::parse(b), Some(step));
            assert_eq!(step.to_string(), a);
        }
        assert_eq!(LambdaStep::parse("CreateSecret"), None);
        assert_eq!(LambdaStep::parse(""), None);
    }

    #[test]
    fn the_announced_version_is_derived_from_the_token() {
        let t = VersionId::random();
        assert_eq!(announce_token(&t), announce_token(&t));
        assert_ne!(announce_token(&t), t);
        assert_ne!(announce_token(&t), announce_token(&VersionId::random()));
    }
}
