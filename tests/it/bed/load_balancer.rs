//! The bed's network load balancer as strict as Elastic Load Balancing
//! (issue 59; testbed/emulator/targets.py names each source). moto, and
//! the bed before, called a registered target healthy at once, forgot a
//! deregistered one at once, refused to deregister one not registered,
//! and its balancer followed the ip target group alone: each assertion
//! below fails there.

use std::time::{Duration, Instant};

use aws_sdk_elasticloadbalancingv2::Client;
use aws_sdk_elasticloadbalancingv2::types::{ProtocolEnum, TargetDescription, TargetTypeEnum};

use crate::bed::admission::{backends, backends_of};
use crate::common::bed::{BedOptions, TestBed, wait_until};
use crate::common::roles::Role;

/// The target groups through the SDK, called synchronously.
pub(crate) struct Elb {
    runtime: tokio::runtime::Runtime,
    client: Client,
}

/// A target's (state, reason) as DescribeTargetHealth reports it.
type Health = (String, Option<String>);

impl Elb {
    pub(crate) fn new(bed: &TestBed) -> Elb {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let client = runtime.block_on(async { Client::new(&bed.sdk_config(1).await) });
        Elb { runtime, client }
    }

    fn target(id: &str, port: i32) -> TargetDescription {
        TargetDescription::builder().id(id).port(port).build()
    }

    /// Every registration as (id, port, state).
    pub(crate) fn states(&self, arn: &str) -> Vec<(String, i32, String)> {
        self.described(arn)
            .into_iter()
            .map(|(id, port, (state, _))| (id, port, state))
            .collect()
    }

    /// The (state, reason) of (id, port), or none when not listed.
    pub(crate) fn health(&self, arn: &str, id: &str, port: i32) -> Option<Health> {
        self.described(arn)
            .into_iter()
            .find(|(i, p, _)| i == id && *p == port)
            .map(|(_, _, health)| health)
    }

    /// DescribeTargetHealth of the group: (id, port, health) each.
    fn described(&self, arn: &str) -> Vec<(String, i32, Health)> {
        let out = self
            .runtime
            .block_on(self.client.describe_target_health().target_group_arn(arn).send())
            .unwrap();
        out.target_health_descriptions()
            .iter()
            .map(|d| {
                let t = d.target().unwrap();
                let h = d.target_health().unwrap();
                (
                    t.id().unwrap().to_owned(),
                    t.port().unwrap(),
                    (
                        h.state().unwrap().as_str().to_owned(),
                        h.reason().map(|r| r.as_str().to_owned()),
                    ),
                )
            })
            .collect()
    }

    fn register(&self, arn: &str, id: &str, port: i32) {
        let call = self
            .client
            .register_targets()
            .target_group_arn(arn)
            .targets(Elb::target(id, port));
        self.runtime.block_on(call.send()).unwrap();
    }

    fn deregister(&self, arn: &str, id: &str, port: i32) {
        let call = self
            .client
            .deregister_targets()
            .target_group_arn(arn)
            .targets(Elb::target(id, port));
        self.runtime.block_on(call.send()).unwrap();
    }

    /// Waits for (id, port) to reach `state`, and returns its reason.
    pub(crate) fn await_state(&self, arn: &str, id: &str, port: i32, state: &str) -> Option<String> {
        let mut last = None;
        wait_until(&format!("{id}:{port} to be {state}"), Duration::from_secs(30), || {
            last = self.health(arn, id, port);
            last.as_ref().is_some_and(|(s, _)| s == state)
        });
        last.and_then(|(_, reason)| reason)
    }
}

/// A registration is `initial` until its health checks pass and takes no
/// user before; a deregistration drains for the group's delay (5 s on the
/// bed, set through `deregistration_delay.timeout_seconds`) and takes no
/// new user meanwhile; deregistering what is not registered succeeds; a
/// port nothing listens on is `unhealthy` and never routed; a target group
/// no listener forwards to leaves its targets `unused`.
#[test]
fn targets_go_through_initial_and_draining_as_on_aws() {
    let bed = TestBed::start(BedOptions::default());
    let elb = Elb::new(&bed);
    let arn = bed.state.elb["ip"].target_group_arn.clone();
    let node = &bed.state.nodes[2];
    let routed = format!("{}:22", node.address);

    let start = Instant::now();
    elb.deregister(&arn, &node.address, 22);
    assert_eq!(
        elb.health(&arn, &node.address, 22),
        Some((
            "draining".to_owned(),
            Some("Target.DeregistrationInProgress".to_owned())
        ))
    );
    wait_until("the balancer to stop routing to it", Duration::from_secs(30), || {
        !backends(&bed).contains(&routed)
    });
    wait_until("the drain to end", Duration::from_secs(30), || {
        elb.health(&arn, &node.address, 22).is_none()
    });
    assert!(
        start.elapsed() >= Duration::from_secs(5),
        "a drain ended after {:?}, before the group's 5 s delay",
        start.elapsed()
    );
    // Idempotent: no error for a target not (or no longer) registered.
    elb.deregister(&arn, &node.address, 22);
    let nowhere = bed.state.lb.as_ref().unwrap().address.replace(".0.10", ".0.99");
    elb.deregister(&arn, &nowhere, 22);

    elb.register(&arn, &node.address, 22);
    let (state, reason) = elb.health(&arn, &node.address, 22).unwrap();
    assert_eq!(state, "initial");
    assert!(
        matches!(
            reason.as_deref(),
            Some("Elb.RegistrationInProgress" | "Elb.InitialHealthChecking")
        ),
        "{reason:?}"
    );
    assert!(!backends(&bed).contains(&routed), "an initial target took users");
    elb.await_state(&arn, &node.address, 22, "healthy");
    wait_until("the balancer to route to it", Duration::from_secs(30), || {
        backends(&bed).contains(&routed)
    });

    elb.register(&arn, &node.address, 2222);
    let reason = elb.await_state(&arn, &node.address, 2222, "unhealthy");
    assert_eq!(reason.as_deref(), Some("Target.FailedHealthChecks"));
    assert!(!backends(&bed).contains(&format!("{}:2222", node.address)));

    // A target group no listener forwards to.
    let vpc = elb
        .runtime
        .block_on(elb.client.describe_target_groups().target_group_arns(&arn).send())
        .unwrap()
        .target_groups()[0]
        .vpc_id()
        .unwrap()
        .to_owned();
    let spare = elb
        .runtime
        .block_on(
            elb.client
                .create_target_group()
                .name("spare")
                .protocol(ProtocolEnum::Tcp)
                .port(22)
                .vpc_id(vpc)
                .target_type(TargetTypeEnum::Ip)
                .send(),
        )
        .unwrap()
        .target_groups()[0]
        .target_group_arn()
        .unwrap()
        .to_owned();
    elb.register(&spare, &node.address, 22);
    let reason = elb.await_state(&spare, &node.address, 22, "unused");
    assert_eq!(reason.as_deref(), Some("Target.NotInUse"));
}

/// The instance target group's balancer routes too (ParallelCluster's
/// kind), to the instances' addresses, and follows its group; with every
/// target failing its checks, a balancer fails open: it routes to all.
#[test]
fn both_balancers_route_and_fail_open() {
    let bed = TestBed::start(BedOptions::nodes(2));
    let elb = Elb::new(&bed);
    let nodes = &bed.state.nodes;
    let lb = bed.state.lb.as_ref().unwrap();
    let instance_group = bed.state.elb["instance"].target_group_arn.clone();
    let addresses: Vec<String> = nodes.iter().map(|n| format!("{}:22", n.address)).collect();
    assert_eq!(backends_of(&bed, "login-i"), addresses);
    let scan = std::process::Command::new("ssh-keyscan")
        .args(["-T", "5", "-t", "ed25519", &lb.instance_address])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&scan.stdout).contains("ssh-ed25519"),
        "nothing answered through the instance target group's balancer: {}",
        String::from_utf8_lossy(&scan.stderr)
    );
    elb.deregister(&instance_group, &nodes[0].instance_id, 22);
    wait_until(
        "the instance balancer to follow its group",
        Duration::from_secs(30),
        || backends_of(&bed, "login-i") == addresses[1..],
    );

    let ip_group = bed.state.elb["ip"].target_group_arn.clone();
    bed.stop_node(&nodes[0].name);
    elb.await_state(&ip_group, &nodes[0].address, 22, "unhealthy");
    wait_until(
        "the failing target to leave the balancer",
        Duration::from_secs(30),
        || backends(&bed) == addresses[1..],
    );
    bed.stop_node(&nodes[1].name);
    elb.await_state(&ip_group, &nodes[1].address, 22, "unhealthy");
    wait_until("the balancer to fail open", Duration::from_secs(30), || {
        backends(&bed) == addresses
    });
}

/// A target in an Availability Zone the load balancer has no subnet in is
/// `unused` (`Target.NotInUse`). Admission registers the nodes that serve
/// the set once, then keeps them and says why (exit 3): on the emulator
/// before, they were healthy at once; by state alone, every pass would
/// have registered them again.
#[test]
fn a_target_in_a_zone_the_balancer_lacks_is_unused_and_admitted_once() {
    let (bed, _) = TestBed::converged(BedOptions::default());
    let elb = Elb::new(&bed);
    let config = elb.runtime.block_on(bed.sdk_config(1));
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let node = &bed.state.nodes[0];
    let (zone, vpc, subnet) = elb.runtime.block_on(async {
        let found = ec2
            .describe_instances()
            .instance_ids(&node.instance_id)
            .send()
            .await
            .unwrap();
        let instance = &found.reservations()[0].instances()[0];
        let zone = instance.placement().unwrap().availability_zone().unwrap().to_owned();
        let vpc = instance.vpc_id().unwrap().to_owned();
        let subnets = ec2.describe_subnets().send().await.unwrap();
        let other = subnets
            .subnets()
            .iter()
            .find(|s| s.vpc_id() == Some(vpc.as_str()) && s.availability_zone() != Some(zone.as_str()))
            .unwrap()
            .subnet_id()
            .unwrap()
            .to_owned();
        (zone, vpc, other)
    });
    let group = elb.runtime.block_on(async {
        let group = elb
            .client
            .create_target_group()
            .name("elsewhere")
            .protocol(ProtocolEnum::Tcp)
            .port(22)
            .vpc_id(vpc)
            .target_type(TargetTypeEnum::Ip)
            .send()
            .await
            .unwrap();
        let arn = group.target_groups()[0].target_group_arn().unwrap().to_owned();
        let lb = elb
            .client
            .create_load_balancer()
            .name("elsewhere")
            .r#type(aws_sdk_elasticloadbalancingv2::types::LoadBalancerTypeEnum::Network)
            .subnets(subnet)
            .send()
            .await
            .unwrap();
        let action = aws_sdk_elasticloadbalancingv2::types::Action::builder()
            .r#type(aws_sdk_elasticloadbalancingv2::types::ActionTypeEnum::Forward)
            .target_group_arn(&arn)
            .build();
        elb.client
            .create_listener()
            .load_balancer_arn(lb.load_balancers()[0].load_balancer_arn().unwrap())
            .protocol(ProtocolEnum::Tcp)
            .port(22)
            .default_actions(action)
            .send()
            .await
            .unwrap();
        arn
    });
    // As the bed's root: the admission role changes the cluster's own
    // target group alone (iam/admission.json), and this one is another.
    let admit = || {
        let run = bed
            .cli("admit")
            .role(Role::BedRoot)
            .secret()
            .json()
            .args(&["--target-group", &format!("tg:{group}")])
            .args(&crate::common::bed::TARGETS)
            .run();
        (run.code, run.json())
    };
    let (code, first) = admit();
    assert_eq!((code, first["registered"].as_array().unwrap().len()), (0, 3), "{first}");
    let reason = elb.await_state(&group, &node.address, 22, "unused");
    assert_eq!(reason.as_deref(), Some("Target.NotInUse"), "nodes in {zone}");
    for _ in 0..2 {
        let (code, again) = admit();
        assert_eq!(code, 3, "{again}");
        assert_eq!(again["registered"], serde_json::json!([]), "{again}");
        for n in again["nodes"].as_array().unwrap() {
            assert_eq!(n["decision"], "keep", "{n}");
            assert!(n["reason"].as_str().unwrap().contains("Availability Zone"), "{n}");
        }
    }
}

/// A target that turns unhealthy has its connections reset, as an NLB
/// does by default (`target_health_state.unhealthy.connection_termination.enabled`):
/// a session through the balancer to a node whose sshd stops listening
/// ends, where its remote command would have run for ten minutes (an
/// sshd's sessions outlive its listener).
#[test]
fn a_target_turning_unhealthy_has_its_sessions_reset() {
    use std::io::BufRead;
    let bed = TestBed::start(BedOptions::default());
    let elb = Elb::new(&bed);
    let lb = bed.state.lb.clone().unwrap();
    let mut session = std::process::Command::new("ssh")
        .arg("-i")
        .arg(&bed.state.client_key)
        .args([
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=5",
            "-o",
            "LogLevel=ERROR",
        ])
        .arg(format!("root@{}", lb.address))
        .arg("echo $SSH_CONNECTION; exec sleep 600")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(session.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // SSH_CONNECTION: client address and port, server address and port.
    let server = line.split_whitespace().nth(2).unwrap_or_default().to_owned();
    let node = bed
        .state
        .nodes
        .iter()
        .find(|n| n.address == server)
        .unwrap_or_else(|| panic!("the session reached {line:?}"));
    bed.stop_node(&node.name);
    let group = bed.state.elb["ip"].target_group_arn.clone();
    elb.await_state(&group, &node.address, 22, "unhealthy");
    wait_until("the balancer to reset the session", Duration::from_secs(30), || {
        session.try_wait().unwrap().is_some()
    });
}
