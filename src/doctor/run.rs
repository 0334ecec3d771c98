//! The doctor's flow ([`Doctor`]): each check over the outside systems, a
//! failing call becoming that check's finding.

use super::*;

use serde::Serialize;

use crate::aws_error::AwsError;
use crate::discovery::{Fleet, Instance, TargetSpec};
use crate::dispatch::Dispatcher;
use crate::escape::escape;
use crate::ids::{Program, SecretId};
use crate::rotation::scheduled::function::FunctionConfig;
use crate::ssm_document::{Kind, ResolveError, Trust, resolve};
use crate::store::SecretStore;

/// The schema of the JSON report.
pub const DOCTOR_SCHEMA: &str = "hostkeyctl-doctor/v1";

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// As it should be.
    Ok,
    /// Works, but not as it should stay (an older release on a node, no
    /// setup document).
    Warn,
    /// Something a command of the set-up will fail on.
    Fail,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What was checked: `secret`, `document`, `setup`, `targets`, `ssm`,
    /// `balancer`, `node`, `imds`.
    pub check: &'static str,
    /// Of what: a document's name, an instance id, the secret.
    pub subject: String,
    /// How it is.
    pub level: Level,
    /// What was found.
    pub message: String,
    /// What to do, when not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub(super) fn ok(check: &'static str, subject: impl Into<String>, message: impl Into<String>) -> Self {
        Finding {
            check,
            subject: subject.into(),
            level: Level::Ok,
            message: message.into(),
            fix: None,
        }
    }

    pub(super) fn bad(
        check: &'static str,
        level: Level,
        subject: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Finding {
            check,
            subject: subject.into(),
            level,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }

    /// A call that failed with `error`: a failure, in the error's words
    /// (escaped).
    pub(super) fn failed(
        check: &'static str,
        subject: impl Into<String>,
        error: &impl std::fmt::Display,
        fix: impl Into<String>,
    ) -> Self {
        Finding::bad(check, Level::Fail, subject, escape(&error.to_string()), fix)
    }
}

/// A node as findings name it: its id, and its Name tag.
pub(super) fn subject_of(instance: &Instance) -> String {
    match &instance.name {
        Some(name) => format!("{} ({})", instance.instance_id, escape(name)),
        None => instance.instance_id.clone(),
    }
}

/// What doctor found.
#[derive(Clone, Debug, Serialize)]
pub struct Diagnosis {
    /// [`DOCTOR_SCHEMA`].
    pub schema: &'static str,
    /// The secret looked at.
    pub secret: String,
    /// Every finding, in the order checked.
    pub findings: Vec<Finding>,
}

impl Diagnosis {
    /// The worst level found.
    pub fn worst(&self) -> Level {
        self.findings.iter().map(|f| f.level).max().unwrap_or(Level::Ok)
    }
}

impl crate::exit::ExitStatus for Diagnosis {
    /// As audit's: 0 when nothing fails (warnings are printed), 1 when
    /// something does.
    fn status(&self) -> crate::exit::Status {
        if self.worst() == Level::Fail {
            crate::exit::Status::Drift
        } else {
            crate::exit::Status::Success
        }
    }
}

/// What to diagnose.
#[derive(Clone, Copy, Debug)]
pub struct DoctorRequest<'a> {
    /// The secret.
    pub secret: &'a SecretId,
    /// The nodes.
    pub targets: &'a [TargetSpec],
    /// How the nodes call hostkeyctl (the documents' content depends on it).
    pub node_command: &'a Program,
    /// `--allow-other-clusters`.
    pub allow_other_clusters: bool,
    /// `--target-group`: the load balancer's target group.
    pub target_group: Option<&'a crate::admission::GroupSpec>,
    /// The SSH port (the listener's, for `lb:`).
    pub port: u16,
    /// `--stack`: whose admission and enrolment functions to read.
    pub stack: Option<&'a str>,
}

/// The outside systems doctor reads.
pub struct Doctor<'a, S, F, D, M, B, L> {
    /// The secret store.
    pub store: &'a S,
    /// Where the nodes are found.
    pub fleet: &'a F,
    /// SSM's documents and Run Command (the check document only).
    pub dispatcher: &'a D,
    /// SSM's registrations.
    pub managed: &'a M,
    /// The load balancer's target groups.
    pub balancers: &'a B,
    /// The functions' configuration.
    pub functions: &'a L,
}

impl<S, F, D, M, B, L> Doctor<'_, S, F, D, M, B, L>
where
    S: SecretStore,
    F: Fleet,
    D: Dispatcher,
    M: crate::dispatch::ManagedInstances,
    B: crate::admission::Balancers,
    L: FunctionConfig,
{
    /// Every check, in order; an AWS error on one check is that check's
    /// finding, never the end of the others.
    pub async fn diagnose(&self, req: &DoctorRequest<'_>) -> Diagnosis {
        let mut findings = Vec::new();
        let expected = self.secret(req, &mut findings).await;
        self.unattended(req, &mut findings).await;
        if req.targets.iter().any(|t| matches!(t, TargetSpec::HyperPod { .. })) {
            self.hyperpod(req, &mut findings).await;
            return Diagnosis {
                schema: DOCTOR_SCHEMA,
                secret: req.secret.to_string(),
                findings,
            };
        }
        let check_document = self.documents(req, &mut findings).await;
        self.setup(&mut findings).await;
        let instances = self.targets(req, &mut findings).await;
        let online = self.registered(&instances, &mut findings).await;
        if let Some(spec) = balancer::group_of(req.target_group, req.targets) {
            self.balancer(&spec, req.port, &instances, &mut findings).await;
        }
        match (check_document, expected) {
            (Some(document), Some(fps)) if !online.is_empty() => {
                self.nodes(&document, &fps, &online, &mut findings).await;
            }
            (None, _) if !online.is_empty() => findings.push(Finding::bad(
                "node",
                Level::Warn,
                "every node",
                "not looked at: the check document cannot be sent",
                "deploy hostkeyctl's documents (above), then run doctor again",
            )),
            (_, None) if !online.is_empty() => findings.push(Finding::bad(
                "node",
                Level::Warn,
                "every node",
                "not looked at: the secret's fingerprints are not known",
                "fix the secret (above), then run doctor again",
            )),
            _ => {}
        }
        Diagnosis {
            schema: DOCTOR_SCHEMA,
            secret: req.secret.to_string(),
            findings,
        }
    }

    /// The secret: readable, its fingerprint tags, its Cluster tag. Its
    /// fingerprints, when known, and its tags.
    async fn secret(&self, req: &DoctorRequest<'_>, out: &mut Vec<Finding>) -> Option<Vec<String>> {
        let subject = req.secret.to_string();
        // The secret as the fix lines' commands take it.
        let quoted = crate::shell::quote(&subject).unwrap_or_else(|_| subject.clone());
        let info = match self.store.describe(req.secret).await {
            Ok(info) => info,
            Err(e) => {
                out.push(Finding::failed(
                    "secret",
                    subject,
                    &e,
                    "create it with `hostkeyctl init`, or give the secret's name or ARN as the admin role reads it",
                ));
                return None;
            }
        };
        let fps = match crate::audit::expected::tags_of(&info) {
            Ok(Some((expected, _))) => {
                let fps: Vec<String> = expected.by_type.values().map(ToString::to_string).collect();
                out.push(Finding::ok(
                    "secret",
                    subject.clone(),
                    format!(
                        "holds a key set; AWSCURRENT's {} fingerprint(s) are in its tags",
                        fps.len()
                    ),
                ));
                Some(fps)
            }
            Ok(None) | Err(_) => {
                out.push(Finding::bad(
                    "secret",
                    Level::Fail,
                    subject.clone(),
                    "its hostkeyctl:fp:* tags do not name AWSCURRENT's keys, so audits and nodes cannot be checked",
                    format!("`hostkeyctl status --secret-id {quoted}` says why; a rotation left half-done: `hostkeyctl rotate --resume`"),
                ));
                None
            }
        };
        match crate::discovery::scope::secret_cluster(&info.tags) {
            Some(cluster) => out.push(Finding::ok(
                "secret",
                subject,
                format!("Cluster tag {}: targets are kept to that cluster", escape(cluster)),
            )),
            None => out.push(Finding::bad(
                "secret",
                Level::Warn,
                subject.clone(),
                "no Cluster tag: tag targets cannot be kept to one cluster",
                format!(
                    "aws secretsmanager tag-resource --secret-id {quoted} --tags Key=Cluster,Value=CLUSTER (the nodes' Cluster or parallelcluster:cluster-name tag)"
                ),
            )),
        }
        fps
    }

    /// hostkeyctl's three documents: deployed, and pinned by their hash.
    /// The check document, when it may be sent.
    async fn documents(
        &self,
        req: &DoctorRequest<'_>,
        out: &mut Vec<Finding>,
    ) -> Option<crate::ssm_document::SentDocument> {
        let mut check = None;
        for kind in [Kind::Install, Kind::Check, Kind::Converge] {
            let name = kind.default_name();
            let use_ = match kind {
                Kind::Install => "push and rotate send it",
                Kind::Check => "audit --via-ssm and doctor send it",
                Kind::Converge => "association deploy runs it",
            };
            match resolve(self.dispatcher, name, kind, req.node_command).await {
                Ok(Some(document)) if document.trust == Trust::Pinned => {
                    out.push(Finding::ok(
                        "document",
                        name,
                        format!(
                            "version {} is this hostkeyctl's ({use_})",
                            escape(document.version.as_deref().unwrap_or("?"))
                        ),
                    ));
                    if kind == Kind::Check {
                        check = Some(document);
                    }
                }
                Ok(_) => out.push(Finding::bad(
                    "document",
                    Level::Fail,
                    name,
                    format!("not deployed in this account and region: {use_}, and would refuse"),
                    "deploy the stack (docs/iam.md), or `hostkeyctl ssm-document deploy`",
                )),
                Err(ResolveError::Tampered { version, found, .. }) => out.push(Finding::bad(
                    "document",
                    Level::Fail,
                    name,
                    format!(
                        "version {version} (SHA-256 {found}) is not this hostkeyctl's: someone changed it, or another release deployed it"
                    ),
                    "compare with `hostkeyctl ssm-document print`, then `hostkeyctl ssm-document deploy` (or update the stack)",
                )),
                Err(e) => out.push(Finding::failed(
                    "document",
                    name,
                    &e,
                    "the admin policy (iam/admin.json) allows ssm:DescribeDocument on it",
                )),
            }
        }
        check
    }

    /// The setup document: what it pins, or that nodes without hostkeyctl
    /// cannot get it.
    async fn setup(&self, out: &mut Vec<Finding>) {
        let name = crate::ssm_document::setup::SETUP_NAME;
        match crate::rollout::deliver::settle_setup(self.dispatcher, name).await {
            Ok((document, builds)) => {
                let pins: Vec<String> = builds
                    .pins
                    .iter()
                    .map(|(arch, sha)| format!("{} ({}…)", builds.location.uri(*arch), sha.get(..12).unwrap_or(sha)))
                    .collect();
                out.push(Finding::ok(
                    "setup",
                    name,
                    format!(
                        "version {} pins {}",
                        escape(document.version.as_deref().unwrap_or("?")),
                        pins.join(", ")
                    ),
                ));
            }
            Err(crate::rollout::deliver::DeliverError::NotDeployed { .. }) => out.push(Finding::bad(
                "setup",
                Level::Warn,
                name,
                "not deployed: a node without hostkeyctl cannot get it through SSM",
                "`hostkeyctl ssm-document deploy-setup --builds DIR --builds-at s3://BUCKET/PREFIX` (docs/install.md, \"Running nodes\"), unless every node gets hostkeyctl from its image, lifecycle step or custom action",
            )),
            Err(e) => out.push(Finding::failed(
                "setup",
                name,
                &e,
                "`hostkeyctl ssm-document deploy-setup` from the builds you uploaded",
            )),
        }
    }

    /// The rotation function the secret's schedule calls, and with
    /// The secret's tags (its Cluster tag scopes the targets); none when
    /// it cannot be read (the secret's finding says why).
    pub(super) async fn secret_tags(&self, secret: &SecretId) -> Vec<(String, String)> {
        self.store.describe(secret).await.map(|i| i.tags).unwrap_or_default()
    }

    /// `--stack`, the stack's admission and enrolment functions.
    async fn unattended(&self, req: &DoctorRequest<'_>, out: &mut Vec<Finding>) {
        let Ok(info) = self.store.describe(req.secret).await else {
            return; // the secret's finding says why
        };
        match info.rotation.lambda_arn.as_deref().filter(|_| info.rotation.enabled) {
            None => out.push(Finding::ok(
                "function",
                "rotation",
                "not rotated on a schedule (`hostkeyctl schedule enable`, docs/rotation.md)",
            )),
            Some(function) => {
                let r = functions::rotation(&info, function, self.functions.environment(function).await);
                let scoped = if r.finding.level == Level::Ok && !r.targets.iter().any(TargetSpec::is_source) {
                    match self.fleet.discover(&r.targets).await {
                        Ok(found) => {
                            crate::discovery::scope::check(&info.tags, &r.targets, &found, r.allow_other_clusters)
                                .err()
                                .map(|e| escape(&e.to_string()))
                        }
                        Err(e) => Some(escape(&e.to_string())),
                    }
                } else {
                    None
                };
                match scoped {
                    Some(why) => out.push(Finding::bad(
                        "function",
                        Level::Fail,
                        r.finding.subject,
                        format!("its rotate --target: {why}"),
                        "name the secret's cluster in HOSTKEYCTL_ROTATE_ARGS's --target (the stack's RotationArgs)",
                    )),
                    None => out.push(r.finding),
                }
            }
        }
        if let Some(stack) = req.stack {
            for kind in ["admission", "enrolment"] {
                let function = format!("hostkeyctl-{kind}-{stack}");
                let env = self.functions.environment(&function).await;
                out.push(functions::stack_function(&info, kind, &function, env));
            }
        }
    }

    /// The target group users reach the nodes through.
    pub(super) async fn balancer(
        &self,
        spec: &crate::admission::GroupSpec,
        port: u16,
        nodes: &[Instance],
        out: &mut Vec<Finding>,
    ) {
        match self.balancers.settings(spec, port).await {
            // Nodes not found (their own finding says why) are no reason
            // to call every target a stranger.
            Ok(settings) => out.extend(balancer::judge(&settings, Some(nodes).filter(|n| !n.is_empty()), port)),
            // What doctor may not read, or cannot judge (an lb: whose
            // listener forwards to several groups), is not a broken set-up.
            Err(
                e @ (crate::discovery::DiscoveryError::Aws(AwsError::AccessDenied { .. })
                | crate::discovery::DiscoveryError::Malformed(_)),
            ) => out.push(Finding::bad(
                "balancer",
                Level::Warn,
                spec.to_string(),
                format!("cannot tell: {}", escape(&e.to_string())),
                "name one group with --target-group tg:ARN; the admin policy (iam/admin.json) reads target groups and their attributes",
            )),
            Err(e) => out.push(Finding::failed(
                "balancer",
                spec.to_string(),
                &e,
                "check --target-group: `aws elbv2 describe-target-groups` lists them",
            )),
        }
    }

    /// The targets: found, and inside the secret's cluster.
    async fn targets(&self, req: &DoctorRequest<'_>, out: &mut Vec<Finding>) -> Vec<Instance> {
        let shown: Vec<String> = req.targets.iter().map(ToString::to_string).collect();
        let subject = shown.join(" and ");
        let instances = match self.fleet.discover(req.targets).await {
            Ok(found) => found,
            Err(e) => {
                out.push(Finding::failed(
                    "targets",
                    subject,
                    &e,
                    "check the targets and the admin policy's ec2:DescribeInstances",
                ));
                return Vec::new();
            }
        };
        if instances.is_empty() {
            out.push(Finding::bad(
                "targets",
                Level::Fail,
                subject,
                "no running instance matches",
                "every --target must match (they are ANDed): check the nodes' tags with `aws ec2 describe-instances`",
            ));
            return instances;
        }
        let tags = self.secret_tags(req.secret).await;
        match crate::discovery::scope::check(&tags, req.targets, &instances, req.allow_other_clusters) {
            Ok(()) => out.push(Finding::ok(
                "targets",
                subject,
                format!("{} running instance(s), all in the secret's cluster", instances.len()),
            )),
            Err(e) => out.push(Finding::failed(
                "targets",
                subject,
                &e,
                "add the cluster's tag to --target (tag:Cluster=NAME or tag:parallelcluster:cluster-name=NAME)",
            )),
        }
        instances
    }
}
