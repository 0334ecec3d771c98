//! An association's flow: deploy (create or update, over the store, the
//! documents and State Manager) and show, with what each found.

use std::collections::BTreeMap;

use crate::aws_error::AwsError;
use crate::discovery::TargetSpec;
use crate::dispatch::Dispatcher;
use crate::ids::{Program, Region, SecretId};
use crate::ssm_document::{Kind, ResolveError, SentDocument, Trust, converge_parameters, resolve};
use crate::store::{SecretStore, StoreError, desired_state};

/// The schedule when none is given: a node that drifted, or that
/// State Manager missed, is put right within half an hour.
pub const DEFAULT_SCHEDULE: &str = "rate(30 minutes)";

/// One of an association's targets, as SSM takes it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Target {
    /// `tag:KEY` or `InstanceIds`.
    pub key: String,
    /// The values.
    pub values: Vec<String>,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = crate::escape::escape(&self.key);
        let values: Vec<String> = self.values.iter().map(|v| crate::escape::escape(v)).collect();
        write!(f, "{key}={}", values.join(","))
    }
}

/// What an association must be (what `deploy` asks of SSM).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AssociationSpec {
    /// Its name (`AssociationName`).
    pub name: String,
    /// The document it runs.
    pub document: String,
    /// That document's version, the one trusted by its hash.
    pub document_version: String,
    /// The document's parameters.
    pub parameters: BTreeMap<String, Vec<String>>,
    /// Where it runs (ANDed, as SSM ands them).
    pub targets: Vec<Target>,
    /// `rate(...)` or `cron(...)`.
    pub schedule: String,
    /// At most this many (or percent of) targets at once.
    pub max_concurrency: String,
    /// Stop after this many (or percent of) failures.
    pub max_errors: String,
}

impl AssociationSpec {
    /// The fields in which `self` differs from `other`.
    pub fn differences(&self, other: &AssociationSpec) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.document != other.document {
            out.push("document");
        }
        if self.document_version != other.document_version {
            out.push("document_version");
        }
        if self.parameters != other.parameters {
            out.push("parameters");
        }
        let sorted = |t: &[Target]| {
            let mut t = t.to_vec();
            t.sort();
            t
        };
        if sorted(&self.targets) != sorted(&other.targets) {
            out.push("targets");
        }
        if self.schedule != other.schedule {
            out.push("schedule");
        }
        if self.max_concurrency != other.max_concurrency {
            out.push("max_concurrency");
        }
        if self.max_errors != other.max_errors {
            out.push("max_errors");
        }
        out
    }
}

/// An association as SSM holds it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Association {
    /// Its id.
    pub id: String,
    /// Its version (each update adds one).
    pub version: Option<String>,
    /// What it is.
    pub spec: AssociationSpec,
    /// State Manager's overview: `Success`, `Failed`, `Pending`.
    pub status: Option<String>,
    /// Instances by the status of their last run.
    pub instances_by_status: BTreeMap<String, i32>,
    /// When it last ran (RFC 3339).
    pub last_execution: Option<String>,
    /// When it last ran with no failure (RFC 3339).
    pub last_success: Option<String>,
}

/// State Manager's associations (SSM, or an in-memory double).
pub trait Associations: Sync {
    /// Every association named `name`, fully described.
    fn named(&self, name: &str) -> impl Future<Output = Result<Vec<Association>, AwsError>> + Send;
    /// Every association that runs `document`, fully described.
    fn running(&self, document: &str) -> impl Future<Output = Result<Vec<Association>, AwsError>> + Send;
    /// Creates one; State Manager runs it on its targets at once.
    fn create(&self, spec: &AssociationSpec) -> impl Future<Output = Result<Association, AwsError>> + Send;
    /// Makes association `id` what `spec` says; State Manager runs it again.
    fn update(&self, id: &str, spec: &AssociationSpec) -> impl Future<Output = Result<Association, AwsError>> + Send;
    /// Deletes association `id` (what it installed stays).
    fn delete(&self, id: &str) -> impl Future<Output = Result<(), AwsError>> + Send;
}

/// Why an association flow could not go on.
#[derive(Debug, thiserror::Error)]
pub enum AssociationError {
    /// A target an association cannot follow.
    #[error(
        "{0} cannot be an association's target: State Manager follows tags (tag:KEY=VALUE, how AWS documents it for Auto Scaling groups) or instance ids. Tag the load balancer's or cluster's login nodes and target the tag; HyperPod nodes converge with the lifecycle step's timer (docs/bootstrap.md)"
    )]
    Source(String),
    /// Instance ids mixed with tags.
    #[error(
        "give tag targets or instance ids, not both: State Manager would run the association only on the listed instances that also carry every tag"
    )]
    Mixed,
    /// Tag targets that do not keep to the secret's cluster.
    #[error(transparent)]
    Scope(#[from] crate::discovery::scope::ScopeError),
    /// No targets.
    #[error(
        "an association needs at least one --target (tag:KEY=VALUE, as for an Auto Scaling group, or instance ids)"
    )]
    NoTargets,
    /// A schedule State Manager refuses.
    #[error(
        "schedule {0:?} is not a State Manager schedule ({1}): use rate(N minutes|hours|days), at least rate(30 minutes), cron(...) or a number of days"
    )]
    Schedule(String, String),
    /// The converge document is not deployed.
    #[error(
        "hostkeyctl's converge document {0} is not deployed, and an association never runs the shell document: run `hostkeyctl ssm-document deploy` first"
    )]
    NotDeployed(String),
    /// More than one association has the name.
    #[error(
        "{count} associations are named {name} ({ids}): hostkeyctl keeps one per secret. Delete the extras with `aws ssm delete-association --association-id ID`, then run this again"
    )]
    Ambiguous {
        /// The name.
        name: String,
        /// How many.
        count: usize,
        /// Their ids.
        ids: String,
    },
    /// The secret, given by ARN, is not there, so the name its
    /// association was given is not known.
    #[error(
        "secret {secret} is not there, so the name of its association (made from the secret's ARN) is not known: pass the association's own with --name (`aws ssm list-associations` lists them; hostkeyctl's start with hostkeyctl-)"
    )]
    NameUnknown {
        /// The ARN given.
        secret: String,
    },
    /// The document could not be trusted or read.
    #[error(transparent)]
    Document(Box<ResolveError>),
    /// The setup document could not be trusted or read.
    #[error("{0}")]
    Setup(String),
    /// The association of that name converges another secret.
    #[error(
        "association {name} converges {theirs}, not {ours}: nothing was changed. Name this secret's association with --name, or delete that one first (`hostkeyctl association delete --name {name}`)"
    )]
    OtherSecret {
        /// The association's name.
        name: String,
        /// The secret it converges.
        theirs: String,
        /// The secret asked for.
        ours: String,
    },
    /// The secret could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// SSM refused or could not be reached.
    #[error(transparent)]
    Aws(#[from] AwsError),
}

impl From<ResolveError> for AssociationError {
    fn from(e: ResolveError) -> Self {
        AssociationError::Document(Box::new(e))
    }
}

/// The targets of an association for `specs`.
pub fn targets(specs: &[TargetSpec]) -> Result<Vec<Target>, AssociationError> {
    let mut out = Vec::new();
    let mut ids = Vec::new();
    for spec in specs {
        match spec {
            TargetSpec::Tag { key, value } => out.push(Target {
                key: format!("tag:{key}"),
                values: vec![value.clone()],
            }),
            TargetSpec::InstanceId(id) => {
                if !ids.contains(id) {
                    ids.push(id.clone());
                }
            }
            TargetSpec::LoadBalancer(name) => return Err(AssociationError::Source(format!("lb:{name}"))),
            TargetSpec::TargetGroup(arn) => return Err(AssociationError::Source(format!("tg:{arn}"))),
            TargetSpec::HyperPod { cluster, .. } => {
                return Err(AssociationError::Source(format!("hyperpod:{cluster}")));
            }
        }
    }
    match (out.is_empty(), ids.is_empty()) {
        (true, true) => Err(AssociationError::NoTargets),
        (false, false) => Err(AssociationError::Mixed),
        (true, false) => Ok(vec![Target {
            key: "InstanceIds".to_owned(),
            values: ids,
        }]),
        (false, true) => Ok(out),
    }
}

/// Checks a schedule (`crate::schedule_expr`'s rules) against State
/// Manager's bound, at least 30 minutes, before anything is sent; returns
/// it as State Manager takes it.
pub fn check_schedule(schedule: &str) -> Result<String, AssociationError> {
    let bad = |why: String| AssociationError::Schedule(crate::escape::escape(schedule), why);
    let expr: crate::schedule_expr::ScheduleExpr = schedule.parse().map_err(bad)?;
    match expr.minutes() {
        Some(m) if m < 30 => Err(bad("more often than State Manager runs associations".to_owned())),
        // As State Manager takes it: a number of days becomes rate(N days).
        _ => Ok(expr.to_string()),
    }
}

/// What `deploy` is asked for.
#[derive(Clone, Debug)]
pub struct DeployRequest<'a> {
    /// The secret.
    pub secret: &'a SecretId,
    /// The region the nodes read it in (none: their own).
    pub region: Option<&'a Region>,
    /// The association's name.
    pub name: &'a str,
    /// Where it runs.
    pub targets: &'a [TargetSpec],
    /// Its schedule.
    pub schedule: &'a str,
    /// The converge document's name.
    pub document: &'a str,
    /// How the nodes call hostkeyctl.
    pub node_command: &'a Program,
    /// Rate controls.
    pub max_concurrency: &'a str,
    /// Rate controls.
    pub max_errors: &'a str,
    /// `--allow-other-clusters` ([`crate::discovery::scope::check_written`]).
    pub allow_other_clusters: bool,
}

/// What `deploy` did.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Deployed {
    /// There was none: created (State Manager runs it now).
    Created,
    /// It differed in these fields: updated (State Manager runs it again).
    Updated {
        /// What changed.
        changed: Vec<&'static str>,
    },
    /// It already was what it must be.
    Unchanged,
}

/// `deploy`'s answer.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeployOutcome {
    /// What was done.
    #[serde(flatten)]
    pub deployed: Deployed,
    /// The association now.
    pub association: Association,
    /// The document it runs, and why it is trusted.
    pub document: SentDocument,
}

/// Creates the association, or brings the one of that name to what it
/// must be. The secret must hold a key set (its ARN goes in, so a secret
/// deleted and made again under the name is not followed), and the
/// document must be hostkeyctl's converge document by its hash (or one
/// named deliberately), never the shell document.
pub async fn deploy(
    store: &impl SecretStore,
    documents: &impl Dispatcher,
    associations: &impl Associations,
    req: &DeployRequest<'_>,
) -> Result<DeployOutcome, AssociationError> {
    let targets = targets(req.targets)?;
    let schedule = check_schedule(req.schedule)?;
    let document = resolve(documents, req.document, Kind::Converge, req.node_command)
        .await?
        .ok_or_else(|| AssociationError::NotDeployed(crate::escape::escape(req.document)))?;
    if document.trust == Trust::Shell {
        return Err(AssociationError::NotDeployed(crate::escape::escape(req.document)));
    }
    if document.trust == Trust::Custom {
        tracing::warn!(
            "the association runs the custom SSM document {} (version {}, SHA-256 {}), not hostkeyctl's own: whoever may update it decides what runs as root on every target, on every schedule",
            crate::escape::escape(&document.name),
            crate::escape::escape(document.version.as_deref().unwrap_or("?")),
            crate::escape::escape(document.sha256.as_deref().unwrap_or("?"))
        );
    }
    let desired = desired_state(store, req.secret).await?;
    let secret = store.describe(req.secret).await?;
    crate::discovery::scope::check_written(&secret.tags, req.targets, req.allow_other_clusters)?;
    let spec = AssociationSpec {
        name: req.name.to_owned(),
        document: document.name.clone(),
        document_version: document.version.clone().unwrap_or_default(),
        parameters: converge_parameters(desired.current.arn.as_str(), req.region),
        targets,
        schedule,
        max_concurrency: req.max_concurrency.to_owned(),
        max_errors: req.max_errors.to_owned(),
    };
    let (deployed, association) = upsert(associations, &spec, |existing| {
        let secret_of = |s: &AssociationSpec| s.parameters.get("SecretId").cloned().unwrap_or_default();
        (secret_of(existing) != secret_of(&spec)).then(|| AssociationError::OtherSecret {
            name: crate::escape::escape(req.name),
            theirs: crate::escape::escape(&secret_of(existing).join(",")),
            ours: desired.current.arn.to_string(),
        })
    })
    .await?;
    Ok(DeployOutcome {
        deployed,
        association,
        document,
    })
}

/// Creates the association `spec` names, or brings the one of that name to
/// it, unless `refuse` objects to the one there.
pub(super) async fn upsert(
    associations: &impl Associations,
    spec: &AssociationSpec,
    refuse: impl FnOnce(&AssociationSpec) -> Option<AssociationError>,
) -> Result<(Deployed, Association), AssociationError> {
    Ok(match one(associations, &spec.name).await? {
        None => (Deployed::Created, associations.create(spec).await?),
        Some(existing) => {
            if let Some(e) = refuse(&existing.spec) {
                return Err(e);
            }
            let changed = existing.spec.differences(spec);
            if changed.is_empty() {
                (Deployed::Unchanged, existing)
            } else {
                let updated = associations.update(&existing.id, spec).await?;
                (Deployed::Updated { changed }, updated)
            }
        }
    })
}

/// The association named `name`, if there is one.
pub(super) async fn one(associations: &impl Associations, name: &str) -> Result<Option<Association>, AssociationError> {
    let mut all = associations.named(name).await?;
    if all.len() > 1 {
        return Err(AssociationError::Ambiguous {
            name: crate::escape::escape(name),
            count: all.len(),
            ids: all.iter().map(|a| a.id.as_str()).collect::<Vec<_>>().join(", "),
        });
    }
    Ok(all.pop())
}

/// What `show` found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Shown {
    /// The association.
    pub association: Association,
    /// Whether the document version it runs is the one hostkeyctl's
    /// document holds now (by hash); why not, otherwise.
    pub document: DocumentCheck,
}

impl Shown {
    /// An association that runs something else is drift to act on (exit
    /// 1).
    pub fn status(&self) -> crate::exit::Status {
        match self.document {
            DocumentCheck::Ours => crate::exit::Status::Success,
            DocumentCheck::Other { .. } => crate::exit::Status::Drift,
        }
    }
}

/// Whether an association still runs hostkeyctl's document.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "document_check", rename_all = "snake_case")]
pub enum DocumentCheck {
    /// It runs the version that holds this binary's content.
    Ours,
    /// It runs another document or version: `association deploy` puts it
    /// right.
    Other {
        /// Why.
        reason: String,
    },
}

/// The association named `name` and whether it runs hostkeyctl's
/// document; `None` when there is none.
pub async fn show(
    documents: &impl Dispatcher,
    associations: &impl Associations,
    name: &str,
    document: &str,
    node_command: &Program,
) -> Result<Option<Shown>, AssociationError> {
    let Some(association) = one(associations, name).await? else {
        return Ok(None);
    };
    let check = if association.spec.document != document {
        DocumentCheck::Other {
            reason: format!(
                "it runs document {}, not {}",
                crate::escape::escape(&association.spec.document),
                crate::escape::escape(document)
            ),
        }
    } else {
        match resolve(documents, document, Kind::Converge, node_command).await {
            Ok(Some(sent))
                if sent.trust == Trust::Pinned
                    && sent.version.as_deref() == Some(&association.spec.document_version) =>
            {
                DocumentCheck::Ours
            }
            Ok(Some(sent)) if sent.trust == Trust::Pinned => DocumentCheck::Other {
                reason: format!(
                    "it runs version {} of {}, and hostkeyctl's content is version {}",
                    crate::escape::escape(&association.spec.document_version),
                    crate::escape::escape(document),
                    crate::escape::escape(sent.version.as_deref().unwrap_or("?"))
                ),
            },
            Ok(Some(_)) => DocumentCheck::Other {
                reason: format!("{} is a custom document", crate::escape::escape(document)),
            },
            Ok(None) => DocumentCheck::Other {
                reason: format!("{} is not deployed", crate::escape::escape(document)),
            },
            Err(e) => DocumentCheck::Other { reason: e.to_string() },
        }
    };
    Ok(Some(Shown {
        association,
        document: check,
    }))
}

impl crate::exit::ExitStatus for AssociationError {
    /// The cause's status; a refusal 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            AssociationError::Aws(a) => a.status(),
            AssociationError::Store(s) => s.status(),
            AssociationError::Document(d) => d.status(),
            _ => crate::exit::Status::Usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{AssociationError, Target, check_schedule, targets};
    use crate::discovery::TargetSpec;

    #[test]
    fn only_tags_or_instance_ids_are_targets() {
        let spec = |s: &str| s.parse::<TargetSpec>().unwrap();
        assert_eq!(
            targets(&[spec("tag:Role=login"), spec("tag:Cluster=c1")]).unwrap(),
            [
                Target {
                    key: "tag:Role".to_owned(),
                    values: vec!["login".to_owned()]
                },
                Target {
                    key: "tag:Cluster".to_owned(),
                    values: vec!["c1".to_owned()]
                }
            ]
        );
        assert_eq!(
            targets(&[spec("i-0123456789abcdef0"), spec("i-0123456789abcdef1")]).unwrap()[0]
                .values
                .len(),
            2
        );
        assert!(matches!(
            targets(&[spec("tag:Role=login"), spec("i-0123456789abcdef0")]),
            Err(AssociationError::Mixed)
        ));
        assert!(matches!(targets(&[spec("lb:my-lb")]), Err(AssociationError::Source(_))));
        assert!(matches!(
            targets(&[spec("hyperpod:c")]),
            Err(AssociationError::Source(_))
        ));
        assert!(matches!(targets(&[]), Err(AssociationError::NoTargets)));
    }

    #[test]
    fn schedules_are_checked_as_state_manager_checks_them() {
        for ok in [
            "rate(30 minutes)",
            "rate(1 hour)",
            "rate(2 days)",
            "cron(0 */2 * * ? *)",
        ] {
            assert!(check_schedule(ok).is_ok(), "{ok}");
        }
        for bad in [
            "rate(5 minutes)",
            "rate(1 hours)",
            "rate(2 hour)",
            "every hour",
            "rate(x minutes)",
            "cron()",
        ] {
            assert!(check_schedule(bad).is_err(), "{bad}");
        }
    }
}
