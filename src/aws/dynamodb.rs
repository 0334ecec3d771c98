//! DynamoDB: the enrolment signer's bindings ([`crate::enrolment::Bindings`]),
//! one item per instance, written only if it is still what was read (a
//! conditional PutItem), so concurrent enrolments of one instance cannot
//! both win, and enrolments of different instances never contend.
//!
//! Item: `instance_id` (S, the key), `fingerprints` (L of S, sorted),
//! `last_issued_at_ms` (N), `host_keys` (L of S), `revoked` (BOOL; an
//! admin's `UpdateItem` sets it, and no enrolment writes over it),
//! `claim` (BOOL: a login node's claim, certified for no key),
//! `certificates` (L of S) and `certified_at` (N): the last signing,
//! answered again to a renewal within the signer's period; `signing_at`
//! (N): when the last signing started. Items written before those existed
//! read as no claim and no certificates kept.

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
    let mut out = HashMap::from([
        ("instance_id".to_owned(), AttributeValue::S(instance_id.to_owned())),
        (
            "fingerprints".to_owned(),
            AttributeValue::L(binding.fingerprints.iter().cloned().map(AttributeValue::S).collect()),
        ),
        (
            "last_issued_at_ms".to_owned(),
            AttributeValue::N(binding.last_issued_at_ms.to_string()),
        ),
        (
            "host_keys".to_owned(),
            AttributeValue::L(binding.host_keys.iter().cloned().map(AttributeValue::S).collect()),
        ),
        ("revoked".to_owned(), AttributeValue::Bool(binding.revoked)),
        ("claim".to_owned(), AttributeValue::Bool(binding.claim)),
        (
            "certificates".to_owned(),
            AttributeValue::L(binding.certificates.iter().cloned().map(AttributeValue::S).collect()),
        ),
        (
            "certified_at".to_owned(),
            AttributeValue::N(binding.certified_at.to_string()),
        ),
        (
            "signing_at".to_owned(),
            AttributeValue::N(binding.signing_at.to_string()),
        ),
        (
            "rekey_looked_at".to_owned(),
            AttributeValue::N(binding.rekey_looked_at.to_string()),
        ),
    ]);
    if let Some(image) = &binding.image_id {
        out.insert("image_id".to_owned(), AttributeValue::S(image.clone()));
    }
    out
}

fn strings(item: &HashMap<String, AttributeValue>, name: &str) -> Result<Vec<String>, String> {
    match item.get(name) {
        Some(AttributeValue::L(list)) => list
            .iter()
            .map(|v| {
                v.as_s()
                    .cloned()
                    .map_err(|_| format!("an item of {name} is not a string"))
            })
            .collect(),
        None => Ok(Vec::new()),
        Some(_) => Err(format!("the item's {name} is not a list")),
    }
}

fn binding(item: &HashMap<String, AttributeValue>) -> Result<Binding, String> {
    if !item.contains_key("fingerprints") {
        return Err("the item has no fingerprints list".to_owned());
    }
    let fingerprints = strings(item, "fingerprints")?;
    let last_issued_at_ms = item
        .get("last_issued_at_ms")
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| "the item has no last_issued_at_ms number".to_owned())?;
    let number = |name: &str| -> Result<i64, String> {
        match item.get(name) {
            None => Ok(0),
            Some(v) => v
                .as_n()
                .ok()
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("the item's {name} is not a number")),
        }
    };
    let (certified_at, signing_at) = (number("certified_at")?, number("signing_at")?);
    let image_id = match item.get("image_id") {
        None => None,
        Some(v) => Some(
            v.as_s()
                .cloned()
                .map_err(|_| "the item's image_id is not a string".to_owned())?,
        ),
    };
    Ok(Binding {
        fingerprints,
        last_issued_at_ms,
        host_keys: strings(item, "host_keys")?,
        revoked: matches!(item.get("revoked"), Some(AttributeValue::Bool(true))),
        claim: matches!(item.get("claim"), Some(AttributeValue::Bool(true))),
        certificates: strings(item, "certificates")?,
        certified_at,
        signing_at,
        image_id,
        rekey_looked_at: number("rekey_looked_at")?,
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
            // Not over a revocation or a claim made since the read.
            Some(p) => put
                .condition_expression(
                    "last_issued_at_ms = :last AND fingerprints = :fingerprints AND (attribute_not_exists(revoked) OR revoked = :no) AND (attribute_not_exists(claim) OR claim = :claimed)",
                )
                .expression_attribute_values(":claimed", AttributeValue::Bool(p.claim))
                .expression_attribute_values(":no", AttributeValue::Bool(false))
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

    async fn revoked_keys(&self) -> Result<Vec<Vec<String>>, String> {
        let items = self.scan(Some("revoked = :yes")).await.map_err(|e| e.to_string())?;
        items.iter().map(|item| strings(item, "host_keys")).collect()
    }
}

impl DynamoBindings {
    /// Every item (or those `filter` keeps), page by page.
    async fn scan(&self, filter: Option<&str>) -> Result<Vec<HashMap<String, AttributeValue>>, AwsError> {
        let call = Call::new("dynamodb:Scan", format!("table {}", self.table));
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let mut scan = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_exclusive_start_key(start.take());
            if let Some(f) = filter {
                scan = scan
                    .filter_expression(f)
                    .expression_attribute_values(":yes", AttributeValue::Bool(true));
            }
            let out = scan.send().await.map_err(|e| AwsError::from_sdk(e, &call))?;
            items.extend(out.items().iter().cloned());
            match out.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => return Ok(items),
            }
        }
    }
}

impl crate::enrolment::admin::BindingsAdmin for DynamoBindings {
    async fn list(&self) -> Result<Vec<(String, Binding)>, AwsError> {
        let mut out = Vec::new();
        for item in self.scan(None).await? {
            let Some(AttributeValue::S(id)) = item.get("instance_id") else {
                continue;
            };
            let parsed = binding(&item).map_err(|message| AwsError::Service {
                action: "dynamodb:Scan",
                resource: format!("table {}", self.table),
                code: "BadItem".to_owned(),
                message: format!("instance {id}: {message}"),
            })?;
            out.push((id.clone(), parsed));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    async fn revoke(&self, instance_id: &str) -> Result<bool, AwsError> {
        let call = Call::new(
            "dynamodb:UpdateItem",
            format!("table {}, instance {instance_id}", self.table),
        );
        match self
            .client
            .update_item()
            .table_name(&self.table)
            .key("instance_id", AttributeValue::S(instance_id.to_owned()))
            .update_expression("SET revoked = :yes")
            .condition_expression("attribute_exists(instance_id)")
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Ok(false)
            }
            Err(e) => Err(AwsError::from_sdk(e, &call)),
        }
    }
}
