//! A rotation's flow ([`Rotation`]): its phases read from the secret's
//! stages, and each step that moves it on.

use super::*;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::audit::{self, Finding, Verdict};
use crate::discovery::Instance;
use crate::dispatch::{Dispatcher, Progress};
use crate::ids::{SecretId, StageLabel, VersionId};
use crate::keyset::{KeyError, KeySet};
use crate::rollout::{self, PushOptions, PushOutcome, RolloutError};
use crate::scan::Prober;
use crate::scan::{Endpoint, ScanPolicy};
use crate::store::{
    STAGE_CURRENT, STAGE_PENDING, STAGE_PREVIOUS, SecretInfo, SecretStore, StoreError, StoredVersion, VersionSelector,
    stage, tag_fingerprints,
};

/// Why a rotation step could not run at all (as opposed to a step that
/// ran and found nodes failing, which is an [`Outcome`]).
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The rollout could not start.
    #[error(transparent)]
    Rollout(#[from] RolloutError),
    /// Generating the new set failed.
    #[error("generating the new key set: {0}")]
    Generate(#[from] KeyError),
    /// The stages do not allow this step; says why and what to do.
    #[error("{0}")]
    Refused(String),
    /// The promotion gate held the promotion back: not announced long
    /// enough, or not seen served by every node. Nothing moved.
    #[error(transparent)]
    Held(#[from] Held),
    /// A store call failed part-way through a step: what the secret holds
    /// now, and what puts it right.
    #[error("{cause}\n  {state}")]
    Interrupted {
        /// The store's failure (shown in the message, not as a source: a
        /// cause chain would print it twice).
        cause: Box<StoreError>,
        /// What is left and what to run.
        state: String,
    },
}

/// The stages that carry a rotation's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stages {
    /// What nodes must serve.
    pub current: VersionId,
    /// A rotation in flight (not the current version), with its creation time.
    pub pending: Option<(VersionId, Option<String>)>,
    /// The last good set.
    pub previous: Option<VersionId>,
}

impl Stages {
    /// The stages of a secret's metadata.
    pub fn of(info: &SecretInfo) -> Result<Self, RotationError> {
        let current = info
            .version_with_stage(STAGE_CURRENT)
            .map(|v| v.version_id.clone())
            .ok_or_else(|| {
                RotationError::Refused(format!(
                    "secret {} has no AWSCURRENT version; create it with `hostkeyctl init`",
                    info.arn
                ))
            })?;
        let pending = info
            .version_with_stage(STAGE_PENDING)
            .filter(|v| v.version_id != current)
            .map(|v| (v.version_id.clone(), v.created.clone()));
        let previous = info.version_with_stage(STAGE_PREVIOUS).map(|v| v.version_id.clone());
        Ok(Stages {
            current,
            pending,
            previous,
        })
    }
}

/// The steps of a rotation, for `--stop-after`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    /// The new set is stored as AWSPENDING.
    Create,
    /// The new set is installed on every target.
    Set,
    /// Every target was audited serving the new set.
    Test,
}

/// What a rotation run came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// AWSCURRENT moved to the new set.
    Rotated,
    /// Stopped after create.
    StoppedAfterCreate,
    /// Stopped after set.
    StoppedAfterSet,
    /// Stopped after test.
    StoppedAfterTest,
    /// Some nodes did not install the new set; nothing promoted.
    PushFailed,
    /// Some nodes do not serve the new set (drift); nothing promoted.
    AuditFailed,
    /// Some nodes could not be audited; nothing promoted.
    AuditIncomplete,
    /// The rotation in flight was dropped.
    Aborted,
    /// Pushing AWSCURRENT back failed; AWSPENDING kept for a retry.
    AbortPushFailed,
    /// No rotation in flight.
    NothingToAbort,
    /// Overlap phase one done: nodes offer the new set as extra keys.
    OverlapStarted,
    /// Nothing in flight; what an interrupted finish left was put right.
    Completed,
    /// Pull: the new set is announced (AWSPENDING); the nodes' timers
    /// serve it as extra keys within their period.
    Announced,
    /// The stages are right but some nodes do not serve them yet (listed
    /// in the report's audit); their timers, `push` or `--resume` finish.
    NotConverged,
    /// Pull: promoted; some nodes did not serve it yet when the wait ran
    /// out (listed in the report's audit): their timers install it. Not a
    /// failure: the promotion is done, and those nodes still offer the
    /// new set beside the retiring one.
    Converging,
}

/// What a rotation did, step by step (`--output json`).
#[derive(Debug, Serialize)]
pub struct Report {
    /// The secret.
    pub secret: SecretId,
    /// What it came to.
    pub result: Option<Outcome>,
    /// AWSCURRENT at the end.
    pub current_version: VersionId,
    /// AWSPENDING at the end.
    pub pending_version: Option<VersionId>,
    /// AWSPREVIOUS at the end.
    pub previous_version: Option<VersionId>,
    /// What each step did.
    pub steps: Vec<String>,
    /// The last push.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push: Option<PushOutcome>,
    /// The audit findings, when the test step failed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub audit: Vec<(String, Vec<Finding>)>,
    /// After a set was retired: its keys that clients trusting the CA still
    /// accept, and until when (to distribute as `@revoked` lines or a KRL).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revocation: Option<crate::revocation::Advice>,
    /// What clients' users fetch now, when the outcome announced or
    /// promoted a set (docs/clients.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clients: Option<String>,
    /// What to send users for the phase the run left the fleet in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_notice: Option<crate::notice::Notice>,
}

impl Report {
    /// An empty report for `secret`, filled in by [`Rotation::run`].
    pub fn new(secret: SecretId) -> Self {
        Report {
            secret,
            result: None,
            current_version: VersionId::random(),
            pending_version: None,
            previous_version: None,
            steps: Vec::new(),
            push: None,
            audit: Vec::new(),
            revocation: None,
            clients: None,
            user_notice: None,
        }
    }
}

impl setup::Prepared {
    /// The rotation of `secret` over what was set up.
    #[allow(clippy::too_many_arguments)]
    pub fn rotation<'a, S, D, P>(
        &'a self,
        store: &'a S,
        dispatcher: &'a D,
        prober: Arc<P>,
        secret: &'a SecretId,
        port: u16,
        say: &'a (dyn Fn(&str) + Sync),
        gate: Gate,
    ) -> Rotation<'a, S, D, P> {
        Rotation {
            store,
            dispatcher,
            prober,
            secret,
            instances: &self.instances,
            push: &self.push,
            port,
            progress: &|_, _| {},
            say,
            ca: self.ca.as_ref(),
            gate,
        }
    }
}

/// Keeps failed audit findings in the report: drift when a node serves
/// other keys, incomplete when one could not be asked.
pub(super) fn audit_failed(findings: Vec<(String, Vec<Finding>)>, report: &mut Report) -> Outcome {
    let drift = findings.iter().any(|(_, f)| f.iter().any(|f| f.status.is_drift()));
    report.audit = findings;
    if drift {
        Outcome::AuditFailed
    } else {
        Outcome::AuditIncomplete
    }
}

/// Which phase of a rotation a run is asked for: one, as `rotate`'s flags
/// allow one (clap refuses the others together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Phase {
    /// No phase flag: a new set, announced (as `Overlap`) unless clients
    /// need no time to learn it (`--min-overlap 0`, or a run told where to
    /// stop); a pull fleet's first run.
    #[default]
    New,
    /// `--overlap`: phase one, the nodes serve both sets; with `resume`
    /// (`--overlap --resume`), the set in flight is offered again (after
    /// failed nodes are fixed).
    Overlap {
        /// Continue the rotation in flight rather than start one.
        resume: bool,
    },
    /// `--finish`: phase two, the set in flight is promoted.
    Finish,
    /// `--resume`: the rotation in flight continues (with none, the nodes
    /// converge to AWSCURRENT).
    Resume,
    /// `--abort`: the rotation in flight is dropped.
    Abort,
    /// `--rollback`: the previous set (AWSPREVIOUS) comes back through an
    /// overlap, announced by the first run and promoted by a run after
    /// the minimum overlap.
    Rollback {
        /// `--force`: go on although a revocation hostkeyctl produced
        /// names the previous keys (the report says what to hand out).
        force: bool,
    },
}

impl Phase {
    /// Whether the run continues the rotation in flight rather than
    /// start one.
    pub fn continues(self) -> bool {
        matches!(self, Phase::Finish | Phase::Resume | Phase::Overlap { resume: true })
    }
}

/// What a run is asked to do.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request {
    /// The phase.
    pub phase: Phase,
    /// Stop after this step.
    pub stop_after: Option<Step>,
    /// A pull fleet: never push; after a stage move, wait up to this long
    /// for the nodes (their timers) to serve what the stages say.
    pub pull: Option<Duration>,
}

/// The outside systems and targets of one rotation.
pub struct Rotation<'a, S, D, P> {
    /// The secret store.
    pub store: &'a S,
    /// Sends install to the nodes.
    pub dispatcher: &'a D,
    /// Audits the nodes by handshake.
    pub prober: Arc<P>,
    /// The secret.
    pub secret: &'a SecretId,
    /// The login nodes.
    pub instances: &'a [Instance],
    /// How to push.
    pub push: &'a PushOptions,
    /// sshd port of the nodes, for the test step.
    pub port: u16,
    /// Rollout progress.
    pub progress: Progress<'a>,
    /// Called with a line for each step as it starts.
    pub say: &'a (dyn Fn(&str) + Sync),
    /// The CA (`--ca-secret-id`): signs the new set like the current one.
    /// Required when the current set carries certificates.
    pub ca: Option<&'a crate::certificate::CaKey>,
    /// What a promotion must pass ([`gate`]): the minimum overlap, whether
    /// unreachable nodes of a pull fleet are trusted, and the time.
    pub gate: Gate,
}

impl<S: SecretStore, D: Dispatcher, P: Prober> Rotation<'_, S, D, P> {
    /// Reads the stages, after putting right what an interrupted finish
    /// left: AWSPENDING still on the current version, stale fingerprint tags.
    pub async fn stages(&self, notes: &mut Vec<String>) -> Result<(Stages, StoredVersion, bool), RotationError> {
        let info = self.store.describe_versions(self.secret).await?;
        let stages = Stages::of(&info)?;
        let current_set = self
            .store
            .get(self.secret, &VersionSelector::VersionId(stages.current.clone()))
            .await?;
        if info
            .version_with_stage(STAGE_PENDING)
            .is_some_and(|v| v.version_id == stages.current)
        {
            self.store
                .move_stage(self.secret, &stage(STAGE_PENDING), None, Some(&stages.current))
                .await?;
            notes.push("cleaned up AWSPENDING left on the current version".to_owned());
        }
        // A run killed between storing its set and claiming AWSPENDING
        // leaves a claim label on a version nobody will use: take it off.
        for v in &info.versions {
            let pending = v.stages.iter().any(|l| l == STAGE_PENDING);
            for label in v
                .stages
                .iter()
                .filter(|l| l.starts_with(crate::store::claim::CLAIM_PREFIX))
            {
                if pending {
                    continue;
                }
                if let Ok(label) = StageLabel::parse(label) {
                    self.store
                        .move_stage(self.secret, &label, None, Some(&v.version_id))
                        .await?;
                    notes.push(format!("removed the stale claim {label} from version {}", v.version_id));
                }
            }
        }
        let tagged = info.tagged_fingerprints().ok().flatten().map(|(v, _)| v);
        if tagged.as_ref() != Some(&stages.current) {
            // Missing, stale or tampered tags are rewritten from the value.
            tag_fingerprints(self.store, self.secret, &stages.current, &current_set.document.keys).await?;
            notes.push("refreshed the fingerprint tags to the current version".to_owned());
        }
        // Repairs of an interrupted finish (not stale claims) say that a
        // rotation just completed.
        let repaired = notes
            .iter()
            .any(|n| n.starts_with("cleaned up AWSPENDING") || n.starts_with("refreshed the fingerprint tags"));
        Ok((stages, current_set, repaired))
    }

    /// Step set: installs `version` on every target (with `next` as extra
    /// keys during an overlap).
    pub async fn set(
        &self,
        version: &StoredVersion,
        next: Option<&StoredVersion>,
    ) -> Result<PushOutcome, RotationError> {
        // A next set with the current keys (a copy) is no extra set: a key
        // listed twice makes OpenSSH clients drop the host key update.
        let next = next.filter(|n| !crate::store::same_keys(&n.document.keys, &version.document.keys));
        Ok(rollout::push_version(self.dispatcher, version, next, self.instances, self.push, self.progress).await?)
    }

    /// The login nodes as the handshakes reach them: by Name tag (else
    /// instance id), at their private address and sshd's port.
    pub(super) fn endpoints(&self) -> Vec<Endpoint> {
        self.instances
            .iter()
            .map(|i| Endpoint {
                name: i.name.clone().unwrap_or_else(|| i.instance_id.clone()),
                host: i.private_ip.clone().unwrap_or_default(),
                port: self.port,
            })
            .collect()
    }

    /// Step test: audits every target against `keys`; `None` when every
    /// node serves exactly them, else the findings.
    pub async fn test(&self, keys: &KeySet) -> Option<Vec<(String, Vec<Finding>)>> {
        let endpoints = self.endpoints();
        let findings = audit::check_endpoints(self.prober.clone(), ScanPolicy::default(), &endpoints, keys).await;
        let all_ok = findings.iter().all(|(_, f)| f.iter().all(|f| f.status == Verdict::Ok));
        (!all_ok).then_some(findings)
    }

    /// Step finish: AWSCURRENT moves to `pending` (AWSPREVIOUS follows),
    /// AWSPENDING comes off, the tags follow. Each move is skipped when
    /// already done, so a finish interrupted anywhere is completed by the
    /// next run.
    pub async fn finish(&self, current: &VersionId, pending: &StoredVersion) -> Result<(), RotationError> {
        let id = &pending.version_id;
        // The promotion gate: the one place every move of AWSCURRENT to
        // other keys passes.
        let current_set = self
            .store
            .get(self.secret, &VersionSelector::VersionId(current.clone()))
            .await?;
        self.may_promote(&current_set, pending).await?;
        self.store
            .move_stage(self.secret, &stage(STAGE_CURRENT), Some(id), Some(current))
            .await
            .map_err(|source| RotationError::Interrupted {
                cause: Box::new(source),
                state: format!(
                    "AWSCURRENT stays {current} and {id} stays AWSPENDING: run `hostkeyctl rotate --resume` to finish, or --abort"
                ),
            })?;
        let half_done = |source| RotationError::Interrupted {
            cause: Box::new(source),
            state: format!(
                "AWSCURRENT is {id} already (the nodes' timers follow it); `hostkeyctl rotate --resume` completes the finish (AWSPENDING off, fingerprint tags) and converges the nodes"
            ),
        };
        self.store
            .move_stage(self.secret, &stage(STAGE_PENDING), None, Some(id))
            .await
            .map_err(half_done)?;
        tag_fingerprints(self.store, self.secret, id, &pending.document.keys)
            .await
            .map_err(half_done)?;
        Ok(())
    }

    /// After a run that retired a set (a finish, an abort): the keys of
    /// retired sets that clients trusting the CA still accept, and until
    /// when (the report's `revocation`; `None` when there are none). A
    /// rotation alone never retires them for those clients. Apart from
    /// [`Rotation::run`], so that a failure here never reads as a failed
    /// rotation.
    pub async fn revocation(&self, outcome: Outcome) -> Result<Option<crate::revocation::Advice>, StoreError> {
        if !matches!(
            outcome,
            Outcome::Rotated | Outcome::NotConverged | Outcome::Converging | Outcome::Aborted | Outcome::Completed
        ) {
            return Ok(None);
        }
        let retired = crate::revocation::retired(self.store, self.secret, crate::certificate::now_unix()).await?;
        Ok(crate::revocation::Advice::of(retired))
    }

    /// Runs a rotation as `request` asks, from the stages alone.
    pub async fn run(&self, request: Request, report: &mut Report) -> Result<Outcome, RotationError> {
        let (stages, current_set, repaired) = self.stages(&mut report.steps).await?;
        report.current_version = stages.current.clone();
        report.pending_version = stages.pending.as_ref().map(|p| p.0.clone());
        report.previous_version = stages.previous.clone();
        if request.phase == Phase::Abort {
            let Some((pending, _)) = &stages.pending else {
                (self.say)("no rotation in flight; nothing to abort");
                return Ok(Outcome::NothingToAbort);
            };
            return self.abort(&current_set, pending, request, report).await;
        }
        if request.phase.continues() && stages.pending.is_none() {
            // Nothing left to promote: a run killed inside or after its
            // finish (or before its create took hold) leaves the nodes
            // part-way, and --resume (or --finish again) brings them to
            // what the stages say.
            if !repaired {
                // Said as it starts too: the text report lists no steps,
                // and a --finish with nothing announced promotes nothing.
                let step = format!(
                    "resume: no rotation in flight to promote; converging the nodes to AWSCURRENT {} (a run killed after its promotion leaves them part-way)",
                    stages.current
                );
                (self.say)(&step);
                report.steps.push(step);
            }
            return self.converge(&current_set, request, report).await;
        }
        if let Phase::Rollback { .. } = request.phase {
            return self.rollback(&stages, &current_set, request, report).await;
        }
        // No phase flag on a pull fleet: the announcement (--overlap), the
        // first of its two runs.
        let mut overlap =
            matches!(request.phase, Phase::Overlap { .. }) || request.pull.is_some() && request.phase == Phase::New;
        let mut stages = stages;
        let resume = request.phase.continues();
        // Refused below: the announced set's age is when it was made, which
        // a renewal (`sign` during an overlap, a new version) keeps. Read
        // only on this path; a run that continues reads the set anyway.
        if let Some((id, created)) = &mut stages.pending {
            let Some(set) = crate::store::value_of(self.store, self.secret, id).await? else {
                return Err(RotationError::Refused(format!(
                    "AWSPENDING is on version {id}, which holds no value: Secrets Manager's staging of a scheduled rotation, in progress or failed before its createSecret stored a set. Wait for it (`hostkeyctl schedule show`), or drop it with `hostkeyctl rotate --abort`"
                )));
            };
            if !resume && !set.document.created.is_empty() {
                *created = Some(set.document.created);
            }
        }
        let pending_id = match plan_start(&stages.current, stages.pending.as_ref(), resume) {
            Start::Refuse(message) => return Err(RotationError::Refused(message)),
            Start::Continue(id) => {
                (self.say)(&format!("resuming the rotation to version {id}"));
                id
            }
            Start::Create => {
                if !overlap && request.stop_after.is_none() {
                    // Promoted in this very run only when clients need no
                    // time to learn it: announced instead, by default.
                    if let create::Immediate::AnnounceInstead(min) = self.check_immediate(&current_set).await? {
                        overlap = true;
                        report.steps.push(format!(
                            "no phase flag: the new set is announced (as --overlap), not promoted at once; promote it with `rotate --finish` once it has been offered for {} (--min-overlap). --min-overlap 0 rotates at once, and every client that has not learned the new keys then sees a host key warning",
                            gate::human(min)
                        ));
                    }
                }
                let id = self.create(&stages.current, &current_set.document).await?;
                (self.say)(&format!("create: new key set stored as version {id} (AWSPENDING)"));
                id
            }
        };
        report.pending_version = Some(pending_id.clone());
        report.steps.push(format!("create: version {pending_id} is AWSPENDING"));
        if request.stop_after == Some(Step::Create) {
            return Ok(Outcome::StoppedAfterCreate);
        }
        let pending = self
            .store
            .get(self.secret, &VersionSelector::VersionId(pending_id.clone()))
            .await?;
        if request.pull.is_some() && request.phase != Phase::Finish {
            report.steps.push(format!(
                "announce: the nodes' timers serve {pending_id} as extra host keys at their next run; after the overlap period, run `rotate --pull --finish`"
            ));
            return Ok(Outcome::Announced);
        }
        if overlap {
            return self.overlap(&current_set, &pending, report).await;
        }
        self.promote(&current_set, &pending, request, report).await
    }
}

impl crate::exit::ExitStatus for RotationError {
    /// The store's or rollout's status; a refusal 2; held back 3 (nothing
    /// moved, a later run completes it).
    fn status(&self) -> crate::exit::Status {
        match self {
            RotationError::Store(s) => s.status(),
            RotationError::Rollout(r) => r.status(),
            RotationError::Interrupted { cause, .. } => cause.status(),
            RotationError::Held(_) => crate::exit::Status::Incomplete,
            RotationError::Generate(_) | RotationError::Refused(_) => crate::exit::Status::Usage,
        }
    }
}

impl crate::exit::ExitStatus for Outcome {
    /// Done or deliberately stopped 0; drift 1; nodes failed or not yet
    /// converged 3.
    fn status(&self) -> crate::exit::Status {
        use crate::exit::Status;
        match self {
            Outcome::Rotated
            | Outcome::StoppedAfterCreate
            | Outcome::StoppedAfterSet
            | Outcome::StoppedAfterTest
            | Outcome::Aborted
            | Outcome::NothingToAbort
            | Outcome::OverlapStarted
            | Outcome::Announced
            | Outcome::Converging
            | Outcome::Completed => Status::Success,
            Outcome::AuditFailed => Status::Drift,
            Outcome::PushFailed | Outcome::AuditIncomplete | Outcome::AbortPushFailed | Outcome::NotConverged => {
                Status::Incomplete
            }
        }
    }
}
