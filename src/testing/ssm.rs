//! SSM's other services in memory: State Manager's associations
//! ([`crate::association::Associations`]), Fleet Manager's registrations
//! ([`crate::dispatch::ManagedInstances`]), Run Command's invocations as
//! polling reads them ([`crate::dispatch::InvocationSource`]), and
//! CloudWatch's PutMetricData ([`crate::audit::metrics::MetricsSink`]).
//! Each has [`Faults`]. The documents are [`super::MemDispatcher`]'s.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::faults::Faults;
use super::fleet::lock;
use crate::association::{Association, AssociationSpec, Associations};
use crate::audit::metrics::{Datum, MetricsSink};
use crate::aws_error::AwsError;
use crate::dispatch::{Invocation, InvocationSource};
use crate::dispatch::{ManagedInstances, Registration};

/// State Manager in memory: associations by id, and every write made.
#[derive(Debug, Default)]
pub struct MemAssociations {
    /// Every association.
    pub all: Mutex<Vec<Association>>,
    writes: Mutex<Vec<String>>,
    /// Faults (`ssm:ListAssociations`, `ssm:CreateAssociation`,
    /// `ssm:UpdateAssociation`, `ssm:DeleteAssociation`).
    pub faults: Faults,
}

impl MemAssociations {
    /// The writes made, in order (`create NAME`, `update ID`, `delete ID`).
    pub fn writes(&self) -> Vec<String> {
        lock(&self.writes).clone()
    }
}

impl Associations for MemAssociations {
    async fn named(&self, name: &str) -> Result<Vec<Association>, AwsError> {
        self.faults.enter("ssm:ListAssociations")?;
        Ok(lock(&self.all)
            .iter()
            .filter(|a| a.spec.name == name)
            .cloned()
            .collect())
    }

    async fn running(&self, document: &str) -> Result<Vec<Association>, AwsError> {
        self.faults.enter("ssm:ListAssociations")?;
        Ok(lock(&self.all)
            .iter()
            .filter(|a| a.spec.document == document)
            .cloned()
            .collect())
    }

    async fn create(&self, spec: &AssociationSpec) -> Result<Association, AwsError> {
        self.faults.enter("ssm:CreateAssociation")?;
        let mut all = lock(&self.all);
        let association = Association {
            id: format!("assoc-{}", all.len() + 1),
            version: Some("1".to_owned()),
            spec: spec.clone(),
            status: None,
            instances_by_status: BTreeMap::new(),
            last_execution: None,
            last_success: None,
        };
        all.push(association.clone());
        lock(&self.writes).push(format!("create {}", spec.name));
        Ok(association)
    }

    async fn update(&self, id: &str, spec: &AssociationSpec) -> Result<Association, AwsError> {
        self.faults.enter("ssm:UpdateAssociation")?;
        let mut all = lock(&self.all);
        let Some(a) = all.iter_mut().find(|a| a.id == id) else {
            return Err(AwsError::NotFound {
                action: "ssm:UpdateAssociation",
                resource: format!("association {id}"),
                message: "AssociationDoesNotExist".to_owned(),
            });
        };
        a.spec = spec.clone();
        let version: u32 = a.version.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0);
        a.version = Some((version + 1).to_string());
        lock(&self.writes).push(format!("update {id}"));
        Ok(a.clone())
    }

    async fn delete(&self, id: &str) -> Result<(), AwsError> {
        self.faults.enter("ssm:DeleteAssociation")?;
        lock(&self.all).retain(|a| a.id != id);
        lock(&self.writes).push(format!("delete {id}"));
        Ok(())
    }
}

/// The instances SSM manages: each id's ping status and agent version.
#[derive(Debug, Default)]
pub struct MemManagedInstances {
    /// Registrations by instance id (the others are not managed).
    pub registered: Mutex<BTreeMap<String, Registration>>,
    /// Faults (`ssm:DescribeInstanceInformation`).
    pub faults: Faults,
}

impl MemManagedInstances {
    /// Registers `id` with `ping_status` and the agent `version`.
    pub fn register(&self, id: &str, ping_status: &str, version: Option<&str>) {
        lock(&self.registered).insert(
            id.to_owned(),
            Registration {
                ping_status: ping_status.to_owned(),
                agent_version: version.map(str::to_owned),
            },
        );
    }
}

impl ManagedInstances for MemManagedInstances {
    async fn registrations(&self, ids: &[String]) -> Result<BTreeMap<String, Registration>, AwsError> {
        self.faults.enter("ssm:DescribeInstanceInformation")?;
        let registered = lock(&self.registered);
        Ok(ids
            .iter()
            .filter_map(|id| registered.get(id).map(|r| (id.clone(), r.clone())))
            .collect())
    }
}

/// One command as Run Command shows it: its instances, how many reads
/// before it is visible (SSM's grace for a fresh command: NotFound until
/// then), how many before it ends, and how each instance ends.
#[derive(Debug, Clone)]
pub struct MemCommand {
    /// Its instances.
    pub instances: Vec<String>,
    /// Reads answered `InvalidCommandId` first.
    pub hidden_reads: usize,
    /// Reads answered `InProgress` after that.
    pub running_reads: usize,
    /// The final status (`Success`, `Failed`, ...) and exit code.
    pub ends: (String, Option<i32>),
}

/// Run Command's invocations, as `ListCommandInvocations` pages them.
#[derive(Debug, Default)]
pub struct MemInvocations {
    commands: Mutex<BTreeMap<String, (MemCommand, usize)>>,
    /// Faults (`ssm:ListCommandInvocations`).
    pub faults: Faults,
}

impl MemInvocations {
    /// Adds command `id`.
    pub fn add(&self, id: &str, command: MemCommand) {
        lock(&self.commands).insert(id.to_owned(), (command, 0));
    }

    /// Command `id` on `instances`, done with `Success` after
    /// `running_reads` reads in progress.
    pub fn succeeding(&self, id: &str, instances: Vec<String>, running_reads: usize) {
        self.add(
            id,
            MemCommand {
                instances,
                hidden_reads: 0,
                running_reads,
                ends: ("Success".to_owned(), Some(0)),
            },
        );
    }

    /// How many times command `id` was read.
    pub fn reads(&self, id: &str) -> usize {
        lock(&self.commands).get(id).map_or(0, |(_, n)| *n)
    }
}

impl InvocationSource for MemInvocations {
    async fn list(&self, command_id: &str, calls: &mut usize) -> Result<Vec<Invocation>, AwsError> {
        *calls += 1;
        self.faults.enter("ssm:ListCommandInvocations")?;
        let mut commands = lock(&self.commands);
        let not_found = || AwsError::NotFound {
            action: "ssm:ListCommandInvocations",
            resource: command_id.to_owned(),
            message: "InvalidCommandId".to_owned(),
        };
        let (command, reads) = commands.get_mut(command_id).ok_or_else(not_found)?;
        *reads += 1;
        if *reads <= command.hidden_reads {
            return Err(not_found());
        }
        let done = *reads > command.hidden_reads + command.running_reads;
        let (status, code) = if done {
            command.ends.clone()
        } else {
            ("InProgress".to_owned(), None)
        };
        Ok(command
            .instances
            .iter()
            .map(|id| Invocation {
                instance_id: id.clone(),
                command_id: command_id.to_owned(),
                status: status.clone(),
                response_code: code,
                stdout: String::new(),
                stderr: String::new(),
            })
            .collect())
    }
}

/// CloudWatch's PutMetricData: every datum put, by namespace.
#[derive(Debug, Default)]
pub struct MemMetrics {
    /// (namespace, datum), in order.
    pub put: Mutex<Vec<(String, Datum)>>,
    /// Faults (`cloudwatch:PutMetricData`).
    pub faults: Faults,
}

impl MetricsSink for MemMetrics {
    async fn put(&self, namespace: &str, datums: &[Datum]) -> Result<(), AwsError> {
        self.faults.enter("cloudwatch:PutMetricData")?;
        lock(&self.put).extend(datums.iter().map(|d| (namespace.to_owned(), d.clone())));
        Ok(())
    }
}
