//! `push` as a flow over the store, the fleet and the dispatcher: settle
//! the SSM document by its hash, read the desired state from the stages
//! (what the nodes' timers install too), hold `--version-id`/`--stage` to
//! it, find the nodes, then install on them ([`super::push_version`]).

use super::{PushOptions, PushOutcome, RolloutError, push_version};
use crate::discovery::scope::ScopeError;
use crate::discovery::{DiscoveryError, Fleet, Instance, TargetSpec};
use crate::dispatch::{Dispatcher, Progress};
use crate::ids::{Program, SecretId, VersionId};
use crate::ssm_document::{Kind, ResolveError, SentDocument, settle};
use crate::store::{DesiredState, SecretStore, StoreError, VersionSelector, desired_state};

/// What to push.
#[derive(Clone, Debug)]
pub struct PushRequest<'a> {
    /// The secret.
    pub secret: &'a SecretId,
    /// `--version-id`/`--stage`: what the caller expects AWSCURRENT to be.
    pub pin: Option<VersionSelector>,
    /// The nodes.
    pub targets: &'a [TargetSpec],
    /// The SSM document's name.
    pub document: &'a str,
    /// How the nodes call hostkeyctl.
    pub node_command: &'a Program,
    /// `--allow-other-clusters`: send to instances outside the secret's
    /// cluster ([`crate::discovery::scope`]).
    pub allow_other_clusters: bool,
}

/// What a push will do, settled before anything is sent (`--dry-run`
/// prints it).
#[derive(Debug)]
pub struct PushPlan {
    /// What the nodes must serve.
    pub desired: DesiredState,
    /// Where.
    pub instances: Vec<Instance>,
    /// Through which document.
    pub document: SentDocument,
}

impl PushPlan {
    /// `push --dry-run`'s report: the plan and the command line it would
    /// send, sent nowhere.
    pub fn dry_run<'a>(&'a self, command_line: &'a str) -> PushDryRun<'a> {
        PushDryRun {
            command_line,
            document: &self.document,
            dry_run: true,
            secret: &self.desired.current.arn,
            targets: &self.instances,
            version_id: &self.desired.current.version_id,
        }
    }
}

/// `push --dry-run --output json`.
#[derive(Debug, serde::Serialize)]
pub struct PushDryRun<'a> {
    /// What each node would run.
    pub command_line: &'a str,
    /// Through which document.
    pub document: &'a SentDocument,
    /// Always true: nothing was sent.
    pub dry_run: bool,
    /// The secret's ARN.
    pub secret: &'a SecretId,
    /// Where.
    pub targets: &'a [Instance],
    /// The version the nodes would install.
    pub version_id: &'a VersionId,
}

/// Why a push could not start.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The document is not one to send.
    #[error(transparent)]
    Document(#[from] ResolveError),
    /// The stages could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The pin names another version than the stages say.
    #[error(
        "{selector} is version {pinned}, but the nodes must serve AWSCURRENT ({current}){next}: push installs only what the stages say, which the nodes' timers install too. Move the stages with `hostkeyctl rotate` (or drop --version-id/--stage)"
    )]
    Pinned {
        /// The pin.
        selector: VersionSelector,
        /// The version it names.
        pinned: VersionId,
        /// AWSCURRENT.
        current: VersionId,
        /// `, with version ... as extra keys`, when nodes serve an extra set.
        next: String,
    },
    /// The nodes could not be found.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The targets reach another cluster's instances.
    #[error(transparent)]
    Scope(#[from] ScopeError),
    /// The rollout could not start.
    #[error(transparent)]
    Rollout(#[from] RolloutError),
}

/// The outside systems of a push.
pub struct Push<'a, S, F, D> {
    /// The secret store.
    pub store: &'a S,
    /// Where the nodes are found.
    pub fleet: &'a F,
    /// Sends install to them.
    pub dispatcher: &'a D,
}

impl<S: SecretStore, F: Fleet, D: Dispatcher> Push<'_, S, F, D> {
    /// Settles everything a push needs, sending nothing.
    pub async fn plan(&self, req: &PushRequest<'_>) -> Result<PushPlan, PushError> {
        let document = settle(self.dispatcher, req.document, Kind::Install, req.node_command).await?;
        let desired = desired_state(self.store, req.secret).await?;
        if let Some(selector) = &req.pin {
            let pinned = self.store.get(req.secret, selector).await?;
            if pinned.version_id != desired.current.version_id {
                return Err(PushError::Pinned {
                    selector: selector.clone(),
                    pinned: pinned.version_id,
                    current: desired.current.version_id.clone(),
                    next: desired
                        .next
                        .as_ref()
                        .map(|n| format!(", with version {} as extra keys", n.version_id))
                        .unwrap_or_default(),
                });
            }
        }
        let instances = self.fleet.discover(req.targets).await?;
        let secret = self.store.describe(req.secret).await?;
        crate::discovery::scope::check(&secret.tags, req.targets, &instances, req.allow_other_clusters)?;
        Ok(PushPlan {
            desired,
            instances,
            document,
        })
    }

    /// Installs the plan's desired state on its instances, through its
    /// document (`options.document` is ignored).
    pub async fn run(
        &self,
        plan: &PushPlan,
        options: &PushOptions,
        progress: Progress<'_>,
    ) -> Result<PushOutcome, PushError> {
        let options = PushOptions {
            document: Some(plan.document.clone()),
            ..options.clone()
        };
        Ok(push_version(
            self.dispatcher,
            &plan.desired.current,
            plan.desired.next.as_ref(),
            &plan.instances,
            &options,
            progress,
        )
        .await?)
    }
}

impl crate::exit::ExitStatus for PushError {
    /// The cause's status; a refusal of the arguments is 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            PushError::Document(d) => d.status(),
            PushError::Store(s) => s.status(),
            PushError::Discovery(d) => d.status(),
            PushError::Rollout(r) => r.status(),
            _ => crate::exit::Status::Usage,
        }
    }
}
