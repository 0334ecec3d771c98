//! A load balancer's target group and an Auto Scaling group's launch hook,
//! in memory ([`crate::admission::TargetGroups`],
//! [`crate::admission::LifecycleHooks`]): what admission's flow is tested
//! over without ELB.
//!
//! A target is an id *and a port*, as in Elastic Load Balancing (API
//! Reference, `TargetDescription`: registering one id on two ports makes
//! two targets); a registration takes the group's port. Every call is
//! recorded, so a test says what changed.

use std::sync::Mutex;

use crate::admission::{Group, GroupSpec, LifecycleHooks, TargetGroups};
use crate::aws_error::AwsError;
use crate::discovery::{DiscoveryError, GroupTarget, Health};

/// One target group, any spec names it.
#[derive(Debug)]
pub struct MemTargetGroups {
    group: Mutex<Group>,
    port: u16,
    /// Every registration, as (id, port).
    pub registered: Mutex<Vec<(String, Option<u16>)>>,
    /// Every deregistration, as (id, port).
    pub deregistered: Mutex<Vec<(String, Option<u16>)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MemTargetGroups {
    /// An `ip` target group `name` on `port`, its targets `(address, port,
    /// state)`.
    pub fn ip(name: &str, port: u16, targets: &[(&str, u16, &str)]) -> Self {
        let targets = targets
            .iter()
            .map(|(id, at, state)| GroupTarget {
                id: (*id).to_owned(),
                is_instance: false,
                port: Some(*at),
                health: Health {
                    source: format!("target group {name}"),
                    state: (*state).to_owned(),
                    reason: None,
                },
            })
            .collect();
        MemTargetGroups {
            group: Mutex::new(Group {
                arn: format!("arn:aws:elasticloadbalancing:us-east-1:111122223333:targetgroup/{name}/0"),
                name: name.to_owned(),
                target_type: "ip".to_owned(),
                targets,
            }),
            port,
            registered: Mutex::new(Vec::new()),
            deregistered: Mutex::new(Vec::new()),
        }
    }

    /// The targets, as (id, port).
    pub fn targets(&self) -> Vec<(String, Option<u16>)> {
        lock(&self.group)
            .targets
            .iter()
            .map(|t| (t.id.clone(), t.port))
            .collect()
    }
}

impl TargetGroups for MemTargetGroups {
    async fn group(&self, _spec: &GroupSpec, _port: u16) -> Result<Group, DiscoveryError> {
        Ok(lock(&self.group).clone())
    }

    async fn register(&self, _group: &Group, ids: &[String]) -> Result<(), AwsError> {
        let mut group = lock(&self.group);
        for id in ids {
            lock(&self.registered).push((id.clone(), Some(self.port)));
            if !group.targets.iter().any(|t| t.id == *id && t.port == Some(self.port)) {
                let source = format!("target group {}", group.name);
                group.targets.push(GroupTarget {
                    id: id.clone(),
                    is_instance: false,
                    port: Some(self.port),
                    health: Health {
                        source,
                        state: "initial".to_owned(),
                        reason: None,
                    },
                });
            }
        }
        Ok(())
    }

    async fn deregister(&self, _group: &Group, targets: &[(String, Option<u16>)]) -> Result<(), AwsError> {
        let mut group = lock(&self.group);
        for (id, port) in targets {
            lock(&self.deregistered).push((id.clone(), *port));
            group.targets.retain(|t| !(t.id == *id && t.port == *port));
        }
        Ok(())
    }
}

/// An Auto Scaling group's launch hook: instances waiting in
/// `Pending:Wait`, and those put in service.
#[derive(Debug, Default)]
pub struct MemHooks {
    /// Waiting in `Pending:Wait`.
    pub waiting: Mutex<Vec<String>>,
    /// Completed with `CONTINUE`.
    pub continued: Mutex<Vec<String>>,
}

impl LifecycleHooks for MemHooks {
    async fn waiting(&self, _group: &str) -> Result<Vec<String>, AwsError> {
        Ok(lock(&self.waiting).clone())
    }

    async fn proceed(&self, _group: &str, _hook: &str, instance_id: &str) -> Result<(), AwsError> {
        lock(&self.waiting).retain(|i| i != instance_id);
        lock(&self.continued).push(instance_id.to_owned());
        Ok(())
    }
}
