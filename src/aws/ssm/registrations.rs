//! Which instances SSM manages (`DescribeInstanceInformation`), for
//! `doctor`.

use std::collections::BTreeMap;

use aws_sdk_ssm::types::InstanceInformationStringFilter;

use super::SsmDispatcher;
use crate::aws::{AwsError, Call};
use crate::dispatch::{ManagedInstances, Registration};

impl ManagedInstances for SsmDispatcher {
    async fn registrations(&self, ids: &[String]) -> Result<BTreeMap<String, Registration>, AwsError> {
        let call = Call::new("ssm:DescribeInstanceInformation", "instances".to_owned());
        let mut out = BTreeMap::new();
        // The InstanceIds filter takes at most 50 values (API reference,
        // InstanceInformationStringFilter).
        for batch in ids.chunks(50) {
            let filter = InstanceInformationStringFilter::builder()
                .key("InstanceIds")
                .set_values(Some(batch.to_vec()))
                .build()
                .map_err(|e| AwsError::Service {
                    action: call.action,
                    resource: call.resource.clone(),
                    code: "InvalidFilter".to_owned(),
                    message: e.to_string(),
                })?;
            let mut pages = self
                .client()
                .describe_instance_information()
                .filters(filter)
                .max_results(50)
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| AwsError::from_sdk(e, &call))?;
                for info in page.instance_information_list() {
                    let Some(id) = info.instance_id() else { continue };
                    out.insert(
                        id.to_owned(),
                        Registration {
                            ping_status: info
                                .ping_status()
                                .map_or_else(|| "Unknown".to_owned(), |p| p.as_str().to_owned()),
                            agent_version: info.agent_version().map(str::to_owned),
                        },
                    );
                }
            }
        }
        Ok(out)
    }
}
