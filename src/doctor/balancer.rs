//! The load balancer's target group, the way users reach the nodes: TCP
//! through to sshd (never TLS, never a PROXY header), a health check that
//! asks sshd's port, what client addresses sshd sees, and which nodes it
//! sends users to (Elastic Load Balancing API Reference,
//! `DescribeTargetGroups`, `DescribeTargetGroupAttributes`,
//! `DescribeTargetHealth`).

use super::{Finding, Level};
use crate::admission::{GroupSettings, GroupSpec};
use crate::discovery::{Instance, TargetSpec};
use crate::escape::escape;

/// The target group to look at: `--target-group`, or the one `lb:`/`tg:`
/// target the nodes were named by.
pub fn group_of(given: Option<&GroupSpec>, targets: &[TargetSpec]) -> Option<GroupSpec> {
    if let Some(spec) = given {
        return Some(spec.clone());
    }
    let mut groups = targets.iter().filter_map(|t| match t {
        TargetSpec::LoadBalancer(lb) => Some(GroupSpec::LoadBalancer(lb.clone())),
        TargetSpec::TargetGroup(tg) => Some(GroupSpec::TargetGroup(tg.clone())),
        _ => None,
    });
    match (groups.next(), groups.next()) {
        (Some(one), None) => Some(one),
        _ => None,
    }
}

/// What the target group's settings and targets mean for users reaching
/// `nodes` on `port` through it (`nodes` unknown: their lookup failed,
/// and the targets are not compared with them).
pub fn judge(s: &GroupSettings, nodes: Option<&[Instance]>, port: u16) -> Vec<Finding> {
    let subject = format!("target group {}", escape(&s.group.name));
    let arn = crate::shell::quote(&s.group.arn).unwrap_or_else(|_| s.group.arn.clone());
    let modify = format!("aws elbv2 modify-target-group-attributes --target-group-arn {arn} --attributes");
    let mut out = Vec::new();
    out.push(match s.protocol.as_str() {
        "TCP" | "TCP_UDP" | "TCP_QUIC" => {
            Finding::ok("balancer", subject.clone(), format!("forwards {} to sshd", s.protocol))
        }
        other => Finding::bad(
            "balancer",
            Level::Fail,
            subject.clone(),
            format!(
                "forwards {}: ssh needs the TCP stream as the client sent it",
                escape(other)
            ),
            "create a TCP target group on the SSH port and point the listener at it (a group's protocol cannot change)",
        ),
    });
    if s.attributes.get("proxy_protocol_v2.enabled").map(String::as_str) == Some("true") {
        out.push(Finding::bad(
            "balancer",
            Level::Fail,
            subject.clone(),
            "proxy protocol v2 is on: sshd reads its header as the client's banner and drops every connection",
            format!("{modify} Key=proxy_protocol_v2.enabled,Value=false"),
        ));
    }
    out.push(health_check(s, &subject, port, &arn));
    // Either choice is sound; each has a cost the admin should know.
    let preserved = s.attributes.get("preserve_client_ip.enabled").map(String::as_str) == Some("true");
    out.push(Finding::ok(
        "balancer",
        subject.clone(),
        if preserved {
            "client IP preservation on: sshd sees each client's address; a login node that connects through the balancer may be sent to itself and time out"
        } else {
            "client IP preservation off: sshd sees the balancer's addresses, so OpenSSH 9.8+ penalties are shared by every user unless exempted (docs/audit.md, \"PerSourcePenalties\")"
        },
    ));
    if let Some(nodes) = nodes {
        out.extend(targets(s, &subject, nodes));
    }
    out
}

fn health_check(s: &GroupSettings, subject: &str, port: u16, arn: &str) -> Finding {
    let fix = format!(
        "aws elbv2 modify-target-group --target-group-arn {arn} --health-check-protocol TCP --health-check-port traffic-port"
    );
    // sshd's port: the group's, each target's own, or the listener's.
    let ports: Vec<String> = s
        .port
        .into_iter()
        .chain(s.group.targets.iter().filter_map(|t| t.port))
        .chain([port])
        .map(|p| p.to_string())
        .collect();
    let on_sshd = s.health_check_port == "traffic-port" || ports.contains(&s.health_check_port);
    match (s.health_check_protocol.as_str(), on_sshd) {
        ("TCP", true) => Finding::ok(
            "balancer",
            subject,
            "the health check opens a TCP connection to sshd's port",
        ),
        ("TCP", false) => Finding::bad(
            "balancer",
            Level::Warn,
            subject,
            format!(
                "the health check asks port {}, not sshd's: a node whose sshd is down stays in service",
                escape(&s.health_check_port)
            ),
            fix,
        ),
        (other, _) => Finding::bad(
            "balancer",
            Level::Warn,
            subject,
            format!(
                "the health check asks {} on port {}: it says whether a web server answers, not sshd",
                escape(other),
                escape(&s.health_check_port)
            ),
            fix,
        ),
    }
}

/// Which nodes the group sends users to: every node, healthy, and no one
/// else.
fn targets(s: &GroupSettings, subject: &str, nodes: &[Instance]) -> Vec<Finding> {
    let by_instance = s.group.by_instance();
    let id_of = |n: &Instance| {
        if by_instance {
            Some(n.instance_id.clone())
        } else {
            n.private_ip.clone()
        }
    };
    let ids: Vec<String> = nodes.iter().filter_map(id_of).collect();
    let mut out = Vec::new();
    let mut strangers = Vec::new();
    for t in &s.group.targets {
        if !ids.contains(&t.id) {
            // Only a stranger that takes users matters: a stopped node
            // (`unused`), one starting (`initial`) or leaving (`draining`)
            // is not sent new connections.
            if t.health.state == "healthy" {
                strangers.push(escape(&t.id));
            }
        } else if !matches!(t.health.state.as_str(), "healthy" | "initial" | "draining") {
            out.push(Finding::bad(
                "balancer",
                Level::Warn,
                escape(&t.id),
                format!(
                    "{} reports it {}{}",
                    subject,
                    escape(&t.health.state),
                    t.health
                        .reason
                        .as_deref()
                        .map(|r| format!(" ({})", escape(r)))
                        .unwrap_or_default()
                ),
                "is its sshd up, and does its security group admit the balancer's health checks?",
            ));
        }
    }
    if !strangers.is_empty() {
        out.push(Finding::bad(
            "balancer",
            Level::Fail,
            subject,
            format!(
                "sends users to {} that no --target names: they may serve other host keys",
                strangers.join(", ")
            ),
            "`hostkeyctl admit` keeps the group to the cluster's nodes (docs/admission.md), or widen --target",
        ));
    }
    // A node only draining is on its way out: no new connection reaches it.
    for node in nodes {
        let id = id_of(node);
        let states: Vec<&str> = s
            .group
            .targets
            .iter()
            .filter(|t| id.as_ref() == Some(&t.id))
            .map(|t| t.health.state.as_str())
            .collect();
        let how = if states.is_empty() {
            "not registered in"
        } else if states.iter().all(|state| *state == "draining") {
            "being deregistered (draining) from"
        } else {
            continue;
        };
        out.push(Finding::bad(
            "balancer",
            Level::Warn,
            super::subject_of(node),
            format!("{how} {subject}: users never reach it"),
            "`hostkeyctl admit` registers the nodes that serve the set (docs/admission.md)",
        ));
    }
    if out.is_empty() {
        out.push(Finding::ok(
            "balancer",
            subject,
            format!("sends users to the {} node(s), and to no one else", nodes.len()),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Group;
    use crate::discovery::{GroupTarget, Health};
    use std::collections::BTreeMap;

    fn node(n: u8) -> Instance {
        Instance {
            instance_id: format!("i-000000000000000{n}"),
            private_ip: Some(format!("10.0.0.{n}")),
            name: None,
            clusters: Vec::new(),
        }
    }

    fn settings(targets: &[(&str, &str)]) -> GroupSettings {
        GroupSettings {
            group: Group {
                arn: "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/login/0123456789abcdef"
                    .to_owned(),
                name: "login".to_owned(),
                target_type: "instance".to_owned(),
                targets: targets
                    .iter()
                    .map(|(id, state)| GroupTarget {
                        id: (*id).to_owned(),
                        is_instance: true,
                        port: Some(22),
                        health: Health {
                            source: "target group login".to_owned(),
                            state: (*state).to_owned(),
                            reason: None,
                        },
                    })
                    .collect(),
            },
            protocol: "TCP".to_owned(),
            port: Some(22),
            health_check_protocol: "TCP".to_owned(),
            health_check_port: "traffic-port".to_owned(),
            attributes: BTreeMap::from([("preserve_client_ip.enabled".to_owned(), "true".to_owned())]),
        }
    }

    fn levels(findings: &[Finding]) -> Vec<Level> {
        findings.iter().map(|f| f.level).collect()
    }

    #[test]
    fn a_tcp_group_of_every_healthy_node_is_ok() {
        let s = settings(&[("i-0000000000000001", "healthy"), ("i-0000000000000002", "healthy")]);
        let f = judge(&s, Some(&[node(1), node(2)]), 22);
        assert!(f.iter().all(|f| f.level == Level::Ok), "{f:#?}");
    }

    #[test]
    fn tls_a_proxy_header_and_a_stranger_fail_an_http_check_and_a_missing_node_warn() {
        let mut s = settings(&[("i-0000000000000001", "healthy"), ("i-0000000000000009", "healthy")]);
        s.protocol = "TLS".to_owned();
        s.health_check_protocol = "HTTP".to_owned();
        s.attributes
            .insert("proxy_protocol_v2.enabled".to_owned(), "true".to_owned());
        let f = judge(&s, Some(&[node(1), node(2)]), 22);
        let bad: Vec<(Level, &str)> = f
            .iter()
            .filter(|f| f.level != Level::Ok)
            .map(|f| (f.level, f.message.as_str()))
            .collect();
        assert_eq!(bad.len(), 5, "{bad:#?}");
        assert!(bad[0].1.contains("forwards TLS") && bad[0].0 == Level::Fail);
        assert!(bad[1].1.contains("proxy protocol") && bad[1].0 == Level::Fail);
        assert!(bad[2].1.contains("asks HTTP") && bad[2].0 == Level::Warn);
        assert!(bad[3].1.contains("i-0000000000000009") && bad[3].0 == Level::Fail);
        assert!(bad[4].1.contains("never reach it") && bad[4].0 == Level::Warn);
        assert!(
            f[1].fix
                .as_deref()
                .unwrap()
                .contains("Key=proxy_protocol_v2.enabled,Value=false")
        );
    }

    /// A node only draining takes no new connection (Elastic Load
    /// Balancing, "Deregistration delay"): said, as one not registered.
    #[test]
    fn a_node_only_draining_is_said_to_be_on_its_way_out() {
        let s = settings(&[("i-0000000000000001", "healthy"), ("i-0000000000000002", "draining")]);
        let f = judge(&s, Some(&[node(1), node(2)]), 22);
        let bad: Vec<&Finding> = f.iter().filter(|f| f.level != Level::Ok).collect();
        assert_eq!(bad.len(), 1, "{f:#?}");
        assert!(bad[0].message.contains("being deregistered (draining)"), "{f:#?}");
    }

    #[test]
    fn an_unhealthy_node_and_a_check_on_another_port_warn() {
        let mut s = settings(&[("i-0000000000000001", "unhealthy")]);
        s.health_check_port = "8080".to_owned();
        let f = judge(&s, Some(&[node(1)]), 22);
        assert_eq!(levels(&f), [Level::Ok, Level::Warn, Level::Ok, Level::Warn], "{f:#?}");
        s.health_check_port = "22".to_owned();
        s.group.targets[0].health.state = "healthy".to_owned();
        assert!(levels(&judge(&s, Some(&[node(1)]), 22)).iter().all(|l| *l == Level::Ok));
    }

    #[test]
    fn a_stopped_stranger_sshd_on_the_groups_own_port_and_unknown_nodes_are_no_finding() {
        let mut s = settings(&[("i-0000000000000001", "healthy"), ("i-0000000000000009", "unused")]);
        s.port = Some(2222);
        s.health_check_port = "2222".to_owned();
        let f = judge(&s, Some(&[node(1)]), 22);
        assert!(f.iter().all(|f| f.level == Level::Ok), "{f:#?}");
        // The nodes could not be looked up: the targets are not judged.
        s.group.targets[1].health.state = "healthy".to_owned();
        let f = judge(&s, None, 22);
        assert!(f.iter().all(|f| f.level == Level::Ok), "{f:#?}");
        assert!(levels(&judge(&s, Some(&[node(1)]), 22)).contains(&Level::Fail));
    }

    #[test]
    fn an_ip_group_is_matched_by_address() {
        let mut s = settings(&[("10.0.0.1", "healthy")]);
        s.group.target_type = "ip".to_owned();
        s.attributes.clear();
        let f = judge(&s, Some(&[node(1)]), 22);
        assert!(f.iter().all(|f| f.level == Level::Ok), "{f:#?}");
        assert!(f.iter().any(|f| f.message.contains("preservation off")));
    }

    #[test]
    fn the_group_is_the_one_given_or_the_one_lb_or_tg_target() {
        let tg = GroupSpec::TargetGroup("arn:tg".to_owned());
        assert_eq!(group_of(Some(&tg), &[]), Some(tg.clone()));
        let lb = TargetSpec::LoadBalancer("login".to_owned());
        assert_eq!(
            group_of(None, std::slice::from_ref(&lb)),
            Some(GroupSpec::LoadBalancer("login".to_owned()))
        );
        assert_eq!(
            group_of(None, &[lb, TargetSpec::TargetGroup("arn:tg".to_owned())]),
            None
        );
        assert_eq!(
            group_of(None, &[TargetSpec::InstanceId("i-0123456789abcdef0".to_owned())]),
            None
        );
    }
}
