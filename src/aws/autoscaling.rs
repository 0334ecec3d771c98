//! Auto Scaling's launch lifecycle hook, for admission: which instances of
//! a group wait in `Pending:Wait`, and completing the action of one that
//! serves the set (`CONTINUE`), so it goes InService.

use aws_sdk_autoscaling::Client;
use aws_sdk_autoscaling::types::LifecycleState;

use crate::admission::LifecycleHooks;
use crate::aws::{AwsError, Call};

/// A group's launch hook through the Auto Scaling API.
pub struct AwsLifecycle {
    client: Client,
}

impl AwsLifecycle {
    /// The hooks read and completed with `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        AwsLifecycle {
            client: Client::new(config),
        }
    }
}

impl LifecycleHooks for AwsLifecycle {
    async fn waiting(&self, group: &str) -> Result<Vec<String>, AwsError> {
        let call = Call::new(
            "autoscaling:DescribeAutoScalingGroups",
            format!("Auto Scaling group {group}"),
        );
        let found = self
            .client
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(group)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        let Some(g) = found.auto_scaling_groups().first() else {
            return Err(AwsError::NotFound {
                action: call.action,
                resource: call.resource,
                message: "no such Auto Scaling group in this region".to_owned(),
            });
        };
        Ok(g.instances()
            .iter()
            .filter(|i| i.lifecycle_state() == Some(&LifecycleState::PendingWait))
            .filter_map(|i| i.instance_id().map(str::to_owned))
            .collect())
    }

    async fn proceed(&self, group: &str, hook: &str, instance_id: &str) -> Result<(), AwsError> {
        let call = Call::new(
            "autoscaling:CompleteLifecycleAction",
            format!("Auto Scaling group {group}, hook {hook}, instance {instance_id}"),
        );
        self.client
            .complete_lifecycle_action()
            .auto_scaling_group_name(group)
            .lifecycle_hook_name(hook)
            .instance_id(instance_id)
            .lifecycle_action_result("CONTINUE")
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }
}
