//! ParallelCluster's nodes, as the enrolment signer asks for them: EC2's
//! `DescribeInstances` of the one instance, a member when it is pending or
//! running and carries the cluster's `parallelcluster:cluster-name` tag,
//! which ParallelCluster 3 puts on the head node, every compute node and
//! every login node it launches.

use crate::aws::{AwsError, Call};

/// The tag ParallelCluster 3 puts on every instance of a cluster.
pub const CLUSTER_TAG: &str = "parallelcluster:cluster-name";

/// The instances of a ParallelCluster cluster ([`crate::enrolment::ClusterNodes`]).
#[derive(Clone, Debug)]
pub struct ParallelClusterNodes {
    client: aws_sdk_ec2::Client,
    cluster: String,
}

impl ParallelClusterNodes {
    /// The nodes of the cluster named `cluster`.
    pub fn new(config: &aws_config::SdkConfig, cluster: &str) -> Self {
        ParallelClusterNodes {
            client: aws_sdk_ec2::Client::new(config),
            cluster: cluster.to_owned(),
        }
    }
}

impl crate::enrolment::ClusterNodes for ParallelClusterNodes {
    async fn member(&self, instance_id: &str) -> Result<Option<crate::enrolment::Member>, AwsError> {
        let call = Call::new(
            "ec2:DescribeInstances",
            format!("instance {instance_id} of ParallelCluster cluster {}", self.cluster),
        );
        let answer = match self.client.describe_instances().instance_ids(instance_id).send().await {
            Ok(a) => a,
            Err(e) => {
                return match AwsError::from_sdk(e, &call) {
                    // An id EC2 does not know, or that is no instance id
                    // (InvalidInstanceID.NotFound, .Malformed): no member.
                    AwsError::NotFound { .. } => Ok(None),
                    AwsError::Service { code, .. } if code.starts_with("InvalidInstanceID") => Ok(None),
                    e => Err(e),
                };
            }
        };
        let Some(instance) = answer
            .reservations()
            .iter()
            .flat_map(|r| r.instances())
            .find(|i| i.instance_id() == Some(instance_id))
        else {
            return Ok(None);
        };
        let state = instance
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_owned())
            .unwrap_or_default();
        let tagged = instance
            .tags()
            .iter()
            .any(|t| t.key() == Some(CLUSTER_TAG) && t.value() == Some(self.cluster.as_str()));
        if !tagged || !["pending", "running"].contains(&state.as_str()) {
            return Ok(None);
        }
        let Some(ip) = instance.private_ip_address().and_then(|a| a.parse().ok()) else {
            return Ok(None);
        };
        Ok(Some(crate::enrolment::Member {
            instance_id: instance_id.to_owned(),
            private_ip: ip,
            names: crate::enrolment::names_of(instance.private_dns_name(), ip),
        }))
    }
}
