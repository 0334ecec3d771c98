//! `lb:` and `tg:` targets: the targets of a Network Load Balancer's
//! target groups, with their health, through Elastic Load Balancing v2;
//! and admission's registering and deregistering ([`AwsTargetGroups`]).

use aws_sdk_elasticloadbalancingv2::Client;
use aws_sdk_elasticloadbalancingv2::types::{TargetDescription, TargetTypeEnum};

use crate::admission::{Group, GroupSpec, TargetGroups};
use crate::aws::{AwsError, Call};
use crate::discovery::{DiscoveryError, GroupTarget, Health, Listener};

fn port_of(port: Option<i32>) -> Option<u16> {
    port.and_then(|p| u16::try_from(p).ok())
}

/// The load balancer `name_or_arn` and its listener on `port`.
pub async fn listener(client: &Client, name_or_arn: &str, port: u16) -> Result<Listener, DiscoveryError> {
    let call = Call::new(
        "elasticloadbalancing:DescribeLoadBalancers",
        format!("load balancer {name_or_arn}"),
    );
    let request = if name_or_arn.starts_with("arn:") {
        client.describe_load_balancers().load_balancer_arns(name_or_arn)
    } else {
        client.describe_load_balancers().names(name_or_arn)
    };
    let found = request.send().await.map_err(|e| AwsError::from_sdk(e, &call))?;
    let Some(lb) = found.load_balancers().first() else {
        return Err(AwsError::NotFound {
            action: call.action,
            resource: call.resource,
            message: "no such load balancer".to_owned(),
        }
        .into());
    };
    let (Some(arn), Some(dns_name)) = (lb.load_balancer_arn(), lb.dns_name()) else {
        return Err(DiscoveryError::Malformed(format!(
            "load balancer {name_or_arn} has no ARN or DNS name"
        )));
    };
    let name = lb.load_balancer_name().unwrap_or(name_or_arn).to_owned();
    let call = Call::new(
        "elasticloadbalancing:DescribeListeners",
        format!("load balancer {name}"),
    );
    let mut pages = client
        .describe_listeners()
        .load_balancer_arn(arn)
        .into_paginator()
        .send();
    let mut others = Vec::new();
    let mut target_groups = Vec::new();
    let mut matched = false;
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| AwsError::from_sdk(e, &call))?;
        for l in page.listeners() {
            let protocol = l.protocol().map_or("?", |p| p.as_str());
            if port_of(l.port()) != Some(port) {
                others.push(format!("{protocol}:{}", l.port().unwrap_or_default()));
                continue;
            }
            matched = true;
            for action in l.default_actions() {
                target_groups.extend(action.target_group_arn().map(str::to_owned));
                if let Some(forward) = action.forward_config() {
                    target_groups.extend(
                        forward
                            .target_groups()
                            .iter()
                            .filter_map(|t| t.target_group_arn().map(str::to_owned)),
                    );
                }
            }
        }
    }
    if !matched {
        return Err(DiscoveryError::NoListener {
            lb: name,
            port,
            listeners: others,
        });
    }
    target_groups.sort();
    target_groups.dedup();
    Ok(Listener {
        name,
        dns_name: dns_name.to_owned(),
        port,
        target_groups,
    })
}

/// Every registered target of the target group `arn`, with its health.
pub async fn targets(client: &Client, arn: &str) -> Result<(String, Vec<GroupTarget>), DiscoveryError> {
    let group = group(client, arn).await?;
    Ok((group.name, group.targets))
}

/// The target group `arn`: its name, target type and targets with their
/// health.
pub async fn group(client: &Client, arn: &str) -> Result<Group, DiscoveryError> {
    let call = Call::new(
        "elasticloadbalancing:DescribeTargetGroups",
        format!("target group {arn}"),
    );
    let groups = client
        .describe_target_groups()
        .target_group_arns(arn)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk(e, &call))?;
    let Some(group) = groups.target_groups().first() else {
        return Err(AwsError::NotFound {
            action: call.action,
            resource: call.resource,
            message: "no such target group".to_owned(),
        }
        .into());
    };
    let name = group.target_group_name().unwrap_or(arn).to_owned();
    let kind = group.target_type().cloned();
    if !matches!(kind, Some(TargetTypeEnum::Instance | TargetTypeEnum::Ip)) {
        return Err(DiscoveryError::Malformed(format!(
            "target group {name} has targets of type {}; only instance and ip target groups lead to login nodes",
            kind.as_ref().map_or("unknown", TargetTypeEnum::as_str)
        )));
    }
    let call = Call::new(
        "elasticloadbalancing:DescribeTargetHealth",
        format!("target group {name}"),
    );
    let health = client
        .describe_target_health()
        .target_group_arn(arn)
        .send()
        .await
        .map_err(|e| AwsError::from_sdk(e, &call))?;
    let mut out = Vec::new();
    for d in health.target_health_descriptions() {
        let Some(target) = d.target() else { continue };
        let Some(id) = target.id() else { continue };
        let th = d.target_health();
        out.push(GroupTarget {
            id: id.to_owned(),
            is_instance: kind == Some(TargetTypeEnum::Instance),
            port: port_of(target.port()),
            health: Health {
                source: format!("target group {name}"),
                state: th
                    .and_then(|h| h.state())
                    .map_or("unknown".to_owned(), |s| s.as_str().to_owned()),
                reason: th.and_then(|h| h.reason()).map(|r| r.as_str().to_owned()),
            },
        });
    }
    Ok(Group {
        arn: group.target_group_arn().unwrap_or(arn).to_owned(),
        name,
        target_type: kind.as_ref().map_or("unknown", TargetTypeEnum::as_str).to_owned(),
        targets: out,
    })
}

/// The target groups admission keeps, through Elastic Load Balancing v2.
pub struct AwsTargetGroups {
    elb: Client,
}

impl AwsTargetGroups {
    /// Target groups read and changed with `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        AwsTargetGroups {
            elb: Client::new(config),
        }
    }

    fn descriptions(ids: &[String]) -> Vec<TargetDescription> {
        ids.iter()
            .map(|id| TargetDescription::builder().id(id).build())
            .collect()
    }
}

impl TargetGroups for AwsTargetGroups {
    async fn group(&self, spec: &GroupSpec, port: u16) -> Result<Group, DiscoveryError> {
        let arn = match spec {
            GroupSpec::TargetGroup(arn) => arn.clone(),
            GroupSpec::LoadBalancer(lb) => {
                let l = listener(&self.elb, lb, port).await?;
                match l.target_groups.as_slice() {
                    [one] => one.clone(),
                    [] => {
                        return Err(DiscoveryError::Malformed(format!(
                            "load balancer {} forwards port {port} to no target group",
                            l.name
                        )));
                    }
                    many => {
                        return Err(DiscoveryError::Malformed(format!(
                            "load balancer {} forwards port {port} to {} target groups ({}); name one with --target-group tg:ARN",
                            l.name,
                            many.len(),
                            many.join(", ")
                        )));
                    }
                }
            }
        };
        group(&self.elb, &arn).await
    }

    async fn register(&self, group: &Group, ids: &[String]) -> Result<(), AwsError> {
        let call = Call::new(
            "elasticloadbalancing:RegisterTargets",
            format!("target group {}", group.arn),
        );
        self.elb
            .register_targets()
            .target_group_arn(&group.arn)
            .set_targets(Some(Self::descriptions(ids)))
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }

    async fn deregister(&self, group: &Group, targets: &[(String, Option<u16>)]) -> Result<(), AwsError> {
        let call = Call::new(
            "elasticloadbalancing:DeregisterTargets",
            format!("target group {}", group.arn),
        );
        self.elb
            .deregister_targets()
            .target_group_arn(&group.arn)
            .set_targets(Some(
                targets
                    .iter()
                    .map(|(id, port)| {
                        TargetDescription::builder()
                            .id(id)
                            .set_port(port.map(i32::from))
                            .build()
                    })
                    .collect(),
            ))
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }
}

impl crate::admission::Balancers for AwsTargetGroups {
    async fn settings(&self, spec: &GroupSpec, port: u16) -> Result<crate::admission::GroupSettings, DiscoveryError> {
        let group = TargetGroups::group(self, spec, port).await?;
        let call = Call::new(
            "elasticloadbalancing:DescribeTargetGroups",
            format!("target group {}", group.name),
        );
        let described = self
            .elb
            .describe_target_groups()
            .target_group_arns(&group.arn)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        let one = described.target_groups().first();
        let text = |v: Option<&str>| v.unwrap_or("unknown").to_owned();
        let call = Call::new(
            "elasticloadbalancing:DescribeTargetGroupAttributes",
            format!("target group {}", group.name),
        );
        let attributes = self
            .elb
            .describe_target_group_attributes()
            .target_group_arn(&group.arn)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?
            .attributes()
            .iter()
            .filter_map(|a| Some((a.key()?.to_owned(), a.value()?.to_owned())))
            .collect();
        Ok(crate::admission::GroupSettings {
            protocol: text(one.and_then(|g| g.protocol()).map(|p| p.as_str())),
            port: port_of(one.and_then(|g| g.port())),
            health_check_protocol: text(one.and_then(|g| g.health_check_protocol()).map(|p| p.as_str())),
            health_check_port: text(one.and_then(|g| g.health_check_port())),
            attributes,
            group,
        })
    }
}
