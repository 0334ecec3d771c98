//! SSM Compliance for a node (`PutComplianceItems`, type
//! `Custom:HostKeys`): the adapter the node build carries for this one call.

use crate::install::compliance::{COMPLIANCE_TYPE, Item, SEVERITY};

/// The instance to report for: the SSM agent's (`AWS_SSM_INSTANCE_ID`, set
/// for every command it runs), or IMDS's.
pub async fn instance_id() -> Result<String, String> {
    if let Ok(id) = std::env::var("AWS_SSM_INSTANCE_ID")
        && !id.is_empty()
    {
        return Ok(id);
    }
    let imds = aws_config::imds::Client::builder().build();
    imds.get("/latest/meta-data/instance-id")
        .await
        .map(String::from)
        .map_err(|e| format!("no instance id: not run by SSM (AWS_SSM_INSTANCE_ID), and IMDS answered: {e}"))
}

/// Sends `items` as the complete `Custom:HostKeys` compliance of
/// `instance_id`.
pub async fn put(
    config: &aws_config::SdkConfig,
    instance_id: &str,
    items: &[Item],
) -> Result<(), crate::aws::AwsError> {
    use aws_sdk_ssm::primitives::DateTime;
    use aws_sdk_ssm::types::{ComplianceExecutionSummary, ComplianceItemEntry, ComplianceSeverity, ComplianceStatus};

    let call = crate::aws::Call::new("ssm:PutComplianceItems", format!("instance {instance_id}"));
    let built = |e: aws_sdk_ssm::error::BuildError| crate::aws::AwsError::Service {
        action: call.action,
        resource: call.resource.clone(),
        code: "BuildError".to_owned(),
        message: e.to_string(),
    };
    let summary = ComplianceExecutionSummary::builder()
        .execution_time(DateTime::from(std::time::SystemTime::now()))
        .execution_type("Command")
        .build()
        .map_err(built)?;
    let mut entries = Vec::new();
    for item in items {
        entries.push(
            ComplianceItemEntry::builder()
                .id(&item.id)
                .title(&item.title)
                .severity(ComplianceSeverity::from(SEVERITY))
                .status(if item.compliant {
                    ComplianceStatus::Compliant
                } else {
                    ComplianceStatus::NonCompliant
                })
                .set_details(Some(item.details.clone().into_iter().collect()))
                .build()
                .map_err(built)?,
        );
    }
    aws_sdk_ssm::Client::new(config)
        .put_compliance_items()
        .resource_id(instance_id)
        .resource_type("ManagedInstance")
        .compliance_type(COMPLIANCE_TYPE)
        .execution_summary(summary)
        .set_items(Some(entries))
        .upload_type(aws_sdk_ssm::types::ComplianceUploadType::Complete)
        .send()
        .await
        .map_err(|e| crate::aws::AwsError::from_sdk(e, &call))?;
    Ok(())
}
