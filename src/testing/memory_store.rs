//! A secret store in memory with Secrets Manager's rules for versions,
//! staging labels and client tokens.

use std::sync::Mutex;

use zeroize::Zeroizing;

use crate::aws::AwsError;
use crate::document::{CaDocument, SecretDocument};
use crate::ids::{SecretId, StageLabel, VersionId};
use crate::store::{
    CaCreateRequest, CreateRequest, STAGE_CURRENT, STAGE_PENDING, STAGE_PREVIOUS, SecretInfo, SecretStore, StoreError,
    StoredVersion, TAG_FORMAT, VersionInfo, VersionSelector, ca_tags, fingerprint_tags, stored_version,
};

struct Version {
    id: VersionId,
    /// `None`: the empty version Secrets Manager stages as AWSPENDING
    /// before a scheduled rotation's createSecret stores the value.
    text: Option<Zeroizing<String>>,
    stages: Vec<String>,
    created: i64,
}

struct Secret {
    arn: SecretId,
    name: String,
    description: String,
    kms_key_id: Option<String>,
    tags: Vec<(String, String)>,
    versions: Vec<Version>,
    rotation: crate::store::RotationSchedule,
}

/// Secrets Manager in memory: one region, one account.
#[derive(Default)]
pub struct MemoryStore {
    secrets: Mutex<Vec<Secret>>,
    clock: Mutex<i64>,
    started: Mutex<usize>,
}

fn not_found(action: &'static str, secret: &SecretId, what: &str) -> StoreError {
    StoreError::Aws(AwsError::NotFound {
        action,
        resource: format!("secret {secret}"),
        message: format!("Secrets Manager can't find {what}."),
    })
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryStore::default()
    }

    fn tick(&self) -> i64 {
        let mut clock = self.clock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *clock += 1;
        1_800_000_000 + *clock
    }

    /// The store's clock (Unix seconds): each call that creates a version
    /// moves it one second on.
    pub fn now(&self) -> i64 {
        1_800_000_000 + *self.clock.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Moves the clock `seconds` on (time passes between calls).
    pub fn advance(&self, seconds: i64) {
        *self.clock.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += seconds.max(0);
    }

    /// Secrets Manager's own step before it calls a rotation function's
    /// createSecret: the token as AWSPENDING on an empty version (with
    /// `copy_current`, on a copy of AWSCURRENT's value, as for
    /// `RotateImmediately` false's configuration test). Refused, as
    /// RotateSecret is, while AWSPENDING is on another version than
    /// AWSCURRENT, or when the token is a version already.
    pub fn stage_rotation(&self, id: &SecretId, token: &VersionId, copy_current: bool) -> Result<(), StoreError> {
        let created = self.tick();
        self.with("secretsmanager:RotateSecret", id, |s| {
            let in_flight = s
                .versions
                .iter()
                .any(|v| v.stages.iter().any(|l| l == STAGE_PENDING) && !v.stages.iter().any(|l| l == STAGE_CURRENT));
            if in_flight || s.versions.iter().any(|v| v.id == *token) {
                return Err(StoreError::Aws(AwsError::Service {
                    action: "secretsmanager:RotateSecret",
                    resource: format!("secret {id}"),
                    code: "InvalidRequestException".to_owned(),
                    message: "A previous rotation isn't complete, or the token is a version already.".to_owned(),
                }));
            }
            let text = if copy_current {
                s.versions
                    .iter()
                    .find(|v| v.stages.iter().any(|l| l == STAGE_CURRENT))
                    .and_then(|v| v.text.clone())
            } else {
                None
            };
            take_label(s, STAGE_PENDING);
            s.versions.push(Version {
                id: token.clone(),
                text,
                stages: vec![STAGE_PENDING.to_owned()],
                created,
            });
            Ok(())
        })
    }

    fn with<T>(
        &self,
        action: &'static str,
        id: &SecretId,
        f: impl FnOnce(&mut Secret) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut secrets = self.secrets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let secret = secrets
            .iter_mut()
            .find(|s| s.name == id.as_str() || s.arn == *id)
            .ok_or_else(|| not_found(action, id, "the specified secret"))?;
        f(secret)
    }

    /// The keys of a version, for assertions (no store call, so a hook can
    /// look without being asked about its own call).
    pub fn keys_of(&self, id: &SecretId, version: &VersionId) -> Option<crate::keyset::KeySet> {
        self.with("test:Keys", id, |s| {
            Ok(s.versions
                .iter()
                .find(|v| v.id == *version)
                .and_then(|v| v.text.as_ref())
                .and_then(|text| SecretDocument::parse(text).ok())
                .map(|d| d.keys))
        })
        .ok()
        .flatten()
    }

    /// The staging labels of every version, for assertions: (version, labels).
    pub fn stages(&self, id: &SecretId) -> Vec<(VersionId, Vec<String>)> {
        self.with("test:Stages", id, |s| {
            Ok(s.versions.iter().map(|v| (v.id.clone(), v.stages.clone())).collect())
        })
        .unwrap_or_default()
    }

    /// The version holding `label`.
    pub fn holder(&self, id: &SecretId, label: &str) -> Option<VersionId> {
        self.stages(id)
            .into_iter()
            .find(|(_, labels)| labels.iter().any(|l| l == label))
            .map(|(v, _)| v)
    }

    /// A secret whose AWSCURRENT text is `text` as given: what a secret
    /// that is not a key set (or a damaged one) looks like to a reader.
    ///
    /// # Panics
    ///
    /// When a secret of that name exists.
    pub fn put_raw(&self, name: &SecretId, text: &str) {
        self.create_secret(name, Zeroizing::new(text.to_owned()), "", None, |_| Vec::new())
            .expect("put_raw: a new secret name");
    }

    /// Sets what DescribeSecret answers about the rotation schedule.
    pub fn set_rotation(&self, id: &SecretId, rotation: crate::store::RotationSchedule) {
        let mut secrets = self.secrets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(s) = secrets.iter_mut().find(|s| s.arn == *id || s.name == id.as_str()) {
            s.rotation = rotation;
        }
    }

    /// How many rotations `RotateSecret` was asked to start now.
    pub fn rotations_started(&self) -> usize {
        *self.started.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many versions the secret has, labelled or not.
    pub fn version_count(&self, id: &SecretId) -> usize {
        self.stages(id).len()
    }
}

fn take_label(secret: &mut Secret, label: &str) {
    for v in &mut secret.versions {
        v.stages.retain(|l| l != label);
    }
}

fn created_string(t: i64) -> Option<String> {
    time::OffsetDateTime::from_unix_timestamp(t)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
}

impl MemoryStore {
    /// CreateSecret: a new secret with `text` as its first (AWSCURRENT)
    /// version.
    fn create_secret(
        &self,
        name: &SecretId,
        text: Zeroizing<String>,
        description: &str,
        kms_key_id: Option<&str>,
        tags: impl FnOnce(&VersionId) -> Vec<(String, String)>,
    ) -> Result<(SecretId, VersionId), StoreError> {
        let version_id = VersionId::random();
        let created = self.tick();
        let mut secrets = self.secrets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if secrets.iter().any(|s| s.name == name.as_str()) {
            return Err(StoreError::AlreadyExists { name: name.to_string() });
        }
        let arn = SecretId::parse(&format!(
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:{name}-AbCdEf"
        ))
        .map_err(|source| StoreError::BadMetadata {
            secret: name.to_string(),
            what: "an ARN",
            source,
        })?;
        secrets.push(Secret {
            arn: arn.clone(),
            name: name.to_string(),
            description: description.to_owned(),
            kms_key_id: kms_key_id.map(str::to_owned),
            tags: tags(&version_id),
            rotation: Default::default(),
            versions: vec![Version {
                id: version_id.clone(),
                text: Some(text),
                stages: vec![STAGE_CURRENT.to_owned()],
                created,
            }],
        });
        Ok((arn, version_id))
    }
}

impl SecretStore for MemoryStore {
    fn clock(&self) -> i64 {
        self.now()
    }

    async fn create(&self, req: &CreateRequest<'_>) -> Result<(SecretId, VersionId), StoreError> {
        let text = req.document.to_json().map_err(|source| StoreError::NotHostkeyctl {
            secret: req.name.clone(),
            selector: VersionSelector::Stage(crate::store::stage(STAGE_CURRENT)),
            source: Box::new(source),
        })?;
        self.create_secret(req.name, text, req.description, req.kms_key_id, |version_id| {
            let mut tags = vec![(TAG_FORMAT.to_owned(), crate::document::FORMAT_V1.to_owned())];
            tags.extend(fingerprint_tags(version_id, &req.document.keys));
            tags.extend(req.tags.iter().cloned());
            tags
        })
    }

    async fn create_ca(&self, req: &CaCreateRequest<'_>) -> Result<SecretId, StoreError> {
        let text = req.ca.to_json().map_err(|source| StoreError::NotCa {
            secret: req.name.clone(),
            source: Box::new(source),
        })?;
        let (arn, _) = self.create_secret(req.name, text, req.description, req.kms_key_id, |_| ca_tags(req))?;
        Ok(arn)
    }

    async fn get_ca(&self, name: &SecretId) -> Result<CaDocument, StoreError> {
        let text = self.with("secretsmanager:GetSecretValue", name, |s| {
            s.versions
                .iter()
                .find(|v| v.stages.iter().any(|l| l == STAGE_CURRENT))
                .and_then(|v| v.text.clone())
                .ok_or_else(|| not_found("secretsmanager:GetSecretValue", name, "the AWSCURRENT version"))
        })?;
        CaDocument::parse(&text).map_err(|source| StoreError::NotCa {
            secret: name.clone(),
            source: Box::new(source),
        })
    }

    async fn get(&self, id: &SecretId, selector: &VersionSelector) -> Result<StoredVersion, StoreError> {
        let (arn, name, version, stages, text) = self.with("secretsmanager:GetSecretValue", id, |s| {
            let v = s
                .versions
                .iter()
                .find(|v| match selector {
                    VersionSelector::Stage(l) => v.stages.iter().any(|x| x == l.as_str()),
                    VersionSelector::VersionId(x) => v.id == *x,
                })
                .ok_or_else(|| not_found("secretsmanager:GetSecretValue", id, &format!("the {selector}")))?;
            let text = v.text.clone().ok_or_else(|| {
                not_found(
                    "secretsmanager:GetSecretValue",
                    id,
                    &format!("the specified secret value for {selector}"),
                )
            })?;
            Ok((
                s.arn.to_string(),
                s.name.clone(),
                v.id.to_string(),
                v.stages.clone(),
                text,
            ))
        })?;
        stored_version(
            id,
            selector,
            Some(&arn),
            Some(&name),
            Some(&version),
            stages,
            Some(text),
        )
    }

    async fn describe(&self, id: &SecretId) -> Result<SecretInfo, StoreError> {
        let mut info = self.describe_versions(id).await?;
        // DescribeSecret has no creation dates.
        for v in &mut info.versions {
            v.created = None;
        }
        Ok(info)
    }

    async fn describe_versions(&self, id: &SecretId) -> Result<SecretInfo, StoreError> {
        self.with("secretsmanager:DescribeSecret", id, |s| {
            let mut versions: Vec<&Version> = s.versions.iter().filter(|v| !v.stages.is_empty()).collect();
            versions.sort_by_key(|v| std::cmp::Reverse(v.created));
            Ok(SecretInfo {
                arn: s.arn.clone(),
                name: s.name.clone(),
                description: Some(s.description.clone()),
                kms_key_id: s.kms_key_id.clone(),
                tags: s.tags.clone(),
                rotation: s.rotation.clone(),
                versions: versions
                    .into_iter()
                    .map(|v| VersionInfo {
                        version_id: v.id.clone(),
                        stages: v.stages.clone(),
                        created: created_string(v.created),
                    })
                    .collect(),
            })
        })
    }

    async fn all_versions(&self, id: &SecretId) -> Result<Vec<crate::store::VersionInfo>, StoreError> {
        self.with("secretsmanager:ListSecretVersionIds", id, |s| {
            let mut versions: Vec<&Version> = s.versions.iter().collect();
            versions.sort_by_key(|v| std::cmp::Reverse(v.created));
            Ok(versions
                .into_iter()
                .map(|v| VersionInfo {
                    version_id: v.id.clone(),
                    stages: v.stages.clone(),
                    created: created_string(v.created),
                })
                .collect())
        })
    }

    async fn put_version(
        &self,
        id: &SecretId,
        document: &SecretDocument,
        token: &VersionId,
        stages: &[StageLabel],
    ) -> Result<VersionId, StoreError> {
        let text = document.to_json().map_err(|source| StoreError::NotHostkeyctl {
            secret: id.clone(),
            selector: VersionSelector::VersionId(token.clone()),
            source: Box::new(source),
        })?;
        let created = self.tick();
        self.with("secretsmanager:PutSecretValue", id, |s| {
            let mut placeholder = false;
            if let Some(existing) = s.versions.iter().find(|v| v.id == *token) {
                // Secrets Manager: the same token with the same value is a
                // no-op; with another value it is refused; the empty
                // version a rotation staged takes the value.
                match &existing.text {
                    Some(t) if **t == *text => return Ok(token.clone()),
                    Some(_) => {
                        return Err(StoreError::TokenConflict {
                            secret: id.to_string(),
                            version_id: token.clone(),
                        });
                    }
                    None => placeholder = true,
                }
            }
            let labels: Vec<String> = if stages.is_empty() {
                vec![STAGE_CURRENT.to_owned()]
            } else {
                stages.iter().map(ToString::to_string).collect()
            };
            if labels.iter().any(|l| l == STAGE_CURRENT) {
                let old = s
                    .versions
                    .iter()
                    .position(|v| v.stages.iter().any(|l| l == STAGE_CURRENT));
                take_label(s, STAGE_PREVIOUS);
                if let Some(i) = old {
                    s.versions[i].stages.push(STAGE_PREVIOUS.to_owned());
                }
            }
            for label in &labels {
                take_label(s, label);
            }
            if placeholder {
                s.versions.retain(|v| v.id != *token);
            }
            s.versions.push(Version {
                id: token.clone(),
                text: Some(text),
                stages: labels,
                created,
            });
            Ok(token.clone())
        })
    }

    async fn move_stage(
        &self,
        id: &SecretId,
        label: &StageLabel,
        to: Option<&VersionId>,
        from: Option<&VersionId>,
    ) -> Result<(), StoreError> {
        const ACTION: &str = "secretsmanager:UpdateSecretVersionStage";
        self.with(ACTION, id, |s| {
            let holder = s
                .versions
                .iter()
                .find(|v| v.stages.iter().any(|l| l == label.as_str()))
                .map(|v| v.id.clone());
            let held = |holder: Option<VersionId>| StoreError::LabelHeld {
                secret: id.to_string(),
                label: label.clone(),
                holder,
            };
            if let Some(from) = from
                && holder.as_ref() != Some(from)
            {
                return Err(held(holder));
            }
            let Some(to) = to else {
                take_label(s, label.as_str());
                return Ok(());
            };
            if !s.versions.iter().any(|v| v.id == *to) {
                return Err(not_found(ACTION, id, &format!("version {to}")));
            }
            if holder.as_ref() == Some(to) {
                return Ok(());
            }
            if let Some(h) = &holder
                && from != Some(h)
            {
                return Err(held(holder.clone()));
            }
            take_label(s, label.as_str());
            if label.as_str() == STAGE_CURRENT {
                take_label(s, STAGE_PREVIOUS);
                if let Some(h) = &holder
                    && let Some(v) = s.versions.iter_mut().find(|v| v.id == *h)
                {
                    v.stages.push(STAGE_PREVIOUS.to_owned());
                }
            }
            if let Some(v) = s.versions.iter_mut().find(|v| v.id == *to) {
                v.stages.push(label.to_string());
            }
            Ok(())
        })
    }

    async fn tag(&self, id: &SecretId, tags: &[(String, String)]) -> Result<(), StoreError> {
        self.with("secretsmanager:TagResource", id, |s| {
            for (k, v) in tags {
                match s.tags.iter_mut().find(|(key, _)| key == k) {
                    Some(slot) => slot.1 = v.clone(),
                    None => s.tags.push((k.clone(), v.clone())),
                }
            }
            Ok(())
        })
    }
}

impl crate::store::Schedules for MemoryStore {
    /// What `DescribeSecret` answers changes as RotateSecret sets it; a
    /// rotation asked for now is counted ([`MemoryStore::rotations_started`]),
    /// not run.
    async fn rotate_secret(
        &self,
        secret: &SecretId,
        settings: Option<crate::store::ScheduleSettings<'_>>,
        now: bool,
    ) -> Result<(), StoreError> {
        self.with("secretsmanager:RotateSecret", secret, |s| {
            if let Some(settings) = settings {
                if let Some(function) = settings.function {
                    s.rotation.lambda_arn = Some(function.to_owned());
                }
                s.rotation.schedule = Some(settings.every.to_owned());
                s.rotation.enabled = true;
            }
            if s.rotation.lambda_arn.is_none() {
                return Err(StoreError::Aws(AwsError::Service {
                    action: "secretsmanager:RotateSecret",
                    resource: format!("secret {secret}"),
                    code: "InvalidRequestException".to_owned(),
                    message: "No Lambda rotation function ARN is associated with this secret.".to_owned(),
                }));
            }
            Ok(())
        })?;
        if now {
            *self.started.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
        }
        Ok(())
    }

    async fn cancel_rotation(&self, secret: &SecretId) -> Result<(), StoreError> {
        self.with("secretsmanager:CancelRotateSecret", secret, |s| {
            s.rotation.enabled = false;
            s.rotation.next_rotation = None;
            Ok(())
        })
    }
}
