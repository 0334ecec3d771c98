//! What a rotation reaches, set up from a plain request: the document it
//! sends (settled by its hash), the login nodes (looked up; a pull fleet's
//! by address, HyperPod's included), and the CA that signs new sets. What
//! `rotate` and the scheduled rotation's function both run, over the
//! store, fleet and dispatcher traits.

use crate::discovery::{DiscoveryError, Fleet, Instance, TargetSpec};
use crate::dispatch::Dispatcher;
use crate::document::KeySetPrefix;
use crate::exit::{ExitStatus, Status};
use crate::ids::SecretId;
use crate::rollout::PushOptions;
use crate::ssm_document::{Kind, ResolveError};
use crate::store::{SecretStore, StoreError};

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
    /// The SSM document to send (its name), settled here.
    pub document: &'a str,
    /// How installs go out (its document is left out: settled here).
    pub push: &'a PushOptions,
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
    request.push.check().map_err(SetupError::Options)?;
    // A pull rotation sends nothing, so it settles no document.
    let document = if request.pull {
        None
    } else {
        Some(crate::ssm_document::settle(documents, request.document, Kind::Install, &request.push.node_command).await?)
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
            ..request.push.clone()
        },
        instances,
        ca,
    })
}
