//! What a rotation reaches, set up from a plain request: the document it
//! sends (settled by its hash), the login nodes (looked up; a pull fleet's
//! by address, HyperPod's included), and the CA that signs new sets. What
//! `rotate` and the scheduled rotation's function both run, over the
//! store, fleet and dispatcher traits.

use std::time::Duration;

use crate::discovery::{DiscoveryError, Fleet, Instance, TargetSpec};
use crate::dispatch::Dispatcher;
use crate::document::KeySetPrefix;
use crate::exit::{ExitStatus, Status};
use crate::ids::{Program, Region, SecretId};
use crate::rollout::PushOptions;
use crate::ssm_document::{Kind, ResolveError};
use crate::store::{SecretStore, StoreError};

/// How the install command goes out through SSM Run Command.
#[derive(Clone, Debug)]
pub struct Rollout {
    /// The SSM document to send (its name).
    pub document: String,
    /// How the nodes call hostkeyctl.
    pub node_command: Program,
    /// SSM's MaxConcurrency.
    pub max_concurrency: String,
    /// SSM's MaxErrors.
    pub max_errors: String,
    /// How long a node's install may take.
    pub timeout: Duration,
    /// Nodes to install on first, alone.
    pub canary: usize,
    /// The region the nodes read the secret in (none: their own).
    pub region: Option<Region>,
}

/// What a rotation is set up from.
#[derive(Clone, Debug)]
pub struct SetupRequest<'a> {
    /// The key set's secret (its Cluster tag scopes the targets).
    pub secret: &'a SecretId,
    /// `--allow-other-clusters` ([`crate::discovery::scope`]).
    pub allow_other_clusters: bool,
    /// The login nodes.
    pub targets: &'a [TargetSpec],
    /// A pull fleet (nothing is sent; no document is settled).
    pub pull: bool,
    /// How installs go out.
    pub rollout: &'a Rollout,
    /// The CA secret that signs new sets.
    pub ca_secret_id: Option<&'a SecretId>,
    /// Where the key sets live (a CA under it is refused).
    pub key_set_prefix: &'a KeySetPrefix,
}

/// What a rotation reaches.
#[derive(Debug)]
pub struct Prepared {
    /// How to push.
    pub push: PushOptions,
    /// The login nodes.
    pub instances: Vec<Instance>,
    /// The CA.
    pub ca: Option<crate::certificate::CaKey>,
}

/// Why a rotation could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The options do not hold together.
    #[error("{0}")]
    Options(String),
    /// The document could not be trusted.
    #[error(transparent)]
    Document(#[from] ResolveError),
    /// The nodes could not be looked up.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The targets reach another cluster's instances.
    #[error(transparent)]
    Scope(#[from] crate::discovery::scope::ScopeError),
    /// The CA could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ExitStatus for SetupError {
    /// The cause's status; bad options 2.
    fn status(&self) -> Status {
        match self {
            SetupError::Options(_) => Status::Usage,
            SetupError::Document(e) => e.status(),
            SetupError::Discovery(e) => e.status(),
            SetupError::Scope(e) => e.status(),
            SetupError::Store(e) => e.status(),
        }
    }
}

/// Sets up what a rotation reaches (module documentation). Everything
/// the options alone refuse is refused before any call.
pub async fn prepare(
    store: &impl SecretStore,
    fleet: &impl Fleet,
    documents: &impl Dispatcher,
    request: &SetupRequest<'_>,
) -> Result<Prepared, SetupError> {
    if let Some(ca_id) = request.ca_secret_id {
        request
            .key_set_prefix
            .check_ca(ca_id)
            .map_err(|e| SetupError::Options(format!("{e}; nothing was read or rotated")))?;
    }
    let rollout = request.rollout;
    for (flag, value) in [
        ("--max-concurrency", &rollout.max_concurrency),
        ("--max-errors", &rollout.max_errors),
    ] {
        crate::dispatch::validate_rate(flag, value).map_err(SetupError::Options)?;
    }
    if rollout.timeout.is_zero() {
        return Err(SetupError::Options("--timeout must be at least 1 second".to_owned()));
    }
    // A pull rotation sends nothing, so it settles no document.
    let document = if request.pull {
        None
    } else {
        Some(crate::ssm_document::settle(documents, &rollout.document, Kind::Install, &rollout.node_command).await?)
    };
    let instances = if request.pull {
        // Asked by handshake only: any node with an address will do,
        // HyperPod nodes included.
        fleet
            .targets(request.targets)
            .await?
            .into_iter()
            .map(|t| Instance {
                instance_id: t.instance_id.unwrap_or_else(|| t.name.clone()),
                private_ip: t.address,
                name: Some(t.name),
                clusters: t.clusters,
            })
            .collect()
    } else {
        fleet.discover(request.targets).await?
    };
    let secret = store.describe(request.secret).await?;
    crate::discovery::scope::check(&secret.tags, request.targets, &instances, request.allow_other_clusters)?;
    let ca = match request.ca_secret_id {
        Some(id) => Some(store.get_ca(id).await?.key),
        None => None,
    };
    Ok(Prepared {
        push: PushOptions {
            document,
            node_command: rollout.node_command.clone(),
            max_concurrency: rollout.max_concurrency.clone(),
            max_errors: rollout.max_errors.clone(),
            timeout: rollout.timeout,
            canary: rollout.canary,
            region: rollout.region.clone(),
        },
        instances,
        ca,
    })
}
