//! `hyperpod:CLUSTER[/INSTANCE_GROUP]` targets: the nodes of a SageMaker
//! HyperPod cluster. They are not EC2 instances of the caller's account:
//! they can be audited by address, never pushed to through SSM.

use std::sync::Arc;

use aws_sdk_sagemaker::Client;
use aws_sdk_sagemaker::types::ClusterNodeSummary;

use crate::aws::{AwsError, Call};
use crate::discovery::{DiscoveryError, Health, Target};

/// Node descriptions asked for at once.
const DESCRIBE_CONCURRENCY: usize = 8;

/// moto (and older endpoints) answer an unknown cluster with a
/// ValidationException "Could not find cluster"; that is a missing resource.
fn not_found_or(e: AwsError) -> AwsError {
    match e {
        AwsError::Service {
            action,
            resource,
            code,
            message,
        } if code == "ValidationException" && message.contains("Could not find") => AwsError::NotFound {
            action,
            resource,
            message,
        },
        other => other,
    }
}

/// The id of `cluster` (a name or an ARN): the last part of its ARN, which
/// Session Manager's targets for its nodes carry.
pub async fn cluster_id(client: &Client, cluster: &str) -> Result<String, DiscoveryError> {
    if cluster.starts_with("arn:") {
        return crate::sessions::cluster_id_of_arn(cluster);
    }
    let call = Call::new("sagemaker:DescribeCluster", format!("HyperPod cluster {cluster}"));
    let described = client
        .describe_cluster()
        .cluster_name(cluster)
        .send()
        .await
        .map_err(|e| not_found_or(AwsError::from_sdk(e, &call)))?;
    let arn = described.cluster_arn().unwrap_or_default();
    crate::sessions::cluster_id_of_arn(arn)
}

/// The nodes of `cluster` (of `group` only, when given), with their
/// private address, host name and status.
pub async fn nodes(client: &Client, cluster: &str, group: Option<&str>) -> Result<Vec<Target>, DiscoveryError> {
    let call = Call::new("sagemaker:ListClusterNodes", format!("HyperPod cluster {cluster}"));
    let mut request = client.list_cluster_nodes().cluster_name(cluster).max_results(100);
    if let Some(g) = group {
        request = request.instance_group_name_contains(g);
    }
    let mut pages = request.into_paginator().send();
    let mut summaries: Vec<ClusterNodeSummary> = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| not_found_or(AwsError::from_sdk(e, &call)))?;
        summaries.extend(
            page.cluster_node_summaries()
                .iter()
                .filter(|s| group.is_none_or(|g| s.instance_group_name() == Some(g)))
                .cloned(),
        );
    }
    if summaries.is_empty() {
        return Err(DiscoveryError::NoMatch(match group {
            Some(g) => format!("hyperpod:{cluster}/{g} (no node in instance group {g})"),
            None => format!("hyperpod:{cluster} (the cluster has no node)"),
        }));
    }
    let limit = Arc::new(tokio::sync::Semaphore::new(DESCRIBE_CONCURRENCY));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, summary) in summaries.into_iter().enumerate() {
        let (client, cluster, limit) = (client.clone(), cluster.to_owned(), limit.clone());
        tasks.spawn(async move {
            let _permit = limit.acquire_owned().await;
            (i, describe(&client, &cluster, &summary).await)
        });
    }
    let mut out = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (i, target) = joined.map_err(|e| DiscoveryError::Malformed(format!("a node lookup failed: {e}")))?;
        out.push((i, target?));
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, t)| t).collect())
}

async fn describe(client: &Client, cluster: &str, summary: &ClusterNodeSummary) -> Result<Target, DiscoveryError> {
    let Some(id) = summary.instance_id() else {
        return Err(DiscoveryError::Malformed(format!(
            "a node of HyperPod cluster {cluster} has no instance id"
        )));
    };
    let call = Call::new(
        "sagemaker:DescribeClusterNode",
        format!("node {id} of HyperPod cluster {cluster}"),
    );
    let described = client
        .describe_cluster_node()
        .cluster_name(cluster)
        .node_id(id)
        .send()
        .await
        .map_err(|e| not_found_or(AwsError::from_sdk(e, &call)))?;
    let details = described.node_details();
    let status = details.and_then(|d| d.instance_status());
    let group = summary.instance_group_name().unwrap_or("?");
    Ok(Target {
        name: details
            .and_then(|d| d.private_dns_hostname())
            .map_or_else(|| format!("{group}/{id}"), str::to_owned),
        instance_id: Some(id.to_owned()),
        address: details.and_then(|d| d.private_primary_ip()).map(str::to_owned),
        port: None,
        health: Some(Health {
            source: format!("HyperPod cluster {cluster}, instance group {group}"),
            state: status
                .and_then(|s| s.status())
                .map_or("unknown".to_owned(), |s| s.as_str().to_owned()),
            reason: status.and_then(|s| s.message()).map(str::to_owned),
        }),
        clusters: Vec::new(),
    })
}

/// A HyperPod cluster as the enrolment signer sees it: a node by its
/// instance id (DescribeClusterNode), with the names AWS gives it.
#[derive(Clone, Debug)]
pub struct HyperPodNodes {
    client: Client,
    cluster: String,
}

impl HyperPodNodes {
    /// The nodes of `cluster` (a name or an ARN).
    pub fn new(config: &aws_config::SdkConfig, cluster: &str) -> Self {
        HyperPodNodes {
            client: Client::new(config),
            cluster: cluster.to_owned(),
        }
    }
}

/// The statuses of a node that may enrol: `Pending` while its lifecycle
/// scripts run (the provisioning step), `Running` once in service, and
/// `SystemUpdating` during an update (ClusterInstanceStatus).
const ENROLLING: [&str; 3] = ["Pending", "Running", "SystemUpdating"];

impl crate::enrolment::ClusterNodes for HyperPodNodes {
    fn membership(&self) -> String {
        format!(
            "a node of HyperPod cluster {} that DescribeClusterNode reports",
            self.cluster
        )
    }

    async fn member(&self, instance_id: &str) -> Result<Option<crate::enrolment::Member>, AwsError> {
        let call = Call::new(
            "sagemaker:DescribeClusterNode",
            format!("node {instance_id} of HyperPod cluster {}", self.cluster),
        );
        let described = match self
            .client
            .describe_cluster_node()
            .cluster_name(&self.cluster)
            .node_id(instance_id)
            .send()
            .await
            .map_err(|e| not_found_or(AwsError::from_sdk(e, &call)))
        {
            Ok(d) => d,
            Err(AwsError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(details) = described.node_details() else {
            return Ok(None);
        };
        let status = details
            .instance_status()
            .and_then(|s| s.status())
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default();
        if details.instance_id() != Some(instance_id) || !ENROLLING.contains(&status.as_str()) {
            return Ok(None);
        }
        let Some(ip) = details.private_primary_ip().and_then(|a| a.parse().ok()) else {
            return Ok(None);
        };
        Ok(Some(crate::enrolment::Member {
            instance_id: instance_id.to_owned(),
            private_ip: ip,
            names: crate::enrolment::names_of(details.private_dns_hostname(), ip),
            image_id: details.current_image_id().map(str::to_owned),
            software_updated_at: details
                .last_software_update_time()
                .map(aws_sdk_sagemaker::primitives::DateTime::secs),
        }))
    }
}
