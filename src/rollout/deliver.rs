//! `deliver`: the node build onto running nodes, through the setup
//! document ([`crate::ssm_document::setup`]): trusted only when its content
//! is what this binary writes for the builds it pins, sent to the nodes of
//! the secret's cluster, each node's answer read from its report.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::aws_error::AwsError;
use crate::discovery::scope::ScopeError;
use crate::discovery::{DiscoveryError, Fleet, Instance, TargetSpec};
use crate::dispatch::{self, CommandSpec, Dispatcher, Invocation, Progress};
use crate::escape::escape;
use crate::ids::SecretId;
use crate::ssm_document::setup::{NodeBuilds, SetupReport};
use crate::ssm_document::{SentDocument, Trust};
use crate::store::{SecretStore, StoreError};

/// Why a delivery could not start.
#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    /// SSM refused or could not be reached.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The setup document is not deployed.
    #[error(
        "hostkeyctl's setup document {name} is not deployed in this account and region; nothing was sent. Deploy it from the node builds you uploaded: `hostkeyctl ssm-document deploy-setup --builds DIR --builds-at s3://BUCKET/PREFIX`"
    )]
    NotDeployed {
        /// Its name.
        name: String,
    },
    /// The document holds something else than a setup document of this
    /// binary.
    #[error(
        "SSM document {name} (default version {version}) is not a setup document this hostkeyctl writes; nothing was sent. Someone changed it, or another hostkeyctl release deployed it: deploy it again with `hostkeyctl ssm-document deploy-setup`"
    )]
    Tampered {
        /// The document.
        name: String,
        /// Its default version.
        version: String,
    },
    /// The secret could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The nodes could not be found.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The targets reach another cluster's instances.
    #[error(transparent)]
    Scope(#[from] ScopeError),
}

impl crate::exit::ExitStatus for DeliverError {
    /// AWS trouble is 4; the rest 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            DeliverError::Aws(a) => crate::exit::ExitStatus::status(a),
            DeliverError::Store(s) => s.status(),
            DeliverError::Discovery(d) => d.status(),
            _ => crate::exit::Status::Usage,
        }
    }
}

/// What to deliver where.
#[derive(Clone, Copy, Debug)]
pub struct DeliverRequest<'a> {
    /// The secret whose cluster the targets must stay in.
    pub secret: &'a SecretId,
    /// The nodes.
    pub targets: &'a [TargetSpec],
    /// The setup document's name.
    pub document: &'a str,
    /// `--allow-other-clusters`.
    pub allow_other_clusters: bool,
}

/// A delivery settled before anything is sent.
#[derive(Clone, Debug, Serialize)]
pub struct DeliverPlan {
    /// The document and its version.
    pub document: SentDocument,
    /// What it installs.
    pub builds: NodeBuilds,
    /// Where.
    pub instances: Vec<Instance>,
}

impl DeliverPlan {
    /// `deliver --dry-run`'s report: the plan, sent nowhere.
    pub fn dry_run(&self) -> DryRunReport<'_> {
        DryRunReport {
            builds: &self.builds,
            document: &self.document,
            dry_run: true,
            targets: &self.instances,
        }
    }
}

/// `deliver --dry-run --output json`.
#[derive(Debug, Serialize)]
pub struct DryRunReport<'a> {
    /// What it would install.
    pub builds: &'a NodeBuilds,
    /// The document it would send.
    pub document: &'a SentDocument,
    /// Always true: nothing was sent.
    pub dry_run: bool,
    /// Where.
    pub targets: &'a [Instance],
}

/// One node's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct DeliveredNode {
    /// Instance id.
    pub instance_id: String,
    /// Name tag.
    pub name: Option<String>,
    /// Private address.
    pub private_ip: Option<String>,
    /// SSM status, or `NotSent`.
    pub status: String,
    /// `installed` or `unchanged`.
    pub result: Option<String>,
    /// The node's architecture.
    pub arch: Option<String>,
    /// What `hostkeyctl --version` printed on the node.
    pub version: Option<String>,
    /// Who reaches its metadata service now: `root_only` or `open`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imds: Option<crate::imds_guard::Access>,
    /// Whether the node runs the pinned build now.
    pub ok: bool,
    /// Why not.
    pub error: Option<String>,
    /// The SSM command id.
    pub command_id: Option<String>,
}

/// What a delivery did.
#[derive(Clone, Debug, Serialize)]
pub struct DeliverOutcome {
    /// The document sent.
    pub document: SentDocument,
    /// What it installs.
    pub builds: NodeBuilds,
    /// SSM command ids.
    pub command_ids: Vec<String>,
    /// Per node.
    pub results: Vec<DeliveredNode>,
}

impl crate::exit::ExitStatus for DeliverOutcome {
    /// Every node done: 0; some not: 3.
    fn status(&self) -> crate::exit::Status {
        if self.results.iter().all(|r| r.ok) {
            crate::exit::Status::Success
        } else {
            crate::exit::Status::Incomplete
        }
    }
}

/// How to send.
#[derive(Clone, Debug)]
pub struct DeliverOptions {
    /// SSM MaxConcurrency over the fleet.
    pub max_concurrency: String,
    /// SSM MaxErrors over the fleet.
    pub max_errors: String,
    /// Overall timeout.
    pub timeout: Duration,
    /// The document's `MetadataService`: `root-only` or `open`.
    pub imds: String,
}

/// The setup document `name` as SSM holds its default version, with its
/// pins, when it is one this binary writes.
pub async fn settle_setup(
    dispatcher: &impl Dispatcher,
    name: &str,
) -> Result<(SentDocument, NodeBuilds), DeliverError> {
    let Some(deployed) = dispatcher.document(name).await? else {
        return Err(DeliverError::NotDeployed { name: escape(name) });
    };
    let tampered = || DeliverError::Tampered {
        name: escape(name),
        version: escape(&deployed.version),
    };
    let content = dispatcher
        .document_content(name, &deployed.version)
        .await?
        .ok_or_else(tampered)?;
    // The content read is the version described (its hash), and one this
    // binary writes.
    if !deployed.holds(&content) {
        return Err(tampered());
    }
    let builds = NodeBuilds::from_content(&content).ok_or_else(tampered)?;
    let document = SentDocument {
        name: name.to_owned(),
        version: Some(deployed.version.clone()),
        sha256: Some(deployed.hash.to_lowercase()),
        trust: Trust::Pinned,
    };
    Ok((document, builds))
}

/// Settles a delivery: the document, the nodes, the cluster they are in.
pub async fn plan(
    dispatcher: &impl Dispatcher,
    fleet: &impl Fleet,
    store: &impl SecretStore,
    req: &DeliverRequest<'_>,
) -> Result<DeliverPlan, DeliverError> {
    let (document, builds) = settle_setup(dispatcher, req.document).await?;
    let instances = fleet.discover(req.targets).await?;
    let secret = store.describe(req.secret).await?;
    crate::discovery::scope::check(&secret.tags, req.targets, &instances, req.allow_other_clusters)?;
    Ok(DeliverPlan {
        document,
        builds,
        instances,
    })
}

fn node_result(instance: &Instance, inv: Option<&Invocation>, builds: &NodeBuilds, not_sent: &str) -> DeliveredNode {
    let mut r = DeliveredNode {
        instance_id: instance.instance_id.clone(),
        name: instance.name.clone(),
        private_ip: instance.private_ip.clone(),
        status: "NotSent".to_owned(),
        result: None,
        arch: None,
        version: None,
        imds: None,
        ok: false,
        error: Some(not_sent.to_owned()),
        command_id: None,
    };
    let Some(inv) = inv else { return r };
    r.status = inv.status.clone();
    r.command_id = Some(inv.command_id.clone());
    let report = SetupReport::from_output(&inv.stdout);
    let pinned = report.as_ref().is_some_and(|rep| {
        builds
            .pins
            .iter()
            .any(|(arch, sha)| arch.as_str() == rep.arch && *sha == rep.sha256)
    });
    r.ok = inv.status == "Success" && pinned;
    r.error = if r.ok {
        None
    } else if !inv.is_final() {
        Some(format!(
            "timed out waiting for the node (SSM status {})",
            escape(&inv.status)
        ))
    } else if report.is_some() {
        Some(
            "the node reported a build the document does not pin: deploy-setup changed it meanwhile; run deliver again"
                .to_owned(),
        )
    } else if !inv.stderr.trim().is_empty() {
        // The first line: the failing step's own (the agent adds its
        // notes after it).
        Some(escape(inv.stderr.trim().lines().next().unwrap_or_default()))
    } else {
        Some(format!(
            "SSM status {}, exit code {:?}",
            escape(&inv.status),
            inv.response_code
        ))
    };
    if let Some(rep) = report {
        r.result = Some(rep.result.as_str().to_owned());
        r.arch = Some(escape(&rep.arch));
        r.version = Some(escape(&rep.version));
        r.imds = rep.imds;
    }
    r
}

/// Sends the plan's document to its instances, in batches of at most 50,
/// and reads each node's answer.
pub async fn run(
    dispatcher: &impl Dispatcher,
    plan: &DeliverPlan,
    options: &DeliverOptions,
    progress: Progress<'_>,
) -> Result<DeliverOutcome, DeliverError> {
    let spec = CommandSpec {
        document: plan.document.name.clone(),
        document_version: plan.document.version.clone(),
        parameters: Some(BTreeMap::from([crate::ssm_document::setup::imds_parameter(
            &options.imds,
        )])),
        command_line: format!("{} (MetadataService={})", plan.document.name, options.imds),
        comment: "hostkeyctl deliver".to_owned(),
        max_concurrency: options.max_concurrency.clone(),
        max_errors: options.max_errors.clone(),
        execution_timeout: options.timeout,
    };
    let deadline = Instant::now() + options.timeout;
    let ids: Vec<String> = plan.instances.iter().map(|i| i.instance_id.clone()).collect();
    let mut commands = Vec::new();
    let mut not_sent = "not sent".to_owned();
    for batch in ids.chunks(dispatch::MAX_IDS_PER_COMMAND) {
        let batch_spec = CommandSpec {
            max_concurrency: dispatch::per_batch(&spec.max_concurrency, batch.len(), ids.len(), true),
            max_errors: dispatch::per_batch(&spec.max_errors, batch.len(), ids.len(), false),
            ..spec.clone()
        };
        match dispatcher.send(&batch_spec, batch).await {
            Ok(sent) => commands.extend(sent),
            Err(e) if commands.is_empty() => return Err(DeliverError::Aws(e)),
            Err(e) => {
                not_sent = format!("not sent: {e}");
                break;
            }
        }
    }
    let (states, _) = dispatcher.wait(&commands, deadline, progress).await?;
    for (command_id, ids) in &commands {
        if ids.iter().any(|id| states.get(id).is_none_or(|s| !s.is_final())) {
            tracing::warn!("command {} did not finish in time; cancelling it", escape(command_id));
            if let Err(e) = dispatcher.cancel(command_id).await {
                tracing::warn!("could not cancel {}: {}", escape(command_id), escape(&e.to_string()));
            }
        }
    }
    let results = plan
        .instances
        .iter()
        .map(|i| node_result(i, states.get(&i.instance_id), &plan.builds, &not_sent))
        .collect();
    Ok(DeliverOutcome {
        document: plan.document.clone(),
        builds: plan.builds.clone(),
        command_ids: commands.into_iter().map(|(id, _)| id).collect(),
        results,
    })
}

impl DeliverOutcome {
    /// For people: one line per node, then the sum.
    pub fn text(&self) -> String {
        let mut table = crate::output::table(&["INSTANCE", "NAME", "STATUS", "RESULT", "VERSION", "METADATA", "ERROR"]);
        for r in &self.results {
            crate::output::add_row(
                &mut table,
                vec![
                    r.instance_id.clone(),
                    r.name.clone().unwrap_or_default(),
                    r.status.clone(),
                    r.result.clone().unwrap_or_default(),
                    r.version.clone().unwrap_or_default(),
                    match r.imds {
                        Some(crate::imds_guard::Access::RootOnly) => "root only".to_owned(),
                        Some(crate::imds_guard::Access::Open) => "OPEN".to_owned(),
                        Some(_) => "unknown".to_owned(),
                        None => String::new(),
                    },
                    r.error.clone().unwrap_or_default(),
                ],
            );
        }
        let ok = self.results.iter().filter(|r| r.ok).count();
        let mut out = format!("{table}\n");
        out.push_str(&format!(
            "{ok} of {} node(s) run the pinned build ({}), through {}\n",
            self.results.len(),
            self.builds.location,
            self.document
        ));
        if ok < self.results.len() {
            out.push_str("Each failed node keeps what it had; its ERROR says why. Run deliver again once it is fixed: nodes already done answer \"unchanged\".\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::node_result;
    use crate::discovery::Instance;
    use crate::dispatch::Invocation;
    use crate::ssm_document::setup::{Arch, NodeBuilds};

    fn instance() -> Instance {
        Instance {
            instance_id: "i-0123456789abcdef0".to_owned(),
            private_ip: Some("10.0.0.1".to_owned()),
            name: Some("login-1".to_owned()),
            clusters: Vec::new(),
        }
    }

    fn inv(status: &str, stdout: &str, stderr: &str) -> Invocation {
        Invocation {
            instance_id: "i-0123456789abcdef0".to_owned(),
            command_id: "c".to_owned(),
            status: status.to_owned(),
            response_code: Some(i32::from(status != "Success")),
            stdout: stdout.to_owned(),
            stderr: stderr.to_owned(),
        }
    }

    #[test]
    fn a_node_is_done_only_with_the_pinned_build_in_its_report() {
        let builds = NodeBuilds {
            location: "s3://my-bucket/hk".parse().unwrap(),
            pins: [(Arch::X86_64, "a".repeat(64))].into(),
        };
        let line = |sha: &str| {
            format!(
                "{{\"schema\":\"hostkeyctl-setup/v1\",\"result\":\"installed\",\"path\":\"/usr/local/bin/hostkeyctl\",\"arch\":\"x86_64\",\"sha256\":\"{sha}\",\"version\":\"hostkeyctl 0.1.0\"}}"
            )
        };
        let good = node_result(
            &instance(),
            Some(&inv("Success", &line(&"a".repeat(64)), "")),
            &builds,
            "",
        );
        assert!(good.ok && good.error.is_none(), "{good:?}");
        assert_eq!(good.version.as_deref(), Some("hostkeyctl 0.1.0"));
        let other = node_result(
            &instance(),
            Some(&inv("Success", &line(&"b".repeat(64)), "")),
            &builds,
            "",
        );
        assert!(!other.ok, "{other:?}");
        let failed = node_result(
            &instance(),
            Some(&inv(
                "Failed",
                "",
                "hostkeyctl-setup: hostkeyctl-x86_64 in the bucket has SHA-256 c",
            )),
            &builds,
            "",
        );
        assert!(!failed.ok && failed.error.unwrap().contains("in the bucket has SHA-256"));
        let unsent = node_result(&instance(), None, &builds, "not sent: throttled");
        assert_eq!(
            (unsent.status.as_str(), unsent.error.as_deref()),
            ("NotSent", Some("not sent: throttled"))
        );
    }
}
