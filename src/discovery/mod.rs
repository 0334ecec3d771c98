//! Fleet discovery: which nodes a `--target` names.
//!
//! Sources: EC2 `DescribeInstances` (`tag:`, instance ids; running
//! instances only), a load balancer's or one target group's registered
//! targets ([`elb`]; `lb:`, `tg:`), and a SageMaker HyperPod cluster's
//! nodes ([`hyperpod`]; audit only: SSM does not reach them). Behind the
//! [`Fleet`] seam, so the flows run against an in-memory fleet too
//! (feature `testing`).

pub mod elb;
#[cfg(feature = "hyperpod")]
pub mod hyperpod;

use std::fmt;
use std::future::Future;
use std::str::FromStr;

use aws_sdk_ec2::types::Filter;

use crate::aws::{AwsError, Call};

/// Whether `s` is a name AWS allows for a load balancer, target group,
/// HyperPod cluster or instance group: letters, digits and inner hyphens.
fn is_resource_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && !s.starts_with('-')
        && !s.ends_with('-')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// Whether `s` is an ARN of `service` whose resource starts with `kind`
/// (`loadbalancer/`, `targetgroup/`, `cluster/`), with no character a
/// shell or a table would treat specially.
fn is_arn(s: &str, service: &str, kind: &str) -> bool {
    let parts: Vec<&str> = s.splitn(6, ':').collect();
    parts.len() == 6
        && parts[0] == "arn"
        && parts[1].starts_with("aws")
        && parts[2] == service
        && parts[5].starts_with(kind)
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_:/.".contains(c))
}

/// One `--target` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TargetSpec {
    /// `tag:KEY=VALUE`.
    Tag {
        /// Tag key.
        key: String,
        /// Tag value.
        value: String,
    },
    /// `i-0123456789abcdef0`.
    InstanceId(String),
    /// `lb:NAME_OR_ARN`: every target of the load balancer's target groups
    /// behind its listener on the SSH port.
    LoadBalancer(String),
    /// `tg:ARN`: every target of one target group.
    TargetGroup(String),
    /// `hyperpod:CLUSTER[/INSTANCE_GROUP]`: a HyperPod cluster's nodes.
    HyperPod {
        /// Cluster name or ARN.
        cluster: String,
        /// Only this instance group.
        group: Option<String>,
    },
}

impl TargetSpec {
    /// Whether the spec names nodes itself (a load balancer, a target group,
    /// a cluster) rather than filtering EC2 instances.
    pub fn is_source(&self) -> bool {
        matches!(
            self,
            TargetSpec::LoadBalancer(_) | TargetSpec::TargetGroup(_) | TargetSpec::HyperPod { .. }
        )
    }
}

const SPEC_HELP: &str = "use tag:KEY=VALUE (e.g. tag:Role=login), an instance id (i-0123456789abcdef0), lb:NAME_OR_ARN, tg:TARGET_GROUP_ARN or hyperpod:CLUSTER[/INSTANCE_GROUP]";

impl FromStr for TargetSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix("tag:") {
            return match rest.split_once('=') {
                Some((key, value)) if !key.is_empty() => Ok(TargetSpec::Tag {
                    key: key.to_owned(),
                    value: value.to_owned(),
                }),
                _ => Err(format!("{s:?}: a tag target is tag:KEY=VALUE, e.g. tag:Role=login")),
            };
        }
        if let Some(rest) = s.strip_prefix("lb:") {
            if is_resource_name(rest, 32) || is_arn(rest, "elasticloadbalancing", "loadbalancer/") {
                return Ok(TargetSpec::LoadBalancer(rest.to_owned()));
            }
            return Err(format!(
                "{s:?}: a load balancer target is lb:NAME (up to 32 letters, digits, hyphens) or lb:ARN"
            ));
        }
        if let Some(rest) = s.strip_prefix("tg:") {
            if is_arn(rest, "elasticloadbalancing", "targetgroup/") {
                return Ok(TargetSpec::TargetGroup(rest.to_owned()));
            }
            return Err(format!(
                "{s:?}: a target group target is tg:ARN (arn:aws:elasticloadbalancing:REGION:ACCOUNT:targetgroup/NAME/ID)"
            ));
        }
        if let Some(rest) = s.strip_prefix("hyperpod:") {
            let (cluster, group) = if rest.starts_with("arn:") {
                // An ARN has slashes of its own: cluster/ID[/GROUP] is not
                // allowed; name the group with the cluster's name instead.
                (rest, None)
            } else {
                match rest.split_once('/') {
                    Some((c, g)) => (c, Some(g)),
                    None => (rest, None),
                }
            };
            let cluster_ok = is_resource_name(cluster, 63) || is_arn(cluster, "sagemaker", "cluster/");
            if cluster_ok && group.is_none_or(|g| is_resource_name(g, 63)) {
                return Ok(TargetSpec::HyperPod {
                    cluster: cluster.to_owned(),
                    group: group.map(str::to_owned),
                });
            }
            return Err(format!(
                "{s:?}: a HyperPod target is hyperpod:CLUSTER or hyperpod:CLUSTER/INSTANCE_GROUP (names of letters, digits, hyphens), or hyperpod:CLUSTER_ARN"
            ));
        }
        if let Some(hex) = s.strip_prefix("i-")
            && (8..=17).contains(&hex.len())
            && hex.chars().all(|c| c.is_ascii_hexdigit())
        {
            return Ok(TargetSpec::InstanceId(s.to_owned()));
        }
        Err(format!("{s:?} is not a target: {SPEC_HELP}"))
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetSpec::Tag { key, value } => write!(f, "tag:{key}={value}"),
            TargetSpec::InstanceId(id) => f.write_str(id),
            TargetSpec::LoadBalancer(lb) => write!(f, "lb:{lb}"),
            TargetSpec::TargetGroup(tg) => write!(f, "tg:{tg}"),
            TargetSpec::HyperPod { cluster, group: None } => write!(f, "hyperpod:{cluster}"),
            TargetSpec::HyperPod {
                cluster,
                group: Some(g),
            } => write!(f, "hyperpod:{cluster}/{g}"),
        }
    }
}

/// `audit --lb`: an address, or a load balancer to look up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LbSpec {
    /// `HOST[:PORT]`, sampled as given.
    Address(crate::hostport::HostPort),
    /// `lb:NAME_OR_ARN`: its DNS name and SSH listener, and its targets as
    /// the backend count.
    LoadBalancer(String),
}

impl FromStr for LbSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim().starts_with("lb:") {
            return match s.parse::<TargetSpec>()? {
                TargetSpec::LoadBalancer(lb) => Ok(LbSpec::LoadBalancer(lb)),
                _ => Err(format!("{s:?} is not lb:NAME_OR_ARN")),
            };
        }
        crate::hostport::HostPort::parse(s.trim())
            .map(LbSpec::Address)
            .map_err(|e| format!("{e}, or lb:NAME_OR_ARN"))
    }
}

/// A discovered instance.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Instance {
    /// Instance id.
    pub instance_id: String,
    /// Private IPv4 address, if any.
    pub private_ip: Option<String>,
    /// The `Name` tag, if any.
    pub name: Option<String>,
}

/// Where a node was found and its state there: a target group's target
/// health, or a HyperPod node's status.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Health {
    /// `target group NAME` or `HyperPod cluster NAME, instance group G`.
    pub source: String,
    /// `healthy`, `unhealthy`, `draining`, `unused`, `initial`, ... or a
    /// HyperPod status (`Running`, `Pending`, `Failure`, ...).
    pub state: String,
    /// Why, when the source says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Health {
    /// Whether the node is not taking part normally (flagged in the audit).
    pub fn is_flagged(&self) -> bool {
        !matches!(self.state.as_str(), "healthy" | "Running")
    }
}

/// A node to audit, as discovery found it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Target {
    /// What to call it: the Name tag, a HyperPod host name, or its id.
    pub name: String,
    /// EC2 (or HyperPod) instance id; none for an IP target.
    pub instance_id: Option<String>,
    /// Private address, if known.
    pub address: Option<String>,
    /// The port the load balancer sends traffic to, when it says.
    pub port: Option<u16>,
    /// Where it was found and its health there.
    pub health: Option<Health>,
}

impl From<Instance> for Target {
    fn from(i: Instance) -> Self {
        Target {
            name: i.name.unwrap_or_else(|| i.instance_id.clone()),
            instance_id: Some(i.instance_id),
            address: i.private_ip,
            port: None,
            health: None,
        }
    }
}

/// Discovery failures.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// EC2 failed.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// Nothing matched.
    #[error("no running instance matches {0}; check the tags and the region (stopped instances are never targeted)")]
    NoMatch(String),
    /// Named instances are not running or do not exist.
    #[error("instance(s) {0} are not running or do not exist in this region")]
    NotRunning(String),
    /// No target at all.
    #[error("no --target given: name the login nodes with --target tag:KEY=VALUE or --target i-...")]
    NoTargets,
    /// The load balancer has no listener on the SSH port.
    #[error(
        "load balancer {lb} has no listener on port {port} (its listeners: {}); pass --port with the SSH listener's port",
        if listeners.is_empty() { "none".to_owned() } else { listeners.join(", ") }
    )]
    NoListener {
        /// The load balancer.
        lb: String,
        /// The port looked for.
        port: u16,
        /// The listeners it has, as PROTOCOL:PORT.
        listeners: Vec<String>,
    },
    /// An answer that cannot lead to login nodes.
    #[error("{0}")]
    Malformed(String),
    /// Node sources (lb:, tg:, hyperpod:) mixed with EC2 filters.
    #[error(
        "{0} names nodes itself and cannot be combined with tag: or instance-id targets; give either node sources (lb:, tg:, hyperpod:) or EC2 filters"
    )]
    Mixed(String),
    /// HyperPod nodes cannot be reached through SSM Run Command.
    #[error(
        "{0}: SSM SendCommand does not reach HyperPod cluster nodes, so push and rotate cannot install there; have the nodes pull their keys instead (lifecycle script and timer: docs/bootstrap.md). `audit --target {0}` checks them"
    )]
    NotPushable(String),
    /// IP targets that are no running EC2 instance of this account.
    #[error(
        "IP target(s) {0} of the load balancer are no running EC2 instance in this region, so SSM cannot reach them; push to the instances with tag: or instance-id targets"
    )]
    UnresolvedIps(String),
    /// hostkeyctl was built without HyperPod support.
    #[error("{0}: this hostkeyctl was built without the `hyperpod` feature; rebuild with default features")]
    NoHyperPod(String),
}

/// Where the login nodes come from.
pub trait Fleet: Sync {
    /// The running EC2 instances the specs name: what SSM can reach.
    fn discover(&self, specs: &[TargetSpec]) -> impl Future<Output = Result<Vec<Instance>, DiscoveryError>> + Send;

    /// The nodes to audit, with their health where the source reports it.
    fn targets(&self, specs: &[TargetSpec]) -> impl Future<Output = Result<Vec<Target>, DiscoveryError>> + Send {
        async move { Ok(self.discover(specs).await?.into_iter().map(Target::from).collect()) }
    }
}

/// The real fleet: EC2, Elastic Load Balancing and SageMaker HyperPod.
#[derive(Clone, Debug)]
pub struct Ec2Fleet {
    ec2: aws_sdk_ec2::Client,
    elb: aws_sdk_elasticloadbalancingv2::Client,
    #[cfg(feature = "hyperpod")]
    sagemaker: aws_sdk_sagemaker::Client,
    port: u16,
}

impl Ec2Fleet {
    /// A fleet read with `config`; `lb:` targets use the listener on port 22.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        Ec2Fleet {
            ec2: aws_sdk_ec2::Client::new(config),
            elb: aws_sdk_elasticloadbalancingv2::Client::new(config),
            #[cfg(feature = "hyperpod")]
            sagemaker: aws_sdk_sagemaker::Client::new(config),
            port: crate::hostport::DEFAULT_PORT,
        }
    }

    /// `lb:` targets use the load balancer's listener on `port`.
    #[must_use]
    pub fn with_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// A load balancer's listener on the SSH port and the targets behind it.
    pub async fn load_balancer(
        &self,
        name_or_arn: &str,
    ) -> Result<(elb::Listener, Vec<elb::GroupTarget>), DiscoveryError> {
        let listener = elb::listener(&self.elb, name_or_arn, self.port).await?;
        let mut targets = Vec::new();
        for group in &listener.target_groups {
            targets.extend(elb::targets(&self.elb, group).await?.1);
        }
        Ok((listener, targets))
    }

    /// The targets of the node sources (lb:, tg:, hyperpod:), in order,
    /// each node once.
    async fn source_targets(&self, specs: &[TargetSpec]) -> Result<Vec<Target>, DiscoveryError> {
        let mut out: Vec<Target> = Vec::new();
        for spec in specs {
            let found = match spec {
                TargetSpec::LoadBalancer(lb) => {
                    let (_, targets) = self.load_balancer(lb).await?;
                    self.group_targets(targets).await?
                }
                TargetSpec::TargetGroup(arn) => self.group_targets(elb::targets(&self.elb, arn).await?.1).await?,
                TargetSpec::HyperPod { cluster, group } => self.hyperpod(spec, cluster, group.as_deref()).await?,
                other => return Err(DiscoveryError::Mixed(other.to_string())),
            };
            for t in found {
                let same =
                    |o: &Target| o.instance_id.is_some() && o.instance_id == t.instance_id || o.address == t.address;
                if !out.iter().any(same) {
                    out.push(t);
                }
            }
        }
        Ok(out)
    }

    #[cfg(feature = "hyperpod")]
    async fn hyperpod(
        &self,
        _spec: &TargetSpec,
        cluster: &str,
        group: Option<&str>,
    ) -> Result<Vec<Target>, DiscoveryError> {
        hyperpod::nodes(&self.sagemaker, cluster, group).await
    }

    #[cfg(not(feature = "hyperpod"))]
    async fn hyperpod(
        &self,
        spec: &TargetSpec,
        _cluster: &str,
        _group: Option<&str>,
    ) -> Result<Vec<Target>, DiscoveryError> {
        Err(DiscoveryError::NoHyperPod(spec.to_string()))
    }

    /// Target-group targets as nodes: instance targets get their address
    /// and Name tag from EC2 (whatever their state: a stopped one is still
    /// reported, flagged by its health).
    async fn group_targets(&self, targets: Vec<elb::GroupTarget>) -> Result<Vec<Target>, DiscoveryError> {
        let ids: Vec<String> = targets.iter().filter(|t| t.is_instance).map(|t| t.id.clone()).collect();
        let known = if ids.is_empty() {
            Vec::new()
        } else {
            describe(
                &self.ec2,
                vec![Filter::builder().name("instance-id").set_values(Some(ids)).build()],
                "instance targets",
            )
            .await?
        };
        Ok(targets
            .into_iter()
            .map(|t| {
                let instance = known.iter().find(|i| t.is_instance && i.instance_id == t.id);
                Target {
                    name: instance.and_then(|i| i.name.clone()).unwrap_or_else(|| t.id.clone()),
                    instance_id: t.is_instance.then(|| t.id.clone()),
                    address: if t.is_instance {
                        instance.and_then(|i| i.private_ip.clone())
                    } else {
                        Some(t.id.clone())
                    },
                    port: t.port,
                    health: Some(t.health),
                }
            })
            .collect())
    }

    /// The running instances behind node sources, for SSM: instance
    /// targets directly, IP targets through their private address.
    async fn source_instances(&self, specs: &[TargetSpec]) -> Result<Vec<Instance>, DiscoveryError> {
        if let Some(hp) = specs.iter().find(|s| matches!(s, TargetSpec::HyperPod { .. })) {
            return Err(DiscoveryError::NotPushable(hp.to_string()));
        }
        let targets = self.source_targets(specs).await?;
        let ids: Vec<String> = targets.iter().filter_map(|t| t.instance_id.clone()).collect();
        let ips: Vec<String> = targets
            .iter()
            .filter(|t| t.instance_id.is_none())
            .filter_map(|t| t.address.clone())
            .collect();
        let running = || Filter::builder().name("instance-state-name").values("running").build();
        let mut found = Vec::new();
        if !ids.is_empty() {
            let filter = Filter::builder()
                .name("instance-id")
                .set_values(Some(ids.clone()))
                .build();
            found.extend(describe(&self.ec2, vec![running(), filter], "instance targets").await?);
            for id in ids
                .iter()
                .filter(|id| !found.iter().any(|f: &Instance| &f.instance_id == *id))
            {
                tracing::warn!("target {id} is not a running instance; skipped (SSM cannot run commands on it)");
            }
        }
        if !ips.is_empty() {
            let filter = Filter::builder()
                .name("private-ip-address")
                .set_values(Some(ips.clone()))
                .build();
            let by_ip = describe(&self.ec2, vec![running(), filter], "IP targets").await?;
            let missing: Vec<&String> = ips
                .iter()
                .filter(|ip| !by_ip.iter().any(|i| i.private_ip.as_ref() == Some(*ip)))
                .collect();
            if !missing.is_empty() {
                return Err(DiscoveryError::UnresolvedIps(
                    missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                ));
            }
            found.extend(by_ip);
        }
        found.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
        found.dedup_by(|a, b| a.instance_id == b.instance_id);
        if found.is_empty() {
            return Err(DiscoveryError::NoMatch(describe_specs(specs)));
        }
        Ok(found)
    }
}

/// Checks that node sources are not mixed with EC2 filters; true when the
/// specs are node sources.
fn sources_only(specs: &[TargetSpec]) -> Result<bool, DiscoveryError> {
    match (
        specs.iter().find(|s| s.is_source()),
        specs.iter().all(TargetSpec::is_source),
    ) {
        (None, _) => Ok(false),
        (Some(_), true) => Ok(true),
        (Some(source), false) => Err(DiscoveryError::Mixed(source.to_string())),
    }
}

impl Fleet for Ec2Fleet {
    async fn discover(&self, specs: &[TargetSpec]) -> Result<Vec<Instance>, DiscoveryError> {
        if sources_only(specs)? {
            self.source_instances(specs).await
        } else {
            discover(&self.ec2, specs).await
        }
    }

    async fn targets(&self, specs: &[TargetSpec]) -> Result<Vec<Target>, DiscoveryError> {
        if sources_only(specs)? {
            let found = self.source_targets(specs).await?;
            if found.is_empty() {
                return Err(DiscoveryError::NoMatch(describe_specs(specs)));
            }
            Ok(found)
        } else {
            Ok(discover(&self.ec2, specs)
                .await?
                .into_iter()
                .map(Target::from)
                .collect())
        }
    }
}

/// Describes `specs` as users wrote them, joined with AND.
pub fn describe_specs(specs: &[TargetSpec]) -> String {
    specs.iter().map(ToString::to_string).collect::<Vec<_>>().join(" AND ")
}

/// Finds the running instances matching every spec: all tags must match
/// and, when instance ids are given, the instance must be one of them (as
/// SSM's Targets are ANDed).
pub async fn discover(ec2: &aws_sdk_ec2::Client, specs: &[TargetSpec]) -> Result<Vec<Instance>, DiscoveryError> {
    if specs.is_empty() {
        return Err(DiscoveryError::NoTargets);
    }
    let mut filters = vec![Filter::builder().name("instance-state-name").values("running").build()];
    let mut ids = Vec::new();
    for spec in specs {
        match spec {
            TargetSpec::Tag { key, value } => {
                filters.push(Filter::builder().name(format!("tag:{key}")).values(value).build())
            }
            TargetSpec::InstanceId(id) => ids.push(id.clone()),
            source => return Err(DiscoveryError::Mixed(source.to_string())),
        }
    }
    if !ids.is_empty() {
        filters.push(
            Filter::builder()
                .name("instance-id")
                .set_values(Some(ids.clone()))
                .build(),
        );
    }
    let mut found = describe(ec2, filters, &describe_specs(specs)).await?;
    found.sort_by(|a, b| a.instance_id.cmp(&b.instance_id));
    found.dedup_by(|a, b| a.instance_id == b.instance_id);
    let only_ids = specs.iter().all(|s| matches!(s, TargetSpec::InstanceId(_)));
    if only_ids {
        let missing: Vec<&String> = ids
            .iter()
            .filter(|id| !found.iter().any(|f| &f.instance_id == *id))
            .collect();
        if !missing.is_empty() {
            return Err(DiscoveryError::NotRunning(
                missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
            ));
        }
    }
    if found.is_empty() {
        return Err(DiscoveryError::NoMatch(describe_specs(specs)));
    }
    Ok(found)
}

/// The instances `DescribeInstances` returns for `filters`.
async fn describe(
    ec2: &aws_sdk_ec2::Client,
    filters: Vec<Filter>,
    what: &str,
) -> Result<Vec<Instance>, DiscoveryError> {
    let call = Call::new("ec2:DescribeInstances", what);
    let mut pages = ec2
        .describe_instances()
        .set_filters(Some(filters))
        .max_results(1000)
        .into_paginator()
        .send();
    let mut found = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsError::from_sdk(e, &call))?;
        for reservation in page.reservations() {
            for i in reservation.instances() {
                let Some(id) = i.instance_id() else { continue };
                found.push(Instance {
                    instance_id: id.to_owned(),
                    private_ip: i.private_ip_address().map(str::to_owned),
                    name: i
                        .tags()
                        .iter()
                        .find(|t| t.key() == Some("Name"))
                        .and_then(|t| t.value())
                        .map(str::to_owned),
                });
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::TargetSpec;

    #[test]
    fn target_specs_parse_and_reject_with_a_hint() {
        assert_eq!(
            "tag:Role=login".parse::<TargetSpec>(),
            Ok(TargetSpec::Tag {
                key: "Role".into(),
                value: "login".into()
            })
        );
        assert_eq!(
            "tag:Name=a=b".parse::<TargetSpec>().unwrap().to_string(),
            "tag:Name=a=b",
            "the first = splits key from value"
        );
        assert_eq!(
            "i-0123456789abcdef0".parse::<TargetSpec>(),
            Ok(TargetSpec::InstanceId("i-0123456789abcdef0".into()))
        );
        for bad in ["Role=login", "tag:=x", "tag:Role", "i-xyz", "login-1"] {
            let err = bad.parse::<TargetSpec>().unwrap_err();
            assert!(err.contains("tag:KEY=VALUE"), "{bad}: {err}");
        }
    }

    #[test]
    fn node_sources_parse_and_reject_what_aws_would_not_name() {
        let lb_arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/hp-login/0123456789abcdef";
        let tg_arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/hp-login/0123456789abcdef";
        let cases = [
            ("lb:hp-login", TargetSpec::LoadBalancer("hp-login".into())),
            (&format!("lb:{lb_arn}") as &str, TargetSpec::LoadBalancer(lb_arn.into())),
            (&format!("tg:{tg_arn}") as &str, TargetSpec::TargetGroup(tg_arn.into())),
            (
                "hyperpod:ml-cluster",
                TargetSpec::HyperPod {
                    cluster: "ml-cluster".into(),
                    group: None,
                },
            ),
            (
                "hyperpod:ml-cluster/login-group",
                TargetSpec::HyperPod {
                    cluster: "ml-cluster".into(),
                    group: Some("login-group".into()),
                },
            ),
        ];
        for (text, want) in cases {
            let parsed = text.parse::<TargetSpec>().unwrap();
            assert_eq!(parsed, want);
            assert_eq!(parsed.to_string(), text, "Display round-trips");
            assert!(parsed.is_source());
        }
        for bad in [
            "lb:",
            "lb:-x",
            "lb:a;reboot",
            "lb:name-that-is-far-too-long-for-elb-x",
            "tg:hp-login",
            "tg:arn:aws:elasticloadbalancing:us-east-1:1:loadbalancer/net/x/1",
            "hyperpod:",
            "hyperpod:c/",
            "hyperpod:c/g/h",
            "hyperpod:$(id)",
        ] {
            assert!(bad.parse::<TargetSpec>().is_err(), "{bad} was accepted");
        }
        assert!(!"tag:Role=login".parse::<TargetSpec>().unwrap().is_source());
    }

    #[test]
    fn lb_option_is_an_address_or_a_load_balancer() {
        use super::LbSpec;
        assert_eq!(
            "lb:hp-login".parse::<LbSpec>(),
            Ok(LbSpec::LoadBalancer("hp-login".into()))
        );
        assert!(matches!("10.0.0.5:22".parse::<LbSpec>(), Ok(LbSpec::Address(_))));
        assert!("lb:bad name".parse::<LbSpec>().is_err());
    }
}
