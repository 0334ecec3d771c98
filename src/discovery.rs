//! Fleet discovery: which instances a `--target` names.
//!
//! One source today, EC2 `DescribeInstances` (running instances only), behind
//! the [`Fleet`] seam so that an NLB target group or a HyperPod cluster's
//! node list can be added as further sources, and the flows tested against
//! an in-memory fleet (feature `testing`).

use std::fmt;
use std::future::Future;
use std::str::FromStr;

use aws_sdk_ec2::types::Filter;

use crate::aws::{AwsError, Call};

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
}

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
        if let Some(hex) = s.strip_prefix("i-")
            && (8..=17).contains(&hex.len())
            && hex.chars().all(|c| c.is_ascii_hexdigit())
        {
            return Ok(TargetSpec::InstanceId(s.to_owned()));
        }
        Err(format!(
            "{s:?} is not a target: use tag:KEY=VALUE (e.g. tag:Role=login) or an instance id (i-0123456789abcdef0)"
        ))
    }
}

impl fmt::Display for TargetSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetSpec::Tag { key, value } => write!(f, "tag:{key}={value}"),
            TargetSpec::InstanceId(id) => f.write_str(id),
        }
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
}

/// Where the login nodes come from.
pub trait Fleet: Sync {
    /// The running instances matching every spec.
    fn discover(&self, specs: &[TargetSpec]) -> impl Future<Output = Result<Vec<Instance>, DiscoveryError>> + Send;
}

/// The real fleet: EC2 `DescribeInstances`.
#[derive(Clone, Debug)]
pub struct Ec2Fleet {
    client: aws_sdk_ec2::Client,
}

impl Ec2Fleet {
    /// A fleet read with `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        Ec2Fleet {
            client: aws_sdk_ec2::Client::new(config),
        }
    }
}

impl Fleet for Ec2Fleet {
    async fn discover(&self, specs: &[TargetSpec]) -> Result<Vec<Instance>, DiscoveryError> {
        discover(&self.client, specs).await
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
    let call = Call::new("ec2:DescribeInstances", describe_specs(specs));
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
}
