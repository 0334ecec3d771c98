//! DynamoDB: the enrolment signer's bindings ([`crate::enrolment::Bindings`]),
//! one item per instance, written only if it is still what was read (a
//! conditional PutItem), so concurrent enrolments of one instance cannot
//! both win, and enrolments of different instances never contend.
//!
//! Item: `instance_id` (S, the key), `fingerprints` (L of S, sorted),
//! `last_issued_at_ms` (N).

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::aws::{AwsError, Call};
use crate::enrolment::{Binding, Bindings};

/// The bindings table.
#[derive(Clone, Debug)]
pub struct DynamoBindings {
    client: Client,
    table: String,
}

impl DynamoBindings {
    /// The table `table` (its name or ARN).
    pub fn new(config: &aws_config::SdkConfig, table: &str) -> Self {
        DynamoBindings {
            client: Client::new(config),
            table: table.to_owned(),
        }
    }
}

fn item(instance_id: &str, binding: &Binding) -> HashMap<String, AttributeValue> {
    HashMap::from([
        ("instance_id".to_owned(), AttributeValue::S(instance_id.to_owned())),
        (
            "fingerprints".to_owned(),
            AttributeValue::L(binding.fingerprints.iter().cloned().map(AttributeValue::S).collect()),
        ),
        (
            "last_issued_at_ms".to_owned(),
            AttributeValue::N(binding.last_issued_at_ms.to_string()),
        ),
    ])
}

fn binding(item: &HashMap<String, AttributeValue>) -> Result<Binding, String> {
    let fingerprints = match item.get("fingerprints") {
        Some(AttributeValue::L(list)) => list
            .iter()
            .map(|v| {
                v.as_s()
                    .cloned()
                    .map_err(|_| "a fingerprint is not a string".to_owned())
            })
            .collect::<Result<Vec<_>, _>>()?,
        _ => return Err("the item has no fingerprints list".to_owned()),
    };
    let last_issued_at_ms = item
        .get("last_issued_at_ms")
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| "the item has no last_issued_at_ms number".to_owned())?;
    Ok(Binding {
        fingerprints,
        last_issued_at_ms,
    })
}

impl Bindings for DynamoBindings {
    async fn get(&self, instance_id: &str) -> Result<Option<Binding>, String> {
        let call = Call::new(
            "dynamodb:GetItem",
            format!("table {}, instance {instance_id}", self.table),
        );
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("instance_id", AttributeValue::S(instance_id.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call).to_string())?;
        out.item().map(binding).transpose()
    }

    async fn put(&self, instance_id: &str, new: &Binding, previous: Option<&Binding>) -> Result<bool, String> {
        let call = Call::new(
            "dynamodb:PutItem",
            format!("table {}, instance {instance_id}", self.table),
        );
        let mut put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item(instance_id, new)));
        put = match previous {
            None => put.condition_expression("attribute_not_exists(instance_id)"),
            Some(p) => put
                .condition_expression("last_issued_at_ms = :last AND fingerprints = :fingerprints")
                .expression_attribute_values(":last", AttributeValue::N(p.last_issued_at_ms.to_string()))
                .expression_attribute_values(
                    ":fingerprints",
                    AttributeValue::L(p.fingerprints.iter().cloned().map(AttributeValue::S).collect()),
                ),
        };
        match put.send().await {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(AwsError::from_sdk(e, &call).to_string()),
        }
    }
}
