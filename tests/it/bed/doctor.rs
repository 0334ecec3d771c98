//! `doctor` on the bed: each finding it names is planted, then found,
//! with what to do, and the set-up it leaves is all "ok" with exit 0.

use serde_json::{Value, json};

use crate::common::bed::{BedOptions, SECRET, TARGETS, TestBed};

/// `doctor` on the cluster's login nodes: its exit code and findings.
fn doctor(bed: &TestBed, secret: &str, targets: &[&str]) -> (i32, Vec<Value>) {
    let mut args = vec!["doctor", "--secret-id", secret, "--output", "json"];
    args.extend(targets);
    let run = bed.run(&args);
    let report = run.json();
    assert_eq!(report["schema"], "hostkeyctl-doctor/v1", "{}", run.stderr);
    (run.code, report["findings"].as_array().unwrap().clone())
}

/// The findings of `check` about `subject` (a prefix: an instance id
/// with its name after it).
fn about<'a>(findings: &'a [Value], check: &str, subject: &str) -> Vec<&'a Value> {
    findings
        .iter()
        .filter(|f| f["check"] == check && f["subject"].as_str().unwrap_or_default().starts_with(subject))
        .collect()
}

fn level<'a>(findings: &'a [Value], check: &str, subject: &str) -> &'a str {
    let found = about(findings, check, subject);
    assert_eq!(found.len(), 1, "{check} {subject}: {findings:#?}");
    found[0]["level"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_finds_each_planted_fault_and_then_nothing() {
    let bed = TestBed::start(BedOptions::nodes(2).bare());
    let node0 = bed.state.nodes[0].instance_id.clone();
    let node1 = bed.state.nodes[1].instance_id.clone();
    bed.cli("init")
        .secret_id(SECRET)
        .args(&[
            "--from-dir",
            bed.state.nodes[0].ssh_dir.to_str().unwrap(),
            "--tag",
            "Cluster=hp",
        ])
        .run()
        .ok();
    tamper_the_converge_document(&bed).await;

    // Bare nodes, a changed document, no setup document.
    let (code, found) = doctor(&bed, SECRET, &TARGETS);
    assert_eq!(code, 1, "{found:#?}");
    assert_eq!(level(&found, "document", "hostkeyctl-Converge"), "fail");
    assert_eq!(level(&found, "document", "hostkeyctl-Install"), "ok");
    assert_eq!(level(&found, "setup", "hostkeyctl-Setup"), "warn");
    for id in [&node0, &node1] {
        let node = about(&found, "node", id);
        assert_eq!(node[0]["message"], "hostkeyctl is not installed on it", "{node:?}");
        assert!(
            node[0]["fix"].as_str().unwrap().contains("hostkeyctl deliver"),
            "{node:?}"
        );
    }
    // A target that reaches another cluster's node.
    let (code, found) = doctor(&bed, SECRET, &["--target", "tag:Role=login"]);
    assert_eq!(
        (code, level(&found, "targets", "tag:Role=login")),
        (1, "fail"),
        "{found:#?}"
    );

    // The documents put right, the build delivered, no push yet: node 1
    // serves its own keys.
    bed.cli("ssm-document deploy").run().ok();
    deliver(&bed);
    let (code, found) = doctor(&bed, SECRET, &TARGETS);
    assert_eq!(code, 1, "{found:#?}");
    assert_eq!(level(&found, "node", &node0), "ok");
    assert_eq!(level(&found, "node", &node1), "fail");
    assert!(
        about(&found, "node", &node1)[0]["fix"]
            .as_str()
            .unwrap()
            .contains("hostkeyctl push")
    );

    // Pushed: the keys are right; what is left is the nodes' metadata
    // service and the target group.
    let mut push = vec!["push", "--secret-id", SECRET];
    push.extend(TARGETS);
    bed.run(&push).ok();
    the_metadata_service_and_the_target_group(&bed).await;

    a_stack_of_another_secret(&bed);

    // Node 1 leaves SSM; a secret without a Cluster tag.
    bed.control("POST", "/_bed/ssm/unmanaged", &json!({"InstanceIds": [node1]}));
    let (code, found) = doctor(&bed, SECRET, &TARGETS);
    assert_eq!((code, level(&found, "ssm", &node1)), (1, "fail"), "{found:#?}");
    assert!(
        about(&found, "node", &node1).is_empty(),
        "an unmanaged node is not sent the check"
    );
    bed.init_generated("hostkeys/untagged");
    let (_, found) = doctor(&bed, "hostkeys/untagged", &TARGETS);
    let untagged = about(&found, "secret", "hostkeys/untagged");
    assert!(
        untagged
            .iter()
            .any(|f| f["level"] == "warn" && f["message"].as_str().unwrap().contains("no Cluster tag")),
        "{found:#?}"
    );
}

/// After the push: every user on the nodes reaches the metadata service
/// (the nodes' own netfilter, bed.json's netns) until it is guarded; then
/// nothing is left; then a target group made to break ssh.
async fn the_metadata_service_and_the_target_group(bed: &TestBed) {
    let (node0, node1) = (&bed.state.nodes[0].instance_id, &bed.state.nodes[1].instance_id);
    let (code, found) = doctor(bed, SECRET, &TARGETS);
    assert_eq!(code, 0, "{found:#?}");
    for id in [node0, node1] {
        assert_eq!(level(&found, "imds", id), "warn", "{found:#?}");
        assert_eq!(level(&found, "node", id), "ok", "{found:#?}");
    }

    // Guarded as the step guards a login node, the target group named:
    // nothing to do.
    guard_the_metadata_service(bed);
    let group = bed.state.elb["instance"].target_group_arn.clone();
    let group_arg = format!("tg:{group}");
    let with_group = [&TARGETS[..], &["--target-group", &group_arg]].concat();
    let (code, found) = doctor(bed, SECRET, &with_group);
    assert_eq!(code, 0, "{found:#?}");
    assert!(found.iter().all(|f| f["level"] == "ok"), "{found:#?}");
    assert_eq!(level(&found, "imds", node0), "ok");
    assert!(about(&found, "balancer", "target group").len() >= 4, "{found:#?}");
    let table = bed
        .cli("doctor")
        .secret_id(SECRET)
        .args(&TARGETS)
        .args(&["--output", "table"])
        .run();
    assert!(table.ok().stdout.contains("Nothing to do"), "{}", table.stdout);

    // The HyperPod group behind the IP target group: its nodes are
    // matched to the targets by address.
    let hyperpod = format!("hyperpod:{}/login-group", bed.state.hyperpod.as_ref().unwrap().cluster);
    let ip_group = format!("tg:{}", bed.state.elb["ip"].target_group_arn);
    let (code, found) = doctor(bed, SECRET, &["--target", &hyperpod, "--target-group", &ip_group]);
    assert_eq!(code, 0, "{found:#?}");
    let balancer = about(&found, "balancer", "target group");
    assert!(
        balancer.len() >= 4 && balancer.iter().all(|f| f["level"] == "ok"),
        "{found:#?}"
    );
    assert!(
        balancer
            .iter()
            .any(|f| f["message"] == "sends users to the 2 node(s), and to no one else"),
        "{found:#?}"
    );

    // A target group that sends a PROXY header, checked over HTTP, with
    // node 1 failing its checks, node 0 deregistered, and an instance of
    // no --target taking users.
    break_the_target_group(bed, &group).await;
    let (code, found) = doctor(bed, SECRET, &with_group);
    assert_eq!(code, 1, "{found:#?}");
    let bad: Vec<(&str, &str)> = found
        .iter()
        .filter(|f| f["check"] == "balancer" && f["level"] != "ok")
        .map(|f| (f["level"].as_str().unwrap(), f["message"].as_str().unwrap()))
        .collect();
    assert_eq!(bad.len(), 5, "{found:#?}");
    assert!(
        bad[0].0 == "fail" && bad[0].1.contains("proxy protocol v2 is on"),
        "{bad:?}"
    );
    assert!(bad[1].0 == "warn" && bad[1].1.contains("asks HTTP"), "{bad:?}");
    assert!(
        bad[2].0 == "warn" && bad[2].1.contains("reports it unhealthy"),
        "{bad:?}"
    );
    let stranger = &bed.state.noise[0].instance_id;
    assert!(bad[3].0 == "fail" && bad[3].1.contains(stranger.as_str()), "{bad:?}");
    assert!(
        bad[4].0 == "warn" && bad[4].1.contains("users never reach it"),
        "{bad:?}"
    );
    assert_eq!(level(&found, "balancer", node0), "warn");
}

/// A stack whose admission function admits against another secret, and
/// no enrolment function: `--stack` reads both.
fn a_stack_of_another_secret(bed: &TestBed) {
    // A stack whose admission function admits against another secret,
    // and no enrolment function.
    let arn = format!(
        "arn:aws:lambda:{}:123456789012:function:hostkeyctl-admission-s",
        bed.state.region
    );
    let admit = json!([
        "--secret-id",
        "hostkeys/other",
        "--target",
        "tag:Cluster=hp",
        "--target-group",
        "lb:x"
    ]);
    bed.control(
        "POST",
        "/_bed/lambda/register",
        &json!({"arn": arn, "bootstrap": "/nonexistent/never-invoked", "variables": {"HOSTKEYCTL_ADMIT_ARGS": admit.to_string()}}),
    );
    let with_stack = [&TARGETS[..], &["--stack", "s"]].concat();
    let (code, found) = doctor(bed, SECRET, &with_stack);
    assert_eq!(code, 0, "{found:#?}");
    let admission = about(&found, "function", "function hostkeyctl-admission-s");
    assert!(admission.len() == 1 && admission[0]["level"] == "warn", "{found:#?}");
    assert!(admission[0]["message"].as_str().unwrap().contains("hostkeys/other"));
    assert_eq!(level(&found, "function", "function hostkeyctl-enrolment-s"), "ok");
    assert_eq!(level(&found, "function", "rotation"), "ok");
}

/// `hostkeyctl imds-guard` with the nodes' netfilter tools, as the
/// lifecycle step runs it on a login node.
fn guard_the_metadata_service(bed: &TestBed) {
    let sbin = bed.state.nodes[0].root.join("usr/local/sbin");
    let out = std::process::Command::new(crate::common::support::node_bin_dir().join("hostkeyctl"))
        .arg("imds-guard")
        .env("PATH", format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", sbin.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Proxy protocol v2 on and an HTTP health check, as an admin could set
/// them; node 1 failing its health checks; node 0 deregistered (draining);
/// a noise instance (running, of no --target) registered.
async fn break_the_target_group(bed: &TestBed, arn: &str) {
    use aws_sdk_elasticloadbalancingv2::types::{ProtocolEnum, TargetDescription, TargetGroupAttribute};
    let elb = aws_sdk_elasticloadbalancingv2::Client::new(&bed.sdk_config(1).await);
    bed.control(
        "POST",
        "/_bed/target-health",
        &json!({"target_group_arn": arn, "id": bed.state.nodes[1].instance_id, "state": "unhealthy", "reason": "Target.FailedHealthChecks"}),
    );
    // The noise instance has no sshd: its checks would fail. Reported
    // healthy, it stands for a stranger that answers and takes users.
    bed.control(
        "POST",
        "/_bed/target-health",
        &json!({"target_group_arn": arn, "id": bed.state.noise[0].instance_id, "state": "healthy"}),
    );
    let target = |id: &str| TargetDescription::builder().id(id).port(22).build();
    elb.deregister_targets()
        .target_group_arn(arn)
        .targets(target(&bed.state.nodes[0].instance_id))
        .send()
        .await
        .unwrap();
    elb.register_targets()
        .target_group_arn(arn)
        .targets(target(&bed.state.noise[0].instance_id))
        .send()
        .await
        .unwrap();
    elb.modify_target_group_attributes()
        .target_group_arn(arn)
        .attributes(
            TargetGroupAttribute::builder()
                .key("proxy_protocol_v2.enabled")
                .value("true")
                .build(),
        )
        .send()
        .await
        .unwrap();
    elb.modify_target_group()
        .target_group_arn(arn)
        .health_check_protocol(ProtocolEnum::Http)
        .send()
        .await
        .unwrap();
}

/// The node builds in the bed's bucket, the setup document, `deliver`.
fn deliver(bed: &TestBed) {
    let node_build = crate::common::support::node_bin_dir().join("hostkeyctl");
    let builds = tempfile::tempdir().unwrap();
    std::fs::copy(&node_build, builds.path().join("hostkeyctl-x86_64")).unwrap();
    let bucket = bed.dir().join("s3/bed-bucket/hk");
    std::fs::create_dir_all(&bucket).unwrap();
    std::fs::copy(&node_build, bucket.join("hostkeyctl-x86_64")).unwrap();
    bed.cli("ssm-document deploy-setup")
        .args(&[
            "--builds",
            builds.path().to_str().unwrap(),
            "--builds-at",
            "s3://bed-bucket/hk",
        ])
        .run()
        .ok();
    // A site whose login users need the instance role: the metadata
    // service stays open, and doctor says so.
    let mut args = vec![
        "deliver",
        "--secret-id",
        SECRET,
        "--max-concurrency",
        "100%",
        "--imds",
        "open",
    ];
    args.extend(TARGETS);
    bed.run(&args).ok();
}

/// A new default version of hostkeyctl-Converge with one more line, as
/// anyone allowed ssm:UpdateDocument could make.
async fn tamper_the_converge_document(bed: &TestBed) {
    let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config(1).await);
    let ours = bed.cli("ssm-document print").args(&["--kind", "converge"]).run().stdout;
    let changed = ours.replacen("\"set -eu\",", "\"set -eu\", \"true\",", 1);
    assert_ne!(changed, ours);
    crate::bed::ssm_document::tamper(&ssm, "hostkeyctl-Converge", &changed).await;
}
