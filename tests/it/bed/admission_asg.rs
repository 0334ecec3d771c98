//! Admission and an Auto Scaling group's launch lifecycle hook, on the bed
//! (testbed/emulator/autoscaling.py models the hook moto lacks): a
//! launching instance waits in Pending:Wait until `admit` sees it serve
//! the set and completes its action; one whose install never succeeds is
//! never put in service (its hook times out to ABANDON) and is replaced;
//! another group's hook is refused by the admission policy; a group
//! attached to the target group registers an instance only after its hook,
//! and drains one before scale-in terminates it. The admission function (the
//! `bootstrap` binary with `HOSTKEYCTL_FUNCTION=admission`) runs `admit` on
//! Auto Scaling's lifecycle event.

use serde_json::{Value, json};

use crate::common::bed::{BedOptions, Node, Role, SECRET, TARGETS, TestBed};

const GROUP: &str = "hp-login";
const OTHER: &str = "hp-other";
const HOOK: &str = "wait-for-the-set";

/// A group as the admin's stack makes it (the bed's own account): based
/// on a node's instance, none launched yet.
pub(crate) fn create_group(bed: &TestBed, name: &str, template_instance: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        aws_sdk_autoscaling::Client::new(&bed.sdk_config(1).await)
            .create_auto_scaling_group()
            .auto_scaling_group_name(name)
            .instance_id(template_instance)
            .availability_zones("us-east-1a")
            .min_size(0)
            .max_size(4)
            .desired_capacity(0)
            .send()
            .await
            .unwrap();
    });
}

/// [`create_group`] with its launch hook.
fn group_with_hook(bed: &TestBed, name: &str, template_instance: &str) {
    create_group(bed, name, template_instance);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let asg = aws_sdk_autoscaling::Client::new(&bed.sdk_config(1).await);
        asg.put_lifecycle_hook()
            .auto_scaling_group_name(name)
            .lifecycle_hook_name(HOOK)
            .lifecycle_transition("autoscaling:EC2_INSTANCE_LAUNCHING")
            .heartbeat_timeout(300)
            .default_result("ABANDON")
            .send()
            .await
            .unwrap();
    });
}

/// Instance id -> lifecycle state, of a group's instances.
fn states(bed: &TestBed, name: &str) -> Vec<(String, String)> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let asg = aws_sdk_autoscaling::Client::new(&bed.sdk_config(1).await);
        let found = asg
            .describe_auto_scaling_groups()
            .auto_scaling_group_names(name)
            .send()
            .await
            .unwrap();
        found.auto_scaling_groups()[0]
            .instances()
            .iter()
            .map(|i| {
                (
                    i.instance_id().unwrap().to_owned(),
                    i.lifecycle_state().unwrap().as_str().to_owned(),
                )
            })
            .collect()
    })
}

fn state_of(bed: &TestBed, group: &str, node: &Node) -> Option<String> {
    let id = node_id(bed, node);
    states(bed, group).into_iter().find(|(i, _)| *i == id).map(|(_, s)| s)
}

fn node_id(bed: &TestBed, node: &Node) -> String {
    let json: Value = serde_json::from_str(&std::fs::read_to_string(bed.dir().join("bed.json")).unwrap()).unwrap();
    crate::common::support::row(&json["nodes"], "name", node.name.as_str())["instance_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A held node boots, is launched in EC2 and joins `group` in Pending:Wait.
fn launch_into(bed: &TestBed, group: &str, node: &Node) {
    let id = bed.launch_node(&node.name);
    let answer = bed.control(
        "POST",
        "/_bed/autoscaling/launch",
        &json!({"group": group, "instance_id": id}),
    );
    assert_eq!(answer["state"], "Pending:Wait", "{answer}");
}

fn admit(bed: &TestBed, group: &str) -> (i32, Value, String) {
    let tg = format!("tg:{}", bed.state.elb["ip"].target_group_arn);
    let mut args = vec![
        "--target-group",
        tg.as_str(),
        "--auto-scaling-group",
        group,
        "--lifecycle-hook",
        HOOK,
    ];
    args.extend(TARGETS);
    let run = bed.cli("admit").secret().json().args(&args).run();
    let report = if run.stdout.trim().is_empty() {
        Value::Null
    } else {
        run.json()
    };
    (run.code, report, run.stderr)
}

fn node_report<'a>(report: &'a Value, node: &Node) -> &'a Value {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == node.name.as_str())
        .unwrap_or_else(|| panic!("{} is not in {report}", node.name))
}

#[test]
fn a_launching_instance_goes_in_service_only_once_it_serves_the_set() {
    let (bed, _) = TestBed::converged(BedOptions::nodes(7).held(4));
    let nodes = bed.state.nodes.clone();
    let (good, failing, replacement, stranger) = (&nodes[3], &nodes[4], &nodes[5], &nodes[6]);
    group_with_hook(&bed, GROUP, &nodes[0].instance_id);
    launch_into(&bed, GROUP, good);
    launch_into(&bed, GROUP, failing);

    // Both serve their own keys: held out, left waiting.
    let (code, report, stderr) = admit(&bed, GROUP);
    assert_eq!(code, 1, "{stderr}\n{report}");
    for n in [good, failing] {
        assert_eq!(node_report(&report, n)["decision"], "hold", "{report}");
        assert_eq!(node_report(&report, n)["lifecycle"], "waiting", "{report}");
        assert_eq!(state_of(&bed, GROUP, n).as_deref(), Some("Pending:Wait"));
    }

    // One install succeeds; Auto Scaling's next lifecycle event runs the
    // admission function: admitted, and its hook completed.
    let run = bed.cli("install").on(good).secret().run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let function = deploy_admission_function(&bed, &["--auto-scaling-group", GROUP, "--lifecycle-hook", HOOK]);
    let event = json!({
        "version": "0", "source": "aws.autoscaling", "detail-type": "EC2 Instance-launch Lifecycle Action",
        "detail": {"AutoScalingGroupName": GROUP, "LifecycleHookName": HOOK, "EC2InstanceId": node_id(&bed, good),
                   "LifecycleTransition": "autoscaling:EC2_INSTANCE_LAUNCHING"}
    });
    let answer = bed.control("POST", "/_bed/lambda/invoke", &json!({"arn": function, "event": event}));
    assert_eq!(answer["ok"], true, "{answer}");
    let report = answer["result"].clone();
    assert_eq!(report["exit_code"], 1, "the failing node still drifts: {report}");
    assert_eq!(node_report(&report, good)["decision"], "admit", "{report}");
    assert_eq!(node_report(&report, good)["lifecycle"], "continued", "{report}");
    assert_eq!(state_of(&bed, GROUP, good).as_deref(), Some("InService"));
    assert_eq!(state_of(&bed, GROUP, failing).as_deref(), Some("Pending:Wait"));

    // The other never installs: at the hook's timeout, ABANDON ends it.
    let failing_id = node_id(&bed, failing);
    let ended = bed.control("POST", "/_bed/autoscaling/expire", &json!({"seconds": 301}));
    assert_eq!(
        ended["ended"],
        json!([{"instance_id": failing_id, "result": "ABANDON"}]),
        "{ended}"
    );
    assert_eq!(
        state_of(&bed, GROUP, failing),
        None,
        "an abandoned instance left the group"
    );
    // The group keeps its size: Auto Scaling launches a replacement (the
    // bed's next held node), which waits on the hook in turn.
    assert_eq!(state_of(&bed, GROUP, replacement).as_deref(), Some("Pending:Wait"));
    let tg = bed.state.elb["ip"].target_group_arn.clone();
    let registered = target_ids(&bed, &tg);
    assert!(
        registered.contains(&good.address) && !registered.contains(&failing.address),
        "{registered:?}"
    );

    // Another group's hook is not admission's: refused, still waiting.
    group_with_hook(&bed, OTHER, &nodes[0].instance_id);
    launch_into(&bed, OTHER, stranger);
    let run = bed.cli("install").on(stranger).secret().run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (code, _, stderr) = admit(&bed, OTHER);
    assert_eq!(code, 4, "{stderr}");
    assert!(
        stderr.contains("CompleteLifecycleAction") && stderr.contains(OTHER),
        "{stderr}"
    );
    assert_eq!(state_of(&bed, OTHER, stranger).as_deref(), Some("Pending:Wait"));
}

/// The admission function (the crate's binary as `bootstrap`, with
/// `HOSTKEYCTL_FUNCTION=admission`), configured with admit's options for
/// the bed's fleet and `extra`, signing as iam/admission.json. Its ARN.
fn deploy_admission_function(bed: &TestBed, extra: &[&str]) -> String {
    let tg = format!("tg:{}", bed.state.elb["ip"].target_group_arn);
    let mut options = vec!["--secret-id", SECRET, "--target-group", tg.as_str()];
    options.extend(TARGETS);
    options.extend_from_slice(extra);
    let variables = json!({
        "HOSTKEYCTL_FUNCTION": "admission",
        "HOSTKEYCTL_ADMIT_ARGS": serde_json::to_string(&options).unwrap(),
    });
    let arn = format!(
        "arn:aws:lambda:{}:123456789012:function:hostkeyctl-admission",
        bed.state.region
    );
    let settings = json!({"step_timeout": 120});
    crate::bed::scheduled::register_function(bed, "admission-task", Role::Admission, &arn, variables, settings);
    arn
}

/// The registered target ids of a target group (as the bed).
fn target_ids(bed: &TestBed, arn: &str) -> Vec<String> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let elb = aws_sdk_elasticloadbalancingv2::Client::new(&bed.sdk_config(1).await);
        let health = elb.describe_target_health().target_group_arn(arn).send().await.unwrap();
        health
            .target_health_descriptions()
            .iter()
            .filter_map(|d| d.target().and_then(|t| t.id()).map(str::to_owned))
            .collect()
    })
}

/// A group attached to the instance target group (ParallelCluster's
/// kind): an ip target group does not attach; a launching instance is not
/// registered while it waits on the hook (moto registered it at once);
/// `admit` and the group register it without fighting; and scale-in, by a
/// lower desired capacity or by terminating one, drains an instance
/// (deregistration delay) before it terminates.
#[test]
fn an_attached_group_registers_after_the_hook_and_drains_before_terminating() {
    let (bed, _) = TestBed::converged(BedOptions::nodes(5).held(2));
    let nodes = bed.state.nodes.clone();
    let (new, second) = (&nodes[3], &nodes[4]);
    group_with_hook(&bed, GROUP, &nodes[0].instance_id);
    let ip = bed.state.elb["ip"].target_group_arn.clone();
    let instances = bed.state.elb["instance"].target_group_arn.clone();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = runtime.block_on(bed.sdk_config(1));
    let asg = aws_sdk_autoscaling::Client::new(&config);
    // The refusal's text, or none when attached.
    let attach = |arn: &str| -> Option<String> {
        runtime
            .block_on(
                asg.attach_load_balancer_target_groups()
                    .auto_scaling_group_name(GROUP)
                    .target_group_arns(arn)
                    .send(),
            )
            .err()
            .map(|e| format!("{e:?}"))
    };
    let refused = attach(&ip).unwrap_or_default();
    assert!(refused.contains("only instance target groups attach"), "{refused}");
    assert_eq!(attach(&instances), None);

    let launching = [new, second];
    for node in launching {
        launch_into(&bed, GROUP, node);
    }
    let ids: Vec<String> = launching.iter().map(|n| node_id(&bed, n)).collect();
    let registered = target_ids(&bed, &instances);
    assert!(
        !ids.iter().any(|id| registered.contains(id)),
        "registered while waiting on the hook: {registered:?}"
    );
    for node in launching {
        let run = bed.cli("install").on(node).secret().run();
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    // As the bed's root: the admission role keeps the ip target group.
    let tg = format!("tg:{instances}");
    let mut args = vec![
        "--target-group",
        tg.as_str(),
        "--auto-scaling-group",
        GROUP,
        "--lifecycle-hook",
        HOOK,
    ];
    args.extend(TARGETS);
    let run = bed.cli("admit").role(Role::BedRoot).secret().json().args(&args).run();
    let report = run.json();
    let elb = crate::bed::load_balancer::Elb::new(&bed);
    for (node, id) in launching.iter().zip(&ids) {
        assert_eq!(node_report(&report, node)["lifecycle"], "continued", "{report}");
        assert_eq!(state_of(&bed, GROUP, node).as_deref(), Some("InService"));
        elb.await_state(&instances, id, 22, "healthy");
    }

    scale_in_drains_first(&bed, &instances, &ids);
}

/// Scale-in of the attached group, by a lower desired capacity and by
/// terminating the other of `ids`: each instance drains (still running),
/// then terminates.
fn scale_in_drains_first(bed: &TestBed, instances: &str, ids: &[String]) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = runtime.block_on(bed.sdk_config(1));
    let asg = aws_sdk_autoscaling::Client::new(&config);
    let elb = crate::bed::load_balancer::Elb::new(bed);
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let ec2_state = |id: &str| {
        let found = runtime
            .block_on(ec2.describe_instances().instance_ids(id).send())
            .unwrap();
        found.reservations()[0].instances()[0]
            .state()
            .unwrap()
            .name()
            .unwrap()
            .as_str()
            .to_owned()
    };
    let drains_then_ends = |id: &str| {
        assert_eq!(elb.health(instances, id, 22).map(|h| h.0).as_deref(), Some("draining"));
        assert_eq!(ec2_state(id), "running", "terminated before it drained");
        crate::common::bed::wait_until(
            "the drain, then the termination",
            std::time::Duration::from_secs(60),
            || ec2_state(id) == "terminated",
        );
        assert!(elb.health(instances, id, 22).is_none());
    };
    runtime
        .block_on(
            asg.set_desired_capacity()
                .auto_scaling_group_name(GROUP)
                .desired_capacity(1)
                .send(),
        )
        .unwrap();
    let draining: Vec<&String> = ids
        .iter()
        .filter(|id| elb.health(instances, id, 22).is_some_and(|h| h.0 == "draining"))
        .collect();
    assert_eq!(draining.len(), 1, "a desired capacity of 1 takes one of two out");
    let staying = ids.iter().find(|id| *id != draining[0]).unwrap().clone();
    drains_then_ends(draining[0]);
    assert_eq!(
        elb.health(instances, &staying, 22).map(|h| h.0).as_deref(),
        Some("healthy")
    );
    runtime
        .block_on(
            asg.terminate_instance_in_auto_scaling_group()
                .instance_id(&staying)
                .should_decrement_desired_capacity(true)
                .send(),
        )
        .unwrap();
    drains_then_ends(&staying);
}
