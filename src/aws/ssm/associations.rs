//! [`Associations`] over SSM: `ListAssociations` (by name),
//! `DescribeAssociation`, `CreateAssociation`, `UpdateAssociation`,
//! `DeleteAssociation`.

use std::collections::BTreeMap;

use aws_sdk_ssm::Client;
use aws_sdk_ssm::primitives::{DateTime, DateTimeFormat};
use aws_sdk_ssm::types::{
    AssociationComplianceSeverity, AssociationDescription, AssociationFilter, AssociationFilterKey,
    AssociationSyncCompliance,
};

use crate::association::{Association, AssociationSpec, Associations, Target};
use crate::aws::{AwsError, Call};

/// State Manager through the SDK.
pub struct SsmAssociations {
    client: Client,
}

impl SsmAssociations {
    /// Associations of the account and region of `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        SsmAssociations {
            client: Client::new(config),
        }
    }
}

fn targets_of(spec: &AssociationSpec) -> Vec<aws_sdk_ssm::types::Target> {
    spec.targets
        .iter()
        .map(|t| {
            aws_sdk_ssm::types::Target::builder()
                .key(&t.key)
                .set_values(Some(t.values.clone()))
                .build()
        })
        .collect()
}

fn time(t: Option<&DateTime>) -> Option<String> {
    t.and_then(|t| t.fmt(DateTimeFormat::DateTime).ok())
}

fn from_description(d: &AssociationDescription) -> Association {
    let overview = d.overview();
    Association {
        id: d.association_id().unwrap_or_default().to_owned(),
        version: d.association_version().map(str::to_owned),
        spec: AssociationSpec {
            name: d.association_name().unwrap_or_default().to_owned(),
            document: d.name().unwrap_or_default().to_owned(),
            document_version: d.document_version().unwrap_or_default().to_owned(),
            parameters: d
                .parameters()
                .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
            targets: d
                .targets()
                .iter()
                .map(|t| Target {
                    key: t.key().unwrap_or_default().to_owned(),
                    values: t.values().to_vec(),
                })
                .collect(),
            schedule: d.schedule_expression().unwrap_or_default().to_owned(),
            max_concurrency: d.max_concurrency().unwrap_or_default().to_owned(),
            max_errors: d.max_errors().unwrap_or_default().to_owned(),
        },
        status: overview.and_then(|o| o.status()).map(str::to_owned),
        instances_by_status: overview
            .and_then(|o| o.association_status_aggregated_count())
            .map(|m| m.iter().map(|(k, v)| (k.clone(), *v)).collect::<BTreeMap<_, _>>())
            .unwrap_or_default(),
        last_execution: time(d.last_execution_date()),
        last_success: time(d.last_successful_execution_date()),
    }
}

fn answered(d: Option<&AssociationDescription>, call: &Call) -> Result<Association, AwsError> {
    d.map(from_description).ok_or_else(|| AwsError::Service {
        action: call.action,
        resource: call.resource.clone(),
        code: "NoAssociationDescription".to_owned(),
        message: "SSM answered without the association".to_owned(),
    })
}

impl SsmAssociations {
    /// Every association ListAssociations finds with `key` = `value`, held
    /// to `exact` (the filters match loosely), fully described.
    async fn listed(
        &self,
        key: AssociationFilterKey,
        value: &str,
        exact: impl Fn(&aws_sdk_ssm::types::Association) -> bool,
    ) -> Result<Vec<Association>, AwsError> {
        let call = Call::new("ssm:ListAssociations", format!("associations {value}"));
        let filter = AssociationFilter::builder()
            .key(key)
            .value(value)
            .build()
            .map_err(|e| AwsError::Service {
                action: call.action,
                resource: call.resource.clone(),
                code: "BuildError".to_owned(),
                message: e.to_string(),
            })?;
        let mut pages = self
            .client
            .list_associations()
            .association_filter_list(filter)
            .into_paginator()
            .send();
        let mut ids = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::from_sdk(e, &call))?;
            for a in page.associations() {
                if exact(a)
                    && let Some(id) = a.association_id()
                {
                    ids.push(id.to_owned());
                }
            }
        }
        let mut out = Vec::new();
        for id in ids {
            let call = Call::new("ssm:DescribeAssociation", format!("association {id}"));
            let described = self
                .client
                .describe_association()
                .association_id(&id)
                .send()
                .await
                .map_err(|e| AwsError::from_sdk(e, &call))?;
            out.push(answered(described.association_description(), &call)?);
        }
        Ok(out)
    }
}

/// The settings CreateAssociation and UpdateAssociation both send, on
/// either builder: the SDK's two builders share no trait, and an update
/// sends them all again (what it leaves out, SSM resets).
macro_rules! with_spec {
    ($builder:expr, $spec:expr) => {
        $builder
            .association_name(&$spec.name)
            .name(&$spec.document)
            .document_version(&$spec.document_version)
            .set_parameters(Some($spec.parameters.clone().into_iter().collect()))
            .set_targets(Some(targets_of($spec)))
            .schedule_expression(&$spec.schedule)
            .max_concurrency(&$spec.max_concurrency)
            .max_errors(&$spec.max_errors)
            .compliance_severity(AssociationComplianceSeverity::High)
            .sync_compliance(AssociationSyncCompliance::Auto)
    };
}

impl Associations for SsmAssociations {
    async fn named(&self, name: &str) -> Result<Vec<Association>, AwsError> {
        self.listed(AssociationFilterKey::AssociationName, name, |a| {
            a.association_name() == Some(name)
        })
        .await
    }

    async fn running(&self, document: &str) -> Result<Vec<Association>, AwsError> {
        self.listed(AssociationFilterKey::Name, document, |a| a.name() == Some(document))
            .await
    }

    async fn create(&self, spec: &AssociationSpec) -> Result<Association, AwsError> {
        let call = Call::new("ssm:CreateAssociation", format!("association {}", spec.name));
        let out = with_spec!(self.client.create_association(), spec)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        answered(out.association_description(), &call)
    }

    async fn update(&self, id: &str, spec: &AssociationSpec) -> Result<Association, AwsError> {
        let call = Call::new("ssm:UpdateAssociation", format!("association {id}"));
        let out = with_spec!(self.client.update_association().association_id(id), spec)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        answered(out.association_description(), &call)
    }

    async fn delete(&self, id: &str) -> Result<(), AwsError> {
        let call = Call::new("ssm:DeleteAssociation", format!("association {id}"));
        self.client
            .delete_association()
            .association_id(id)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }
}
