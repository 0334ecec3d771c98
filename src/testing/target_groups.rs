//! A load balancer's target group and an Auto Scaling group's launch hook,
//! in memory ([`crate::admission::TargetGroups`],
//! [`crate::admission::LifecycleHooks`]): what admission's flow is tested
//! over without ELB.
//!
//! A target is an id *and a port*, as in Elastic Load Balancing (API
//! Reference, `TargetDescription`: registering one id on two ports makes
//! two targets); a registration takes the group's port. Every call is
//! recorded, so a test says what changed, and each can be faulted
//! ([`Faults`]). The group's settings answer `doctor`'s balancer checks
//! ([`crate::admission::Balancers`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::faults::Faults;
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
    /// Its attributes, as `doctor` reads them (a Network Load Balancer's
    /// TCP target group's defaults at first).
    pub attributes: Mutex<BTreeMap<String, String>>,
    /// Faults (`elasticloadbalancing:DescribeTargetHealth`,
    /// `elasticloadbalancing:RegisterTargets`,
    /// `elasticloadbalancing:DeregisterTargets`).
    pub faults: Faults,
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
            // Elastic Load Balancing API Reference, TargetGroupAttribute:
            // an ip target group over TCP preserves no client address,
            // sends no proxy protocol header, and resets connections to an
            // unhealthy target.
            attributes: Mutex::new(BTreeMap::from(
                [
                    ("preserve_client_ip.enabled", "false"),
                    ("proxy_protocol_v2.enabled", "false"),
                    ("deregistration_delay.timeout_seconds", "300"),
                    ("target_health_state.unhealthy.connection_termination.enabled", "true"),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
            )),
            faults: Faults::new(),
        }
    }

    /// Every target as (id, port, state).
    pub fn states(&self) -> Vec<(String, Option<u16>, String)> {
        lock(&self.group)
            .targets
            .iter()
            .map(|t| (t.id.clone(), t.port, t.health.state.clone()))
            .collect()
    }

    /// Sets the state (and reason) the group reports for target `id` on
    /// `port`, as its health checks or a drain would.
    pub fn set_state(&self, id: &str, port: u16, state: &str, reason: Option<&str>) {
        for t in lock(&self.group)
            .targets
            .iter_mut()
            .filter(|t| t.id == id && t.port == Some(port))
        {
            t.health.state = state.to_owned();
            t.health.reason = reason.map(str::to_owned);
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
        self.faults.enter("elasticloadbalancing:DescribeTargetHealth")?;
        Ok(lock(&self.group).clone())
    }

    async fn register(&self, _group: &Group, ids: &[String]) -> Result<(), AwsError> {
        self.faults.enter("elasticloadbalancing:RegisterTargets")?;
        let mut group = lock(&self.group);
        for id in ids {
            lock(&self.registered).push((id.clone(), Some(self.port)));
            // One draining is registered again, checks from the start (as
            // testbed/emulator/targets.py models ELB).
            group
                .targets
                .retain(|t| !(t.id == *id && t.port == Some(self.port) && t.health.state == "draining"));
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

    /// A deregistered target drains (Elastic Load Balancing, "Deregistration
    /// delay"): it stays listed `draining` until a test ends the drain
    /// ([`MemTargetGroups::end_drains`]).
    async fn deregister(&self, _group: &Group, targets: &[(String, Option<u16>)]) -> Result<(), AwsError> {
        self.faults.enter("elasticloadbalancing:DeregisterTargets")?;
        let mut group = lock(&self.group);
        for (id, port) in targets {
            lock(&self.deregistered).push((id.clone(), *port));
            for t in group.targets.iter_mut().filter(|t| t.id == *id && t.port == *port) {
                t.health.state = "draining".to_owned();
                t.health.reason = Some("Target.DeregistrationInProgress".to_owned());
            }
        }
        Ok(())
    }
}

impl MemTargetGroups {
    /// The deregistration delay ends: draining targets leave the group.
    pub fn end_drains(&self) {
        lock(&self.group).targets.retain(|t| t.health.state != "draining");
    }
}

impl crate::admission::Balancers for MemTargetGroups {
    async fn settings(&self, _spec: &GroupSpec, _port: u16) -> Result<crate::admission::GroupSettings, DiscoveryError> {
        self.faults
            .enter("elasticloadbalancing:DescribeTargetGroupAttributes")?;
        Ok(crate::admission::GroupSettings {
            group: lock(&self.group).clone(),
            protocol: "TCP".to_owned(),
            port: Some(self.port),
            health_check_protocol: "TCP".to_owned(),
            health_check_port: "traffic-port".to_owned(),
            attributes: lock(&self.attributes).clone(),
        })
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
    /// Faults (`autoscaling:DescribeAutoScalingGroups`,
    /// `autoscaling:CompleteLifecycleAction`).
    pub faults: Faults,
}

impl LifecycleHooks for MemHooks {
    async fn waiting(&self, _group: &str) -> Result<Vec<String>, AwsError> {
        self.faults.enter("autoscaling:DescribeAutoScalingGroups")?;
        Ok(lock(&self.waiting).clone())
    }

    async fn proceed(&self, _group: &str, _hook: &str, instance_id: &str) -> Result<(), AwsError> {
        self.faults.enter("autoscaling:CompleteLifecycleAction")?;
        lock(&self.waiting).retain(|i| i != instance_id);
        lock(&self.continued).push(instance_id.to_owned());
        Ok(())
    }
}
