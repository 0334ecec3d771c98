//! The real fleet: EC2 `DescribeInstances` for `tag:` and instance ids,
//! and the node sources (load balancers, target groups, HyperPod clusters)
//! resolved through [`super::elb`] and [`super::sagemaker`].

use aws_sdk_ec2::types::Filter;

use super::elb;
use crate::aws::{AwsError, Call};
use crate::discovery::{DiscoveryError, Fleet, Instance, Target, TargetSpec, describe_specs};

/// The real fleet: EC2, Elastic Load Balancing and SageMaker HyperPod.
#[derive(Clone, Debug)]
pub struct AwsFleet {
    ec2: aws_sdk_ec2::Client,
    elb: aws_sdk_elasticloadbalancingv2::Client,
    #[cfg(feature = "hyperpod")]
    sagemaker: aws_sdk_sagemaker::Client,
    port: u16,
}

impl AwsFleet {
    /// A fleet read with `config`; `lb:` targets use the listener on port 22.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        AwsFleet {
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
        super::sagemaker::nodes(&self.sagemaker, cluster, group).await
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
    async fn group_targets(&self, targets: Vec<crate::discovery::GroupTarget>) -> Result<Vec<Target>, DiscoveryError> {
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
                    clusters: instance.map(|i| i.clusters.clone()).unwrap_or_default(),
                }
            })
            .collect())
    }

    /// The running instances behind node sources, for SSM: instance
    /// targets directly, IP targets through their private address.
    async fn source_instances(&self, specs: &[TargetSpec]) -> Result<Vec<Instance>, DiscoveryError> {
        crate::discovery::check_pushable(specs)?;
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

impl Fleet for AwsFleet {
    async fn load_balancer(
        &self,
        name_or_arn: &str,
    ) -> Result<(crate::discovery::Listener, Vec<crate::discovery::GroupTarget>), DiscoveryError> {
        let listener = elb::listener(&self.elb, name_or_arn, self.port).await?;
        let mut targets = Vec::new();
        for group in &listener.target_groups {
            targets.extend(elb::targets(&self.elb, group).await?.1);
        }
        Ok((listener, targets))
    }

    #[cfg(feature = "hyperpod")]
    async fn hyperpod_cluster_id(&self, cluster: &str) -> Result<String, DiscoveryError> {
        super::sagemaker::cluster_id(&self.sagemaker, cluster).await
    }

    async fn discover(&self, specs: &[TargetSpec]) -> Result<Vec<Instance>, DiscoveryError> {
        if crate::discovery::sources_only(specs)? {
            self.source_instances(specs).await
        } else {
            discover(&self.ec2, specs).await
        }
    }

    async fn targets(&self, specs: &[TargetSpec]) -> Result<Vec<Target>, DiscoveryError> {
        if crate::discovery::sources_only(specs)? {
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
                    clusters: crate::discovery::scope::clusters_of(
                        i.tags().iter().filter_map(|t| Some((t.key()?, t.value()?))),
                    ),
                });
            }
        }
    }
    Ok(found)
}
