//! The real [`SecretStore`]: AWS Secrets Manager through the SDK.

use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::types::Tag;
use zeroize::Zeroizing;

use crate::aws::{AwsError, Call};
use crate::document::CaDocument;
use crate::document::SecretDocument;
use crate::ids::{SecretId, StageLabel, VersionId};
use crate::store::{
    CaCreateRequest, CreateRequest, RotationSchedule, SecretInfo, SecretStore, StoreError, StoredVersion, TAG_FORMAT,
    VersionInfo, VersionSelector, ca_tags, fingerprint_tags, parse_meta, stored_version,
};

fn to_tags(pairs: &[(String, String)]) -> Vec<Tag> {
    pairs
        .iter()
        .map(|(k, v)| Tag::builder().key(k).value(v).build())
        .collect()
}

fn time_string(t: Option<&aws_sdk_secretsmanager::primitives::DateTime>) -> Option<String> {
    t.and_then(|t| t.fmt(aws_sdk_secretsmanager::primitives::DateTimeFormat::DateTime).ok())
}

/// Secrets Manager through the AWS SDK.
#[derive(Clone, Debug)]
pub struct SecretsManagerStore {
    client: Client,
    /// Signs for a CA in KMS read from its secret ([`SecretStore::get_ca`]).
    #[cfg(feature = "admin")]
    kms: crate::aws::kms::Kms,
}

impl SecretsManagerStore {
    /// A store using `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        SecretsManagerStore {
            client: Client::new(config),
            #[cfg(feature = "admin")]
            kms: crate::aws::kms::Kms::new(config),
        }
    }
}

impl SecretStore for SecretsManagerStore {
    async fn create(&self, req: &CreateRequest<'_>) -> Result<(SecretId, VersionId), StoreError> {
        let version_id = VersionId::random();
        let mut tags = vec![(TAG_FORMAT.to_owned(), crate::document::FORMAT_V1.to_owned())];
        tags.extend(fingerprint_tags(&version_id, &req.document.keys));
        tags.extend(req.tags.iter().cloned());
        let json = req.document.to_json().map_err(|source| StoreError::NotHostkeyctl {
            secret: req.name.clone(),
            selector: VersionSelector::VersionId(version_id.clone()),
            source: Box::new(source),
        })?;
        let call = Call::new("secretsmanager:CreateSecret", format!("secret {}", req.name));
        let out = self
            .client
            .create_secret()
            .name(req.name.as_str())
            .description(req.description)
            .secret_string(json.as_str())
            .client_request_token(version_id.as_str())
            .set_kms_key_id(req.kms_key_id.map(str::to_owned))
            .set_tags(Some(to_tags(&tags)))
            .send()
            .await
            .map_err(|e| {
                if e.as_service_error().is_some_and(|s| s.is_resource_exists_exception()) {
                    StoreError::AlreadyExists {
                        name: req.name.to_string(),
                    }
                } else {
                    StoreError::Aws(AwsError::from_sdk(e, &call))
                }
            })?;
        let arn = parse_meta(req.name, "an ARN", out.arn(), SecretId::parse)?;
        let id = match out.version_id() {
            Some(v) => parse_meta(req.name, "a version id", Some(v), VersionId::parse)?,
            None => version_id,
        };
        Ok((arn, id))
    }

    async fn get(&self, secret: &SecretId, selector: &VersionSelector) -> Result<StoredVersion, StoreError> {
        let call = Call::new("secretsmanager:GetSecretValue", format!("secret {secret} ({selector})"));
        let mut request = self.client.get_secret_value().secret_id(secret.as_str());
        request = match selector {
            VersionSelector::Stage(s) => request.version_stage(s.as_str()),
            VersionSelector::VersionId(v) => request.version_id(v.as_str()),
        };
        let mut out = request.send().await.map_err(|e| AwsError::from_sdk(e, &call))?;
        let text = out.secret_string.take().map(Zeroizing::new);
        stored_version(
            secret,
            selector,
            out.arn(),
            out.name(),
            out.version_id(),
            out.version_stages().to_vec(),
            text,
        )
    }

    async fn describe(&self, secret: &SecretId) -> Result<SecretInfo, StoreError> {
        let call = Call::new("secretsmanager:DescribeSecret", format!("secret {secret}"));
        let out = self
            .client
            .describe_secret()
            .secret_id(secret.as_str())
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        let mut versions = Vec::new();
        // VersionIdsToStages lists the versions that carry a label; the rest
        // are deprecated and never read.
        for (id, stages) in out.version_ids_to_stages().into_iter().flatten() {
            if stages.is_empty() {
                continue;
            }
            versions.push(VersionInfo {
                version_id: parse_meta(secret, "a version id", Some(id), VersionId::parse)?,
                stages: stages.clone(),
                created: None,
            });
        }
        versions.sort_by(|a, b| a.version_id.as_str().cmp(b.version_id.as_str()));
        Ok(SecretInfo {
            arn: parse_meta(secret, "an ARN", out.arn(), SecretId::parse)?,
            name: out.name().unwrap_or_default().to_owned(),
            description: out.description().map(str::to_owned),
            kms_key_id: out.kms_key_id().map(str::to_owned),
            tags: out
                .tags()
                .iter()
                .map(|t| {
                    (
                        t.key().unwrap_or_default().to_owned(),
                        t.value().unwrap_or_default().to_owned(),
                    )
                })
                .collect(),
            versions,
            rotation: RotationSchedule {
                enabled: out.rotation_enabled().unwrap_or(false),
                lambda_arn: out.rotation_lambda_arn().map(str::to_owned),
                schedule: out.rotation_rules().and_then(|r| {
                    r.schedule_expression()
                        .map(str::to_owned)
                        .or_else(|| r.automatically_after_days().map(|d| format!("rate({d} days)")))
                }),
                last_rotated: time_string(out.last_rotated_date()),
                next_rotation: time_string(out.next_rotation_date()),
            },
        })
    }

    async fn describe_versions(&self, secret: &SecretId) -> Result<SecretInfo, StoreError> {
        let mut info = self.describe(secret).await?;
        let call = Call::new("secretsmanager:ListSecretVersionIds", format!("secret {secret}"));
        let mut dates = std::collections::HashMap::new();
        let mut pages = self
            .client
            .list_secret_version_ids()
            .secret_id(secret.as_str())
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::from_sdk(e, &call))?;
            for v in page.versions() {
                if let (Some(id), Some(created)) = (v.version_id(), v.created_date()) {
                    dates.insert(id.to_owned(), *created);
                }
            }
        }
        for v in &mut info.versions {
            v.created = time_string(dates.get(v.version_id.as_str()));
        }
        info.versions
            .sort_by_key(|v| std::cmp::Reverse(dates.get(v.version_id.as_str()).copied()));
        Ok(info)
    }

    async fn all_versions(&self, secret: &SecretId) -> Result<Vec<VersionInfo>, StoreError> {
        let call = Call::new("secretsmanager:ListSecretVersionIds", format!("secret {secret}"));
        let mut dated = Vec::new();
        let mut pages = self
            .client
            .list_secret_version_ids()
            .secret_id(secret.as_str())
            .include_deprecated(true)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::from_sdk(e, &call))?;
            for v in page.versions() {
                let info = VersionInfo {
                    version_id: parse_meta(secret, "a version id", v.version_id(), VersionId::parse)?,
                    stages: v.version_stages().to_vec(),
                    created: time_string(v.created_date()),
                };
                dated.push((v.created_date().copied(), info));
            }
        }
        dated.sort_by_key(|(created, _)| std::cmp::Reverse(*created));
        Ok(dated.into_iter().map(|(_, v)| v).collect())
    }

    async fn put_version(
        &self,
        secret: &SecretId,
        document: &SecretDocument,
        token: &VersionId,
        stages: &[StageLabel],
    ) -> Result<VersionId, StoreError> {
        // Secrets Manager refuses a reused token with other content (which
        // the call below answers too): the same content is a no-op, read
        // first to say so. The empty version Secrets Manager stages before
        // a rotation's createSecret reads as not found, and takes the value.
        match self.get(secret, &VersionSelector::VersionId(token.clone())).await {
            Ok(existing)
                if existing.document.keys == document.keys
                    && existing.document.certificates == document.certificates =>
            {
                return Ok(existing.version_id);
            }
            Ok(_) => {
                return Err(StoreError::TokenConflict {
                    secret: secret.to_string(),
                    version_id: token.clone(),
                });
            }
            Err(StoreError::Aws(AwsError::NotFound { .. })) => {}
            Err(other) => return Err(other),
        }
        let json = document.to_json().map_err(|source| StoreError::NotHostkeyctl {
            secret: secret.clone(),
            selector: VersionSelector::VersionId(token.clone()),
            source: Box::new(source),
        })?;
        let call = Call::new("secretsmanager:PutSecretValue", format!("secret {secret}"));
        let out = self
            .client
            .put_secret_value()
            .secret_id(secret.as_str())
            .client_request_token(token.as_str())
            .secret_string(json.as_str())
            .set_version_stages(Some(stages.iter().map(|s| s.to_string()).collect()))
            .send()
            .await
            .map_err(|e| match AwsError::from_sdk(e, &call) {
                // Another value stored under the token meanwhile.
                AwsError::Service { code, .. } if code == "ResourceExistsException" => StoreError::TokenConflict {
                    secret: secret.to_string(),
                    version_id: token.clone(),
                },
                other => other.into(),
            })?;
        match out.version_id() {
            Some(v) => parse_meta(secret, "a version id", Some(v), VersionId::parse),
            None => Ok(token.clone()),
        }
    }

    async fn move_stage(
        &self,
        secret: &SecretId,
        label: &StageLabel,
        to: Option<&VersionId>,
        from: Option<&VersionId>,
    ) -> Result<(), StoreError> {
        let call = Call::new("secretsmanager:UpdateSecretVersionStage", format!("secret {secret}"));
        let moved = self
            .client
            .update_secret_version_stage()
            .secret_id(secret.as_str())
            .version_stage(label.as_str())
            .set_move_to_version_id(to.map(ToString::to_string))
            .set_remove_from_version_id(from.map(ToString::to_string))
            .send()
            .await;
        match moved {
            Ok(_) => Ok(()),
            Err(e) => match AwsError::from_sdk(e, &call) {
                // Secrets Manager says only "invalid parameter", in words
                // that change; where the label is now says what happened.
                AwsError::Service { code, .. } if code == "InvalidParameterException" => {
                    let info = self.describe(secret).await?;
                    Err(StoreError::LabelHeld {
                        secret: secret.to_string(),
                        label: label.clone(),
                        holder: info.version_with_stage(label.as_str()).map(|v| v.version_id.clone()),
                    })
                }
                other => Err(other.into()),
            },
        }
    }

    async fn create_ca(&self, req: &CaCreateRequest<'_>) -> Result<SecretId, StoreError> {
        let name = req.name;
        let json = req.ca.to_json().map_err(|source| StoreError::NotCa {
            secret: name.clone(),
            source: Box::new(source),
        })?;
        let call = Call::new("secretsmanager:CreateSecret", format!("secret {name}"));
        let out = self
            .client
            .create_secret()
            .name(name.as_str())
            .description(req.description)
            .secret_string(json.as_str())
            .set_kms_key_id(req.kms_key_id.map(str::to_owned))
            .set_tags(Some(to_tags(&ca_tags(req))))
            .send()
            .await
            .map_err(|e| {
                if e.as_service_error().is_some_and(|s| s.is_resource_exists_exception()) {
                    StoreError::AlreadyExists { name: name.to_string() }
                } else {
                    StoreError::Aws(AwsError::from_sdk(e, &call))
                }
            })?;
        parse_meta(name, "an ARN", out.arn(), SecretId::parse)
    }

    async fn get_ca(&self, name: &SecretId) -> Result<CaDocument, StoreError> {
        let call = Call::new("secretsmanager:GetSecretValue", format!("secret {name} (AWSCURRENT)"));
        let mut out = self
            .client
            .get_secret_value()
            .secret_id(name.as_str())
            .version_stage(crate::store::STAGE_CURRENT)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        let text = Zeroizing::new(out.secret_string.take().unwrap_or_default());
        #[allow(unused_mut)]
        let mut ca = CaDocument::parse(&text).map_err(|source| StoreError::NotCa {
            secret: name.clone(),
            source: Box::new(source),
        })?;
        #[cfg(feature = "admin")]
        if let crate::certificate::CaKey::Kms(unbound) = &ca.key {
            let bound = crate::certificate::kms::KmsCa::clone_unbound(unbound).bind(self.kms.signer());
            ca.key = crate::certificate::CaKey::Kms(std::sync::Arc::new(bound));
        }
        Ok(ca)
    }

    async fn tag(&self, secret: &SecretId, tags: &[(String, String)]) -> Result<(), StoreError> {
        let call = Call::new("secretsmanager:TagResource", format!("secret {secret}"));
        self.client
            .tag_resource()
            .secret_id(secret.as_str())
            .set_tags(Some(to_tags(tags)))
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }
}

/// The rotation schedule's calls (`hostkeyctl schedule`): not part of
/// [`SecretStore`], which the rotation steps and the nodes use.
impl crate::store::Schedules for SecretsManagerStore {
    /// RotateSecret. With `settings` (function ARN, schedule, window): sets
    /// them and, unless `now`, starts no rotation (Secrets Manager runs the
    /// function's testSecret step to check the configuration). Without:
    /// starts a rotation now with the settings the secret has.
    async fn rotate_secret(
        &self,
        secret: &SecretId,
        settings: Option<crate::store::ScheduleSettings<'_>>,
        now: bool,
    ) -> Result<(), StoreError> {
        let call = Call::new("secretsmanager:RotateSecret", format!("secret {secret}"));
        let mut request = self
            .client
            .rotate_secret()
            .secret_id(secret.as_str())
            .rotate_immediately(now);
        if let Some(crate::store::ScheduleSettings {
            function,
            every: schedule,
            window,
        }) = settings
        {
            let rules = aws_sdk_secretsmanager::types::RotationRulesType::builder();
            let rules = match schedule.parse::<i64>() {
                Ok(days) => rules.automatically_after_days(days),
                Err(_) => rules.schedule_expression(schedule),
            };
            request = request
                .rotation_rules(rules.set_duration(window.map(str::to_owned)).build())
                .set_rotation_lambda_arn(function.map(str::to_owned));
        }
        request.send().await.map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }

    /// CancelRotateSecret: turns the schedule off.
    async fn cancel_rotation(&self, secret: &SecretId) -> Result<(), StoreError> {
        let call = Call::new("secretsmanager:CancelRotateSecret", format!("secret {secret}"));
        self.client
            .cancel_rotate_secret()
            .secret_id(secret.as_str())
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }
}
