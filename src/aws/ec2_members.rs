//! Cluster nodes known by an EC2 tag, as the enrolment signer asks for
//! them: EC2's `DescribeInstances` of the one instance, a member when it is
//! pending or running and carries the tag with the cluster's value.
//!
//! - ParallelCluster 3 puts `parallelcluster:cluster-name` on the head
//!   node, every compute node and every login node it launches. Whoever
//!   may tag instances may also make one a node: docs/cluster-trust.md.
//! - EC2 Auto Scaling puts `aws:autoscaling:groupName` on every instance
//!   it launches or attaches. Tag keys beginning `aws:` are AWS's: EC2
//!   refuses them in `CreateTags` and `RunInstances` (the EC2 API
//!   Reference, "Tag"), so only Auto Scaling makes an instance a member.

use crate::aws::{AwsError, Call};

/// The tag ParallelCluster 3 puts on every instance of a cluster.
pub const PARALLELCLUSTER_TAG: &str = "parallelcluster:cluster-name";
/// The tag EC2 Auto Scaling puts on every instance of a group.
pub const AUTO_SCALING_TAG: &str = "aws:autoscaling:groupName";

/// The instances that carry one tag with one value
/// ([`crate::enrolment::ClusterNodes`]).
#[derive(Clone, Debug)]
pub struct TaggedNodes {
    client: aws_sdk_ec2::Client,
    tag: &'static str,
    value: String,
}

impl TaggedNodes {
    /// The nodes of the ParallelCluster cluster named `cluster`.
    pub fn parallelcluster(config: &aws_config::SdkConfig, cluster: &str) -> Self {
        Self::new(config, PARALLELCLUSTER_TAG, cluster)
    }

    /// The instances of the Auto Scaling group named `group`.
    pub fn auto_scaling_group(config: &aws_config::SdkConfig, group: &str) -> Self {
        Self::new(config, AUTO_SCALING_TAG, group)
    }

    fn new(config: &aws_config::SdkConfig, tag: &'static str, value: &str) -> Self {
        TaggedNodes {
            client: aws_sdk_ec2::Client::new(config),
            tag,
            value: value.to_owned(),
        }
    }
}

impl crate::enrolment::ClusterNodes for TaggedNodes {
    fn membership(&self) -> String {
        format!(
            "a pending or running EC2 instance with the tag {}={}",
            self.tag, self.value
        )
    }

    async fn member(&self, instance_id: &str) -> Result<Option<crate::enrolment::Member>, AwsError> {
        let call = Call::new(
            "ec2:DescribeInstances",
            format!("instance {instance_id} ({}={})", self.tag, self.value),
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
            .any(|t| t.key() == Some(self.tag) && t.value() == Some(self.value.as_str()));
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
            // EC2 fleets get no patch path: a node with new keys is a new
            // instance, or its binding is removed (design-notes).
            image_id: None,
            software_updated_at: None,
        }))
    }
}
