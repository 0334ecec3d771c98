//! Admission's flow: who is where, what each node serves, what to admit,
//! hold or drain within the limits, and the calls that do it.

use super::*;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use serde::Serialize;

use crate::audit::{self, Expected};
use crate::aws_error::AwsError;
use crate::discovery::{DiscoveryError, Fleet, Target, TargetSpec};
use crate::exit::Status;
use crate::ids::SecretId;
use crate::scan::{Endpoint, Prober, ScanPolicy, Scanner};
use crate::store::{SecretStore, StoreError};

/// An Auto Scaling group's launch lifecycle hook.
pub trait LifecycleHooks: Sync {
    /// The group's instances waiting in `Pending:Wait`.
    fn waiting(&self, group: &str) -> impl Future<Output = Result<Vec<String>, AwsError>> + Send;
    /// Completes `instance_id`'s action on `hook` with `CONTINUE`: it goes
    /// InService.
    fn proceed(&self, group: &str, hook: &str, instance_id: &str) -> impl Future<Output = Result<(), AwsError>> + Send;
}

/// `--auto-scaling-group` and `--lifecycle-hook`: whose launching
/// instances go InService only once they serve the set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lifecycle {
    /// The Auto Scaling group.
    pub group: String,
    /// Its `autoscaling:EC2_INSTANCE_LAUNCHING` hook.
    pub hook: String,
}

/// Why admission could not run.
#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    /// The set's fingerprints could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The cluster or the target group could not be read.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// The targets reach another cluster's instances.
    #[error(transparent)]
    Scope(#[from] crate::discovery::scope::ScopeError),
    /// Registering or deregistering failed; says what was done before.
    #[error("{error}{}", if done.is_empty() { String::new() } else { format!(" (already done: {done})") })]
    Apply {
        /// ELB's refusal.
        error: AwsError,
        /// What went through before it.
        done: String,
    },
    /// Auto Scaling refused or could not be reached.
    #[error(transparent)]
    Aws(AwsError),
    /// The request does not make sense; says why and what to do.
    #[error("{0}")]
    Refused(String),
}

impl crate::exit::ExitStatus for AdmissionError {
    /// The cause's status; refusals 2.
    fn status(&self) -> Status {
        match self {
            AdmissionError::Store(s) => s.status(),
            AdmissionError::Discovery(d) => d.status(),
            AdmissionError::Apply { error, .. } | AdmissionError::Aws(error) => error.status(),
            AdmissionError::Refused(_) | AdmissionError::Scope(_) => Status::Usage,
        }
    }
}

/// What to admit, and where.
#[derive(Clone, Debug)]
pub struct AdmissionRequest {
    /// The fleet's secret: the set nodes must serve.
    pub secret: SecretId,
    /// The target group to keep.
    pub group: GroupSpec,
    /// The cluster's nodes (tag:, instance ids, hyperpod:).
    pub cluster: Vec<TargetSpec>,
    /// The nodes' sshd port, and the listener's for `lb:`.
    pub port: u16,
    /// `--max-drain`; by default a third of the targets in service.
    pub max_drain: Option<usize>,
    /// Decide and report, change nothing.
    pub dry_run: bool,
    /// `--allow-other-clusters` ([`crate::discovery::scope`]).
    pub allow_other_clusters: bool,
    /// Complete the launch hook of the group's waiting instances that
    /// serve the set.
    pub lifecycle: Option<Lifecycle>,
}

/// Refusals that follow from the request alone, before any AWS call.
pub fn check(req: &AdmissionRequest) -> Result<(), AdmissionError> {
    if req.cluster.is_empty() {
        return Err(AdmissionError::Refused(
            "name the cluster's nodes with --target (hyperpod:CLUSTER/GROUP, tag:KEY=VALUE or instance ids): admission compares them with the target group".to_owned(),
        ));
    }
    if let Some(source) = req
        .cluster
        .iter()
        .find(|s| matches!(s, TargetSpec::LoadBalancer(_) | TargetSpec::TargetGroup(_)))
    {
        return Err(AdmissionError::Refused(format!(
            "--target {source} names the load balancer's targets, not the cluster's nodes: give the cluster (hyperpod:, tag:, instance ids) as --target and the target group as --target-group"
        )));
    }
    if req.max_drain == Some(0) {
        tracing::info!("--max-drain 0: nothing is drained or removed in this run");
    }
    if let Some(note) = membership_note(&req.cluster) {
        tracing::warn!("{note}");
    }
    Ok(())
}

/// What to say when the cluster's nodes are known by tags alone that
/// anyone with `ec2:CreateTags` may write: such a tag cannot take a node
/// serving the set out of service (it is kept), but it can hold a new
/// node out. HyperPod's record and the `aws:` tag only Auto Scaling
/// writes cannot be changed that way.
pub fn membership_note(cluster: &[TargetSpec]) -> Option<String> {
    let forgeable = |s: &TargetSpec| matches!(s, TargetSpec::Tag { key, .. } if !key.starts_with("aws:"));
    let ids_or_record = cluster.iter().any(|s| !forgeable(s));
    (!ids_or_record && !cluster.is_empty()).then(|| {
        format!(
            "{} is known by tags that whoever may tag instances (ec2:CreateTags) can change: a node serving the set is kept whatever its tags, but prefer the cluster's own record: hyperpod:CLUSTER/GROUP, or tag:aws:autoscaling:groupName=GROUP (only Auto Scaling writes aws: tags)",
            crate::discovery::describe_specs(cluster)
        )
    })
}

/// The admission's outcome (`--output json`, schema `hostkeyctl-admission/v1`).
#[derive(Debug, Serialize)]
pub struct AdmissionReport {
    /// `hostkeyctl-admission/v1`.
    pub schema: &'static str,
    /// Where the expected set came from.
    pub expected_source: String,
    /// The target group.
    pub target_group: Group,
    /// The cluster, as given.
    pub cluster: Vec<String>,
    /// The limits applied.
    pub limits: Limits,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// Per node and target, in name order (cluster nodes first).
    pub nodes: Vec<NodePlan>,
    /// Target ids registered in this run.
    pub registered: Vec<String>,
    /// Target ids deregistered in this run.
    pub deregistered: Vec<String>,
    /// What AWS refused while applying (each call is tried; exit 4).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Counts by decision.
    pub summary: BTreeMap<Decision, usize>,
    /// The exit code.
    pub exit_code: u8,
}

impl AdmissionReport {
    /// Exit 4 when AWS refused a change; 3 when the limits held a drain
    /// back, a cluster node could not be checked, is still catching up
    /// with a promotion, or is a target the load balancer does not use; 1 when a cluster node serves other keys (held out
    /// or drained); 3 for a dry run with changes to make; else 0: the
    /// audit's codes.
    pub fn status(&self) -> Status {
        let any = |f: &dyn Fn(&NodePlan) -> bool| self.nodes.iter().any(f);
        if !self.errors.is_empty() {
            return Status::Aws;
        }
        if any(&|p| p.decision == Decision::HeldBack) {
            return Status::Incomplete;
        }
        // A stranger kept because it serves the set: someone looks (one
        // draining is on its way out).
        if any(&|p| {
            !p.observed.member
                && p.decision == Decision::Keep
                && p.observed.target_state.as_deref().is_some_and(|s| s != "draining")
        }) {
            return Status::Incomplete;
        }
        if any(&|p| p.observed.member && matches!(p.observed.serving, Serving::Other(_))) {
            return Status::Drift;
        }
        // A node registered where the load balancer sends nobody: someone
        // enables its zone (or starts it).
        if any(&|p| p.observed.member && p.observed.target_state.as_deref() == Some("unused")) {
            return Status::Incomplete;
        }
        if any(&|p| {
            p.observed.member
                && matches!(
                    p.observed.serving,
                    Serving::Unknown(_) | Serving::NotAsked | Serving::Promoting(_)
                )
        }) {
            return Status::Incomplete;
        }
        // A dry run with changes to make: the group is not what it should be.
        if self.dry_run && any(&|p| p.decision.changes()) {
            return Status::Incomplete;
        }
        Status::Success
    }

    /// The table an operator reads.
    pub fn table(&self, width: Option<u16>) -> String {
        text::table(self, width)
    }
}

/// The admission flow over its outside systems.
pub struct Admission<'a, S, F, G, H, P> {
    /// Where the set's fingerprints are read.
    pub store: &'a S,
    /// Where the cluster's nodes are found.
    pub fleet: &'a F,
    /// The target groups.
    pub groups: &'a G,
    /// Auto Scaling's launch hooks (needed by `lifecycle` requests only).
    pub hooks: Option<&'a H>,
    /// The handshakes.
    pub prober: Arc<P>,
    /// How to scan.
    pub policy: ScanPolicy,
}

impl<S: SecretStore, F: Fleet, G: TargetGroups, H: LifecycleHooks, P: Prober> Admission<'_, S, F, G, H, P> {
    /// Observes, decides and (unless a dry run) applies, once.
    pub async fn run(&self, req: &AdmissionRequest) -> Result<AdmissionReport, AdmissionError> {
        check(req)?;
        // The public fingerprints alone: admission never reads a private key.
        // One DescribeSecret: the fingerprint tags and the cluster's tag.
        let secret = self.store.describe(&req.secret).await?;
        let (expected, expected_source) = audit::expected::tags_of(&secret)?
            .ok_or_else(|| {
                AdmissionError::Refused(format!(
                    "the fingerprint tags of {} are missing or not of its AWSCURRENT version, and admission reads nothing else (never a private key): `hostkeyctl rotate --resume` or `sign` writes them again",
                    req.secret
                ))
            })?;
        let group = self.groups.group(&req.group, req.port).await?;
        let nodes = self.fleet.targets(&req.cluster).await?;
        crate::discovery::scope::check_targets(&secret.tags, &req.cluster, &nodes, req.allow_other_clusters)?;
        let observed = self.observe(req, &group, nodes, &expected).await?;
        // Draining targets count: the limit does not shrink run by run.
        let in_service = observed
            .iter()
            .filter(|o| o.target_state.as_deref().is_some_and(|s| s != "unused"))
            .count();
        let limits = req.max_drain.map_or_else(
            || Limits::default_for(in_service),
            |max_drain| Limits {
                max_drain,
                ..Limits::default_for(in_service)
            },
        );
        let limits = Limits {
            keep_strangers_serving: membership_note(&req.cluster).is_some(),
            ..limits
        };
        let waiting = match (&req.lifecycle, self.hooks) {
            (Some(l), Some(hooks)) => hooks.waiting(&l.group).await.map_err(AdmissionError::Aws)?,
            (Some(_), None) => return Err(AdmissionError::Refused("no Auto Scaling client".to_owned())),
            (None, _) => Vec::new(),
        };
        let mut nodes = decide(observed, limits);
        let ids = |want: &[Decision]| -> Vec<String> {
            let mut ids: Vec<String> = nodes
                .iter()
                .filter(|p| want.contains(&p.decision))
                .map(|p| p.observed.target_id.clone())
                .collect();
            ids.dedup();
            ids
        };
        let registered = ids(&[Decision::Admit]);
        let leaving = deregistrations(&nodes);
        let deregistered: Vec<String> = leaving
            .iter()
            .map(|(id, port)| port.map_or_else(|| id.clone(), |p| format!("{id}:{p}")))
            .collect();
        let (mut errors, mut refused) = (Vec::new(), false);
        if !req.dry_run {
            (errors, refused) = self.apply(&group, &registered, &leaving).await;
        }
        if let Some(l) = &req.lifecycle {
            // A registration refused leaves its instances waiting: a hook
            // completes only for an instance that is a target.
            let unregistered = if refused { registered.as_slice() } else { &[] };
            self.launch_hooks(l, &waiting, unregistered, &mut nodes, req.dry_run, &mut errors)
                .await;
        }
        let mut summary = BTreeMap::new();
        for p in &nodes {
            *summary.entry(p.decision).or_insert(0) += 1;
        }
        let mut report = AdmissionReport {
            schema: "hostkeyctl-admission/v1",
            expected_source,
            target_group: group,
            cluster: req.cluster.iter().map(ToString::to_string).collect(),
            limits,
            dry_run: req.dry_run,
            nodes,
            registered,
            deregistered,
            errors,
            summary,
            exit_code: 0,
        };
        report.exit_code = report.status().code();
        Ok(report)
    }

    /// Registers first (a node serving the set takes users before any
    /// leaves), then deregisters each (target, port) decided; a refusal of
    /// one is reported and the other is still tried (each was decided
    /// within the limits on its own). Returns the errors, and whether the
    /// registration was refused.
    async fn apply(
        &self,
        group: &Group,
        register: &[String],
        deregister: &[(String, Option<u16>)],
    ) -> (Vec<String>, bool) {
        let (mut errors, mut refused) = (Vec::new(), false);
        if !register.is_empty() {
            match self.groups.register(group, register).await {
                Ok(()) => tracing::info!("registered {} in target group {}", register.join(", "), group.name),
                Err(e) => {
                    errors.push(format!("registering {}: {e}", register.join(", ")));
                    refused = true;
                }
            }
        }
        if !deregister.is_empty() {
            let named: Vec<&str> = deregister.iter().map(|(id, _)| id.as_str()).collect();
            match self.groups.deregister(group, deregister).await {
                Ok(()) => tracing::info!("deregistered {} from target group {}", named.join(", "), group.name),
                Err(e) => errors.push(format!("deregistering {}: {e}", named.join(", "))),
            }
        }
        (errors, refused)
    }

    /// The launch hook of each waiting instance: completed (`CONTINUE`)
    /// once it serves the set, after its registration (one refused this
    /// pass leaves it waiting for the next); else left to run out (the
    /// hook's default result, `ABANDON` as docs/admission.md advises,
    /// terminates it).
    async fn launch_hooks(
        &self,
        lifecycle: &Lifecycle,
        waiting: &[String],
        unregistered: &[String],
        nodes: &mut [NodePlan],
        dry_run: bool,
        errors: &mut Vec<String>,
    ) {
        let Some(hooks) = self.hooks else { return };
        for plan in nodes.iter_mut() {
            let Some(id) = plan.observed.instance_id.clone().filter(|id| waiting.contains(id)) else {
                continue;
            };
            let serves = plan.observed.member
                && plan.observed.serving == Serving::Set
                && matches!(plan.decision, Decision::Admit | Decision::Keep)
                && !unregistered.contains(&plan.observed.target_id);
            plan.lifecycle = Some(match (serves, dry_run) {
                (false, _) => "waiting",
                (true, true) => "would continue",
                (true, false) => match hooks.proceed(&lifecycle.group, &lifecycle.hook, &id).await {
                    Ok(()) => "continued",
                    Err(e) => {
                        errors.push(format!("completing {id}'s launch hook: {e}"));
                        "waiting"
                    }
                },
            });
        }
    }

    /// Every cluster node and every target, with what it serves.
    async fn observe(
        &self,
        req: &AdmissionRequest,
        group: &Group,
        nodes: Vec<Target>,
        expected: &Expected,
    ) -> Result<Vec<Observed>, AdmissionError> {
        if nodes.is_empty() {
            return Err(AdmissionError::Refused(format!(
                "{} matched no node; admission would take every target out of {}: check --target",
                crate::discovery::describe_specs(&req.cluster),
                group.name
            )));
        }
        let hyperpod = req.cluster.iter().any(|s| matches!(s, TargetSpec::HyperPod { .. }));
        if hyperpod && group.by_instance() {
            return Err(AdmissionError::Refused(format!(
                "target group {} takes instance targets, but HyperPod nodes run in a service account and can only be registered by address: use an ip target group",
                group.name
            )));
        }
        let mut observed = who_is_where(group, nodes);
        // Each entry at its registration's port, else --port. Answers go
        // back to entries by position, never by name: names (a Name tag)
        // are neither unique nor the node's to choose.
        let (probed, endpoints): (Vec<usize>, Vec<Endpoint>) = observed
            .iter()
            .enumerate()
            .filter_map(|(i, o)| {
                Some((
                    i,
                    Endpoint {
                        name: o.name.clone(),
                        host: o.address.clone()?,
                        port: o.port.unwrap_or(req.port),
                    },
                ))
            })
            .unzip();
        let findings = audit::check_against(self.prober.clone(), self.policy.clone(), &endpoints, expected).await;
        let mut served: Vec<Serving> = findings.iter().map(|(_, f)| serving_of(f)).collect();
        self.promoting(&mut served, &endpoints, expected).await;
        for (&i, serving) in probed.iter().zip(served) {
            observed[i].serving = serving;
        }
        Ok(observed)
    }

    /// Of the nodes serving other keys, those whose banner names the set
    /// as the extra one they serve: a promotion their install has not
    /// caught up with (the set was the announced one until it became
    /// AWSCURRENT). Told apart from drift by the banner alone, as the
    /// promotion gate tells that a node loaded the announced set.
    async fn promoting(&self, served: &mut [Serving], endpoints: &[Endpoint], expected: &Expected) {
        let Some(algorithm) = expected.by_type.keys().next().copied() else {
            return;
        };
        let (others, asked): (Vec<Endpoint>, Vec<usize>) = endpoints
            .iter()
            .enumerate()
            .filter(|(i, _)| matches!(served[*i], Serving::Other(_)))
            .map(|(i, e)| (e.clone(), i))
            .unzip();
        if others.is_empty() {
            return;
        }
        let marker = crate::keyset::marker_of(expected.by_type.values());
        let scanner = Arc::new(Scanner::new(self.prober.clone(), self.policy.clone()));
        let answers = scanner.greet_nodes(&others, algorithm).await;
        for (&i, answer) in asked.iter().zip(answers) {
            if answer.hello.as_ref().and_then(|h| h.next_marker()) != Some(marker.as_str()) {
                continue;
            }
            if let Serving::Other(what) = &served[i] {
                served[i] = Serving::Promoting(what.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::keyset::{KeyAlgorithm, KeySet, marker_of};

    #[test]
    fn membership_by_tags_anyone_may_write_is_named_and_the_clusters_record_is_not() {
        let spec = |s: &str| s.parse::<crate::discovery::TargetSpec>().unwrap();
        let note = super::membership_note(&[spec("tag:Role=login"), spec("tag:Cluster=hp")]).unwrap();
        assert!(
            note.contains("may tag instances") && note.contains("hyperpod:CLUSTER/GROUP"),
            "{note}"
        );
        for record in [
            vec![spec("hyperpod:hp/login")],
            vec![spec("tag:aws:autoscaling:groupName=login")],
            vec![spec("tag:Role=login"), spec("i-0123456789abcdef0")],
        ] {
            assert_eq!(super::membership_note(&record), None, "{record:?}");
        }
    }

    /// Admission computes the banner word from the fingerprint tags (the
    /// expected set, by scan algorithm); install from the private set.
    /// They must agree, or every node catching up with a promotion would
    /// look drifted and be drained.
    #[test]
    fn the_marker_from_the_tags_is_the_one_install_puts_in_the_banner() {
        let keys = KeySet::generate(&[KeyAlgorithm::Rsa, KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa], 2048).unwrap();
        let expected = crate::audit::expect_keys(&keys);
        assert_eq!(marker_of(expected.by_type.values()), keys.next_marker());
    }
}
