//! Scheduled rotation: Secrets Manager's rotation schedule calls one
//! Lambda once per step (`createSecret`, `setSecret`, `testSecret`,
//! `finishSecret`) with the new version's id as `ClientRequestToken`,
//! after staging that token as AWSPENDING on an empty version itself
//! (docs/rotation.md, "Scheduled rotation").
//!
//! A host key needs days of overlap before it is promoted, and the steps
//! run for minutes. So each rotation promotes the set announced one
//! interval earlier (HOSTKEYCTL_NEXT, which every node serves as extra
//! host keys) and announces the next one:
//!
//! - create: the token's empty version takes the announced keys, once they
//!   have been announced for the minimum overlap; with nothing announced
//!   (a first rotation), a copy of the current set, so no client sees a
//!   change;
//! - set: a push fleet installs the desired state (AWSCURRENT plus the
//!   announced keys, which the nodes serve already); a pull fleet's timers
//!   follow the stages, so nothing is sent;
//! - test: the new version is a key set like the current one; on a push
//!   fleet every node still serves AWSCURRENT and nothing else;
//! - finish: AWSCURRENT moves to `token` through the promotion gate
//!   ([`crate::rotation::gate`]: announced long enough, seen served by every node),
//!   a new set is announced, and a push fleet converges to the new desired
//!   state.
//!
//! The announced keys are AWSPENDING's while the steps run, so nodes serve
//! AWSCURRENT plus one set at every moment. Each step is idempotent under
//! its token. A step that fails takes AWSPENDING back off its version (the
//! announcement stays): Secrets Manager refuses every later rotation while
//! AWSPENDING is on a version that is not AWSCURRENT, and the next
//! scheduled rotation must run. An event whose token is not AWSPENDING, or
//! whose version holds other keys, changes nothing. These are the same
//! steps `rotate` runs (create, set, test, finish): a manual rotation
//! promotes an announced set too and, on a secret with a schedule,
//! announces the next.

use serde::Serialize;

use crate::dispatch::Dispatcher;
use crate::document::Retiring;
use crate::ids::{SecretId, StageLabel, VersionId};
use crate::rotation::{Rotation, RotationError, Stages};
use crate::scan::Prober;
use crate::store::{
    STAGE_CURRENT, STAGE_NEXT, STAGE_PENDING, STAGE_PREVIOUS, SecretStore, StoreError, StoredVersion, VersionSelector,
    same_keys, stage,
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

/// Gives Secrets Manager's staging of `token` back (AWSPENDING off its
/// version) after a step failed before it could say what it left: the
/// function could not start its work (its nodes not found), or ran out of
/// time. Only an empty version, or one holding the current or announced
/// keys, is touched: never a manual rotation's. Whether it was taken off.
pub async fn release_staging(
    store: &impl SecretStore,
    secret: &SecretId,
    token: &VersionId,
) -> Result<bool, StoreError> {
    let info = store.describe(secret).await?;
    let Some(version) = info.versions.iter().find(|v| v.version_id == *token) else {
        return Ok(false);
    };
    let labelled = |l: &str| version.stages.iter().any(|s| s == l);
    if !labelled(STAGE_PENDING) || labelled(STAGE_CURRENT) {
        return Ok(false);
    }
    if let Some(value) = crate::store::value_of(store, secret, token).await? {
        let servable = crate::store::servable(store, secret).await?;
        let keys = &value.document.keys;
        let ours = same_keys(keys, &servable.current.document.keys)
            || servable
                .next
                .as_ref()
                .is_some_and(|n| same_keys(keys, &n.document.keys));
        if !ours {
            return Ok(false);
        }
    }
    match store.move_stage(secret, &stage(STAGE_PENDING), None, Some(token)).await {
        Ok(()) => Ok(true),
        Err(StoreError::LabelHeld { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The function's events are a stranger's requests: anyone with
/// `lambda:InvokeFunction` can send one. An event for another secret than
/// the one the function was configured with (`configured`, an ARN) is
/// refused before any call, naming both.
pub fn check_event_secret(configured: &SecretId, event: &str) -> Result<(), RotationError> {
    if event == configured.as_str() {
        return Ok(());
    }
    Err(RotationError::Refused(format!(
        "this function rotates {configured} alone, and the event names {}: refused before any call. One function per fleet: give the other secret its own function (docs/rotation.md)",
        crate::escape::escape(event)
    )))
}

impl<S: SecretStore, D: Dispatcher, P: Prober> Rotation<'_, S, D, P> {
    /// Runs one step of a scheduled rotation to version `token`; what it
    /// did, for the function's log. Idempotent: a step run again under the
    /// same token (a retry after a crash anywhere) ends in the same stages.
    ///
    /// Secrets Manager stages the token as AWSPENDING on an empty version
    /// before it calls createSecret (docs/rotation.md): a token that is not
    /// AWSPENDING is no rotation Secrets Manager started, and a token whose
    /// version holds keys this rotation would not stage is another's. Both
    /// are refused with nothing changed.
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
            let announced = self.announce_after(&current_set, mode).await?;
            return self.finish_converge(&current_set, mode, announced).await;
        }
        if stages.pending.as_ref().is_none_or(|(id, _)| id != token) {
            return self.not_pending(step, token, &stages).await;
        }
        let value = crate::store::value_of(self.store, self.secret, token).await?;
        let current_keys = &current_set.document.keys;
        let next = match self.store.get(self.secret, &VersionSelector::Stage(next_label())).await {
            Ok(n) => Some(n),
            Err(StoreError::Aws(crate::aws_error::AwsError::NotFound { .. })) => None,
            Err(e) => return Err(e.into()),
        };
        let ours = |v: &StoredVersion| {
            same_keys(&v.document.keys, current_keys)
                || next
                    .as_ref()
                    .is_some_and(|n| same_keys(&v.document.keys, &n.document.keys))
        };
        match (&value, step) {
            (Some(v), _) if !ours(v) => {
                return Err(RotationError::Refused(format!(
                    "{step}: version {token} is AWSPENDING but holds other keys than a scheduled rotation stages (neither AWSCURRENT's nor the announced set's): a manual rotation's, or a forged event. Nothing was changed; follow it with `hostkeyctl status`"
                )));
            }
            (None, LambdaStep::TestSecret) => {
                return Ok(format!(
                    "testSecret: version {token} holds no value yet: a check of the configuration (createSecret has not run); nothing to test, nothing changed"
                ));
            }
            // Not given up: an event sent before Secrets Manager's own
            // createSecret would otherwise end a rotation in flight.
            (None, LambdaStep::SetSecret | LambdaStep::FinishSecret) => {
                return Err(RotationError::Refused(format!(
                    "{step}: version {token} is Secrets Manager's empty staging: its createSecret has not stored a set. Nothing was changed; if that rotation failed, `hostkeyctl rotate --abort` drops the staging"
                )));
            }
            _ => {}
        }
        match step {
            LambdaStep::CreateSecret => match self
                .create_scheduled(&stages, &current_set, token, value.as_ref())
                .await
            {
                Ok(done) => Ok(done),
                Err(e) => Err(self.give_up(step, token, &stages, e).await),
            },
            LambdaStep::SetSecret | LambdaStep::TestSecret => {
                let result = self.offer_scheduled(step, &stages, &current_set, token, mode).await;
                match result {
                    Ok(done) => Ok(done),
                    Err(e) => Err(self.give_up(step, token, &stages, e).await),
                }
            }
            LambdaStep::FinishSecret => {
                let Some(pending) = value else {
                    unreachable!("a token with no value is refused above")
                };
                if let Err(e) = self.finish(&stages.current, &pending).await {
                    return Err(self.give_up(step, token, &stages, e).await);
                }
                let announced = self.announce_after(&pending, mode).await?;
                self.finish_converge(&pending, mode, announced).await
            }
        }
    }

    /// A step whose token is not AWSPENDING: refused, saying what the
    /// token is; nothing changes. RotateSecret with RotateImmediately false
    /// may run testSecret with a token no version has: that check of the
    /// configuration passes.
    async fn not_pending(&self, step: LambdaStep, token: &VersionId, stages: &Stages) -> Result<String, RotationError> {
        let versions = self.store.all_versions(self.secret).await?;
        let known = versions.iter().find(|v| v.version_id == *token);
        if known.is_none() && step == LambdaStep::TestSecret {
            return Ok(format!(
                "testSecret: no version {token}: a check of the configuration (no rotation runs); the function reads the secret, AWSCURRENT is {}",
                stages.current
            ));
        }
        let what = match known {
            None => "no version of this secret".to_owned(),
            Some(v) if v.stages.is_empty() => "a retired (deprecated) version".to_owned(),
            Some(v) => format!("the version labelled {}", v.stages.join(", ")),
        };
        let in_flight = match &stages.pending {
            Some((id, _)) => format!(
                " Version {id} is AWSPENDING: another rotation is in flight; finish it with `hostkeyctl rotate --finish` or drop it with `hostkeyctl rotate --abort`, and the next scheduled rotation proceeds."
            ),
            None => String::new(),
        };
        Err(RotationError::Refused(format!(
            "{step}: version {token} is not AWSPENDING (it is {what}): Secrets Manager stages a rotation's token as AWSPENDING before it calls the function, so this event is no rotation it started, or its rotation was given up. Nothing was changed; AWSCURRENT stays {}.{in_flight}",
            stages.current
        )))
    }

    /// createSecret: the token's empty version takes the set this rotation
    /// promotes: the announced set (HOSTKEYCTL_NEXT), once it has been
    /// announced for the minimum overlap, or a copy of the current set when
    /// nothing was announced (no client sees a change; finish announces
    /// the next). A value already there (a retry) must be that set.
    async fn create_scheduled(
        &self,
        stages: &Stages,
        current_set: &StoredVersion,
        token: &VersionId,
        value: Option<&StoredVersion>,
    ) -> Result<String, RotationError> {
        let announced = self.announced(&stages.current).await?;
        let keys = announced
            .as_ref()
            .map_or(&current_set.document.keys, |a| &a.document.keys);
        if let Some(existing) = value {
            if same_keys(&existing.document.keys, keys) {
                return Ok(format!("createSecret: version {token} is AWSPENDING already"));
            }
            return Err(RotationError::Refused(format!(
                "createSecret: version {token} holds other keys than this rotation stages; nothing was changed"
            )));
        }
        let (document, from) = match &announced {
            Some(a) => {
                self.announced_long_enough(a.version_id.as_ref(), &a.document.keys)
                    .await?;
                (
                    self.new_document(&stages.current, &current_set.document, Some(&a.document), token)?,
                    format!("the set announced as version {}", a.version_id),
                )
            }
            None => (
                current_set.document.clone(),
                "a copy of the current set (nothing was announced: no client sees a change, and finishSecret announces the next set)".to_owned(),
            ),
        };
        self.store
            .put_version(self.secret, &document, token, &[stage(STAGE_PENDING)])
            .await?;
        Ok(format!("createSecret: version {token} is AWSPENDING, holding {from}"))
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

    /// After `promoted` became AWSCURRENT: a new set announced
    /// ([`Announcer::announce_after`]), with this rotation's CA and clock.
    /// On a pull fleet, whose timers install the promotion one by one, the
    /// set it retired stays offered for `--retire-for` ([`crate::rotation::Gate`]); not on a push
    /// fleet (converged in one push, and nothing would push again after
    /// the hour), nor after an immediate promotion (`--min-overlap 0`: a
    /// leaked key, which no node should offer a minute longer).
    pub async fn announce_after(&self, promoted: &StoredVersion, fleet: FleetMode) -> Result<VersionId, RotationError> {
        let immediate = matches!(self.gate.min_overlap, crate::rotation::MinOverlap::Exactly(d) if d.is_zero());
        Announcer {
            store: self.store,
            secret: self.secret,
            ca: self.ca,
            now: self.gate.now,
            retire_for: (fleet == FleetMode::Pull && !immediate && !self.gate.retire_for.is_zero())
                .then(|| i64::try_from(self.gate.retire_for.as_secs()).unwrap_or(i64::MAX)),
        }
        .announce_after(promoted)
        .await
    }
}

/// What announcing a set needs: the store, the secret, the CA that signs
/// it when the current set carries certificates, and the time (`schedule
/// enable`'s first announcement has no rotation around it).
pub struct Announcer<'a, S> {
    /// The secret store.
    pub store: &'a S,
    /// The secret.
    pub secret: &'a SecretId,
    /// The CA.
    pub ca: Option<&'a crate::certificate::CaKey>,
    /// Unix seconds now (the announcement's date).
    pub now: i64,
    /// After a promotion: how long nodes keep offering the set it retired
    /// (AWSPREVIOUS) before the announced one ([`Retiring`]); none for a
    /// first announcement, which follows no promotion.
    pub retire_for: Option<i64>,
}

impl<S: SecretStore> Announcer<'_, S> {
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
        let mut document =
            crate::rotation::create::new_document(self.ca, self.now, &current, &promoted.document, None, &token)?;
        document.retiring = match (self.retire_for, info.version_with_stage(STAGE_PREVIOUS)) {
            // From the promotion's moment: a rotation's set and test may
            // have taken a while since its clock was read.
            (Some(seconds), Some(previous)) if previous.version_id != promoted.version_id => Some(Retiring {
                version_id: previous.version_id.clone(),
                until: self.now.max(self.store.clock()).saturating_add(seconds),
            }),
            _ => None,
        };
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
