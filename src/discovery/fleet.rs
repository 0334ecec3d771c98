//! The fleet and its sources: [`Fleet`], what a `--target` names, and the
//! nodes each source answers with.

use std::fmt;
use std::future::Future;
use std::str::FromStr;

use crate::aws_error::AwsError;

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
    /// The clusters its tags name ([`super::scope::CLUSTER_TAGS`]): what keeps a
    /// target inside the secret's cluster.
    #[serde(skip)]
    pub clusters: Vec<String>,
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
    /// The clusters its tags name, when EC2 described it
    /// ([`Instance::clusters`]).
    #[serde(skip)]
    pub clusters: Vec<String>,
}

impl From<Instance> for Target {
    fn from(i: Instance) -> Self {
        Target {
            name: i.name.unwrap_or_else(|| i.instance_id.clone()),
            instance_id: Some(i.instance_id),
            address: i.private_ip,
            port: None,
            health: None,
            clusters: i.clusters,
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
        "{0}: SSM SendCommand does not reach HyperPod cluster nodes, so push and a push rotation cannot install there; the nodes pull their keys (lifecycle script and timer: docs/bootstrap.md), so rotate them with `rotate --pull --target {0}`. `audit --target {0}` checks them"
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

/// Checks that node sources (lb:, tg:, hyperpod:) are not mixed with EC2
/// filters; true when the specs are node sources.
pub fn sources_only(specs: &[TargetSpec]) -> Result<bool, DiscoveryError> {
    match (
        specs.iter().find(|s| s.is_source()),
        specs.iter().all(TargetSpec::is_source),
    ) {
        (None, _) => Ok(false),
        (Some(_), true) => Ok(true),
        (Some(source), false) => Err(DiscoveryError::Mixed(source.to_string())),
    }
}

/// What the targets alone refuse for SSM Run Command (push, a push
/// rotation), before any AWS call: a HyperPod cluster (SSM does not reach
/// its nodes), or node sources mixed with EC2 filters.
pub fn check_pushable(specs: &[TargetSpec]) -> Result<(), DiscoveryError> {
    if let Some(hp) = specs.iter().find(|s| matches!(s, TargetSpec::HyperPod { .. })) {
        return Err(DiscoveryError::NotPushable(hp.to_string()));
    }
    sources_only(specs).map(|_| ())
}

/// Where the login nodes come from.
pub trait Fleet: Sync {
    /// The running EC2 instances the specs name: what SSM can reach.
    fn discover(&self, specs: &[TargetSpec]) -> impl Future<Output = Result<Vec<Instance>, DiscoveryError>> + Send;

    /// The nodes to audit, with their health where the source reports it.
    fn targets(&self, specs: &[TargetSpec]) -> impl Future<Output = Result<Vec<Target>, DiscoveryError>> + Send {
        async move { Ok(self.discover(specs).await?.into_iter().map(Target::from).collect()) }
    }

    /// A load balancer's listener on the SSH port and the targets behind it
    /// (`audit --lb lb:NAME`).
    fn load_balancer(
        &self,
        name_or_arn: &str,
    ) -> impl Future<Output = Result<(Listener, Vec<GroupTarget>), DiscoveryError>> + Send;

    /// A HyperPod cluster's id (the last part of its ARN), for session
    /// targets (`hostkeyctl sessions`).
    fn hyperpod_cluster_id(&self, cluster: &str) -> impl Future<Output = Result<String, DiscoveryError>> + Send {
        let cluster = cluster.to_owned();
        async move { Err(DiscoveryError::NoHyperPod(format!("hyperpod:{cluster}"))) }
    }
}

/// A load balancer's listener on the SSH port, resolved.
#[derive(Clone, Debug)]
pub struct Listener {
    /// The load balancer's name.
    pub name: String,
    /// Its DNS name (what clients connect to).
    pub dns_name: String,
    /// The listener's port.
    pub port: u16,
    /// Target groups the listener forwards to.
    pub target_groups: Vec<String>,
}

/// One registered target of a target group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupTarget {
    /// An instance id (instance target group) or an IP address (IP target group).
    pub id: String,
    /// Whether `id` is an instance id.
    pub is_instance: bool,
    /// The port traffic goes to.
    pub port: Option<u16>,
    /// Health as the target group reports it.
    pub health: Health,
}

/// Describes `specs` as users wrote them, joined with AND.
pub fn describe_specs(specs: &[TargetSpec]) -> String {
    specs.iter().map(ToString::to_string).collect::<Vec<_>>().join(" AND ")
}

impl crate::exit::ExitStatus for DiscoveryError {
    /// AWS trouble is 4; no match and bad targets are 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            DiscoveryError::Aws(a) => crate::exit::ExitStatus::status(a),
            _ => crate::exit::Status::Usage,
        }
    }
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
