//! The target group: how the admin names it, what it holds, and the ports
//! that read it (its targets; its settings, for `doctor`) and change it
//! (Elastic Load Balancing API Reference, `DescribeTargetGroups`,
//! `DescribeTargetGroupAttributes`, `DescribeTargetHealth`,
//! `RegisterTargets`, `DeregisterTargets`).

use std::collections::BTreeMap;
use std::future::Future;
use std::str::FromStr;

use serde::Serialize;

use crate::aws_error::AwsError;
use crate::discovery::{DiscoveryError, GroupTarget, TargetSpec};

/// The target group to keep: `tg:ARN`, or `lb:NAME_OR_ARN` (the one target
/// group of its listener on the SSH port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupSpec {
    /// `lb:NAME_OR_ARN`.
    LoadBalancer(String),
    /// `tg:ARN`.
    TargetGroup(String),
}

impl FromStr for GroupSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.parse::<TargetSpec>() {
            Ok(TargetSpec::LoadBalancer(lb)) => Ok(GroupSpec::LoadBalancer(lb)),
            Ok(TargetSpec::TargetGroup(tg)) => Ok(GroupSpec::TargetGroup(tg)),
            Ok(_) => Err(format!("{s:?} is not a target group: give tg:ARN or lb:NAME_OR_ARN")),
            Err(e) if s.trim().starts_with("lb:") || s.trim().starts_with("tg:") => Err(e),
            Err(_) => Err(format!("{s:?} is not a target group: give tg:ARN or lb:NAME_OR_ARN")),
        }
    }
}

impl std::fmt::Display for GroupSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GroupSpec::LoadBalancer(lb) => write!(f, "lb:{lb}"),
            GroupSpec::TargetGroup(tg) => write!(f, "tg:{tg}"),
        }
    }
}

/// A target group as it stands.
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    /// Its ARN.
    pub arn: String,
    /// Its name.
    pub name: String,
    /// `ip` or `instance`: what its target ids are.
    pub target_type: String,
    /// The registered targets, with their health.
    #[serde(skip)]
    pub targets: Vec<GroupTarget>,
}

impl Group {
    /// Whether its targets are instance ids (else addresses).
    pub fn by_instance(&self) -> bool {
        self.target_type == "instance"
    }
}

/// The load balancer's target groups: read one, register and deregister.
pub trait TargetGroups: Sync {
    /// The target group `spec` names, with its targets.
    fn group(&self, spec: &GroupSpec, port: u16) -> impl Future<Output = Result<Group, DiscoveryError>> + Send;
    /// Registers `ids` (addresses or instance ids) on the group's port.
    fn register(&self, group: &Group, ids: &[String]) -> impl Future<Output = Result<(), AwsError>> + Send;
    /// Deregisters each (id, port) as registered; the group's
    /// deregistration delay drains them.
    fn deregister(
        &self,
        group: &Group,
        targets: &[(String, Option<u16>)],
    ) -> impl Future<Output = Result<(), AwsError>> + Send;
}

/// A target group's settings and targets.
#[derive(Clone, Debug)]
pub struct GroupSettings {
    /// The group and its targets with their health.
    pub group: Group,
    /// `TCP`, `TLS`, `UDP`, `TCP_UDP`, `TCP_QUIC` (a Network Load
    /// Balancer's).
    pub protocol: String,
    /// The port its targets take traffic on (each target may have its
    /// own).
    pub port: Option<u16>,
    /// The health check's protocol: `TCP`, `HTTP`, `HTTPS`.
    pub health_check_protocol: String,
    /// `traffic-port` or a port number.
    pub health_check_port: String,
    /// Its attributes (`preserve_client_ip.enabled`,
    /// `proxy_protocol_v2.enabled`, ...).
    pub attributes: BTreeMap<String, String>,
}

/// Reads a target group's settings.
pub trait Balancers: Sync {
    /// The target group `spec` names (for `lb:`, the one its listener on
    /// `port` forwards to), with its settings and targets.
    fn settings(
        &self,
        spec: &GroupSpec,
        port: u16,
    ) -> impl Future<Output = Result<GroupSettings, DiscoveryError>> + Send;
}
