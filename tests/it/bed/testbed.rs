//! Tests of the test bed itself: real sshd nodes with distinct keys, the
//! load balancer, and the emulator's SSM agent as the Rust SDK sees it.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;
use std::time::{Duration, Instant};

use aws_sdk_ssm::error::ProvideErrorMetadata as _;
use aws_sdk_ssm::types::CommandInvocationStatus;
use serde_json::json;

use crate::common::bed::{BedOptions, SECRET, TestBed, keyscan, wait_until};
use crate::common::support::require;

/// Waits until every invocation of a command is final; returns them by instance.
async fn finished(
    ssm: &aws_sdk_ssm::Client,
    command_id: &str,
    expected: usize,
) -> HashMap<String, aws_sdk_ssm::types::CommandInvocation> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let pages: Vec<_> = ssm
            .list_command_invocations()
            .command_id(command_id)
            .details(true)
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .unwrap();
        let done = pages.iter().all(|i| {
            matches!(
                i.status(),
                Some(
                    CommandInvocationStatus::Success
                        | CommandInvocationStatus::Failed
                        | CommandInvocationStatus::TimedOut
                        | CommandInvocationStatus::Cancelled
                )
            )
        });
        if pages.len() == expected && done {
            return pages
                .into_iter()
                .map(|i| (i.instance_id().unwrap().to_owned(), i))
                .collect();
        }
        assert!(
            Instant::now() < deadline,
            "command {command_id} did not finish: {pages:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn plugin_output(inv: &aws_sdk_ssm::types::CommandInvocation) -> String {
    inv.command_plugins()[0].output().unwrap_or_default().to_owned()
}

#[test]
fn nodes_serve_distinct_keys_directly_and_through_the_lb() {
    let bed = TestBed::start(BedOptions::default());
    let lb = bed.state.lb.clone().unwrap();
    for key_type in ["ed25519", "ecdsa", "rsa"] {
        let direct: BTreeSet<String> = bed
            .state
            .nodes
            .iter()
            .map(|n| keyscan(&n.address, n.port, key_type).expect("node serves the type"))
            .collect();
        assert_eq!(
            direct.len(),
            3,
            "{key_type}: nodes must start with distinct keys: {direct:?}"
        );
        // Round robin over 3 backends: 6 connections see every node's key.
        let through_lb: BTreeSet<String> = (0..6)
            .map(|_| keyscan(&lb.address, lb.port, key_type).expect("LB forwards"))
            .collect();
        assert_eq!(through_lb, direct, "{key_type}: the LB must show every backend's key");
    }
    // The noise is there: a stopped login node and instances of other roles.
    assert!(bed.state.noise.iter().any(|n| n.state == "stopped"));
    assert!(bed.state.noise.iter().any(|n| n.kind == "compute"));
}

#[test]
fn real_ssh_through_the_lb_hits_the_host_key_mismatch() {
    let bed = TestBed::start(BedOptions::default());
    let lb = bed.state.lb.clone().unwrap();
    let known_hosts = bed.dir().join("known_hosts");
    let ssh = |policy: &str| {
        Command::new(require("ssh"))
            .arg("-i")
            .arg(&bed.state.client_key)
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args(["-o", &format!("StrictHostKeyChecking={policy}"), "-o", "BatchMode=yes"])
            .args(["-o", "HostKeyAlgorithms=ssh-ed25519", "-p", &lb.port.to_string()])
            .arg(format!("root@{}", lb.address))
            .arg("echo $SSH_CONNECTION")
            .output()
            .unwrap()
    };
    let first = ssh("accept-new");
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let failures = (0..4)
        .map(|_| ssh("yes"))
        .filter(|o| String::from_utf8_lossy(&o.stderr).contains("REMOTE HOST IDENTIFICATION HAS CHANGED"))
        .count();
    assert!(
        failures >= 2,
        "expected the next nodes to present other keys, saw {failures} mismatches"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn send_command_runs_on_exactly_the_targeted_instances() {
    let bed = TestBed::start(BedOptions::default());
    let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config(1).await);
    let targeted: Vec<String> = bed.state.nodes[..2].iter().map(|n| n.instance_id.clone()).collect();
    let sent = ssm
        .send_command()
        .document_name("AWS-RunShellScript")
        .set_instance_ids(Some(targeted.clone()))
        .parameters(
            "commands",
            vec![
                "touch ran-here".to_owned(),
                "echo \"$AWS_SSM_INSTANCE_ID $HOSTKEYCTL_VERIFY_ADDRESS\"".to_owned(),
            ],
        )
        .send()
        .await
        .unwrap();
    let command_id = sent.command().unwrap().command_id().unwrap().to_owned();
    let invocations = finished(&ssm, &command_id, 2).await;
    for node in &bed.state.nodes {
        let ran = node.root.join("ran-here").exists();
        match invocations.get(&node.instance_id) {
            Some(inv) => {
                assert!(ran, "{} was targeted but did not run", node.name);
                assert_eq!(inv.status(), Some(&CommandInvocationStatus::Success));
                let out = plugin_output(inv);
                assert!(
                    out.contains(&format!("{} {}:22", node.instance_id, node.address)),
                    "{out}"
                );
            }
            None => assert!(!ran, "{} was not targeted but ran the command", node.name),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn list_command_invocations_pages_over_120_instances_and_push_reads_a_page_per_batch() {
    let bed = TestBed::start(BedOptions::nodes(0).virtual_instances(120));
    let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config(1).await);
    let sent = ssm
        .send_command()
        .document_name("AWS-RunShellScript")
        .targets(
            aws_sdk_ssm::types::Target::builder()
                .key("tag:Cluster")
                .values("virtual")
                .build(),
        )
        .max_concurrency("100%")
        .parameters("commands", vec!["echo ok".to_owned()])
        .send()
        .await
        .unwrap();
    let command_id = sent.command().unwrap().command_id().unwrap().to_owned();
    let invocations = finished(&ssm, &command_id, 120).await;
    let expected: BTreeSet<&String> = bed.state.virtual_ids.iter().collect();
    let got: BTreeSet<&String> = invocations.keys().collect();
    assert_eq!(got, expected);
    // One more full listing, counted: 120 rows at 50 a page is 3 calls.
    bed.control("POST", "/_bed/counts/reset", &json!({}));
    let pages = ssm
        .list_command_invocations()
        .command_id(&command_id)
        .max_results(50)
        .into_paginator()
        .send()
        .collect::<Result<Vec<_>, _>>()
        .await
        .unwrap();
    assert_eq!(
        pages.iter().map(|p| p.command_invocations().len()).collect::<Vec<_>>(),
        [50, 50, 20]
    );
    assert_eq!(bed.counts().get("ssm:ListCommandInvocations"), Some(&3));

    // hostkeyctl's own polling of the same 120: a command per 50 ids, a
    // read per unfinished command a round (as it counts and SSM counted),
    // never one per instance.
    bed.init_generated(SECRET);
    bed.control("POST", "/_bed/counts/reset", &json!({}));
    let push = bed
        .cli("push")
        .json()
        .secret()
        .args(&["--target", "tag:Cluster=virtual", "--max-concurrency", "100%"])
        .run();
    push.ok();
    let report = push.json();
    assert_eq!(report["succeeded"], 120);
    assert_eq!(bed.counts().get("ssm:SendCommand"), Some(&3));
    assert!(
        report["polling"]["max_calls_per_round"].as_u64().unwrap() <= 3,
        "{}",
        report["polling"]
    );
    assert_eq!(
        bed.count("ssm:ListCommandInvocations"),
        report["polling"]["list_calls"].as_u64().unwrap(),
    );
    assert_eq!(
        bed.counts().get("ssm:GetCommandInvocation"),
        None,
        "no per-instance polling"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn injected_failure_and_max_errors_show_through_the_sdk() {
    let bed = TestBed::start(BedOptions::default());
    let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config(1).await);
    let ids: Vec<String> = bed.state.nodes.iter().map(|n| n.instance_id.clone()).collect();
    bed.set_faults(json!({ "fail_instances": { ids[1].clone(): "disk full (injected)" } }));
    // The command's id.
    let send = |max_concurrency: &'static str, max_errors: &'static str| {
        let sent = ssm
            .send_command()
            .document_name("AWS-RunShellScript")
            .set_instance_ids(Some(ids.clone()))
            .max_concurrency(max_concurrency)
            .max_errors(max_errors)
            .parameters("commands", vec!["echo fine".to_owned()])
            .send();
        async move { sent.await.unwrap().command().unwrap().command_id().unwrap().to_owned() }
    };
    // Everyone dispatched at once: one failure, two successes.
    let c = send("3", "3").await;
    let inv = finished(&ssm, &c, 3).await;
    assert_eq!(inv[&ids[0]].status(), Some(&CommandInvocationStatus::Success));
    assert_eq!(inv[&ids[1]].status(), Some(&CommandInvocationStatus::Failed));
    assert_eq!(inv[&ids[2]].status(), Some(&CommandInvocationStatus::Success));
    let detail = ssm
        .get_command_invocation()
        .command_id(&c)
        .instance_id(&ids[1])
        .send()
        .await
        .unwrap();
    assert_eq!(detail.response_code(), 1);
    assert!(
        detail
            .standard_error_content()
            .unwrap()
            .contains("disk full (injected)")
    );
    // One at a time with MaxErrors 0: the failure stops the rollout.
    let c = send("1", "0").await;
    let inv = finished(&ssm, &c, 3).await;
    assert_eq!(inv[&ids[0]].status(), Some(&CommandInvocationStatus::Success));
    assert_eq!(inv[&ids[1]].status(), Some(&CommandInvocationStatus::Failed));
    assert_eq!(inv[&ids[2]].status(), Some(&CommandInvocationStatus::Cancelled));
}

#[tokio::test(flavor = "multi_thread")]
async fn execution_timeout_ends_timed_out() {
    let bed = TestBed::start(BedOptions::nodes(1));
    let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config(1).await);
    let id = bed.state.nodes[0].instance_id.clone();
    let c = ssm
        .send_command()
        .document_name("AWS-RunShellScript")
        .instance_ids(&id)
        .parameters("commands", vec!["sleep 30".to_owned()])
        .parameters("executionTimeout", vec!["1".to_owned()])
        .send()
        .await
        .unwrap();
    let command_id = c.command().unwrap().command_id().unwrap().to_owned();
    let inv = finished(&ssm, &command_id, 1).await;
    assert_eq!(inv[&id].status(), Some(&CommandInvocationStatus::TimedOut));
}

#[tokio::test(flavor = "multi_thread")]
async fn throttling_and_access_denied_reach_the_sdk_as_such() {
    let bed = TestBed::start(BedOptions::nodes(1));
    let config = bed.sdk_config(2).await;
    bed.set_faults(json!({
        "throttle_fraction": 1.0,
        "throttle_actions": ["DescribeInstances", "ListCommands"],
        "deny_actions": { "GetSecretValue": "" },
    }));
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let err = ec2.describe_instances().send().await.unwrap_err();
    assert_eq!(err.code(), Some("RequestLimitExceeded"), "{err:?}");
    let ssm = aws_sdk_ssm::Client::new(&config);
    let err = ssm.list_commands().send().await.unwrap_err();
    assert_eq!(err.code(), Some("ThrottlingException"), "{err:?}");
    let sm = aws_sdk_secretsmanager::Client::new(&config);
    let err = sm.get_secret_value().secret_id("x").send().await.unwrap_err();
    assert_eq!(err.code(), Some("AccessDeniedException"), "{err:?}");
    // Two attempts each: the SDK retried the throttled calls once.
    let counts = bed.counts();
    assert_eq!(counts.get("ec2:DescribeInstances"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("ssm:ListCommands"), Some(&2), "{counts:?}");
    // Faults off: the same calls work.
    bed.control("POST", "/_bed/faults/reset", &json!({}));
    ec2.describe_instances().send().await.unwrap();
}

#[test]
fn teardown_leaves_no_process_behind() {
    let bed = TestBed::start(BedOptions::default());
    let pids = bed.pids();
    assert_eq!(pids.len(), 5, "supervisor, 3 sshd, haproxy: {pids:?}");
    for pid in &pids {
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{pid} is not running"
        );
    }
    // Stopping and starting a node goes through the supervisor too.
    let name = bed.state.nodes[0].name.clone();
    bed.stop_node(&name);
    assert!(keyscan(&bed.state.nodes[0].address, 22, "ed25519").is_none());
    bed.start_node(&name);
    assert!(keyscan(&bed.state.nodes[0].address, 22, "ed25519").is_some());
    let pids = bed.pids();
    drop(bed);
    wait_until("every bed process to exit", Duration::from_secs(20), || {
        pids.iter().all(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| s.split_whitespace().nth(2) == Some("Z"))
                .unwrap_or(true)
        })
    });
}

/// Secrets Manager refuses to move a staging label another version holds
/// unless RemoveFromVersionId names it; moto 5.2 does so only for
/// AWSCURRENT, so the emulator enforces it (rotation claims rely on it).
#[tokio::test(flavor = "multi_thread")]
async fn moving_a_label_held_elsewhere_needs_remove_from_version_id() {
    let bed = TestBed::start(BedOptions::nodes(0));
    let sm = aws_sdk_secretsmanager::Client::new(&bed.sdk_config(1).await);
    sm.create_secret().name("s").secret_string("a").send().await.unwrap();
    let put = |value: &'static str, label: &'static str| {
        sm.put_secret_value()
            .secret_id("s")
            .secret_string(value)
            .version_stages(label)
            .send()
    };
    let first = put("b", "AWSPENDING").await.unwrap().version_id().unwrap().to_owned();
    let second = put("c", "mine").await.unwrap().version_id().unwrap().to_owned();
    let claim = sm
        .update_secret_version_stage()
        .secret_id("s")
        .version_stage("AWSPENDING")
        .move_to_version_id(&second)
        .send()
        .await;
    let err = claim.expect_err("the claim of a held label went through");
    let code = aws_sdk_secretsmanager::error::ProvideErrorMetadata::code(&err).map(str::to_owned);
    assert_eq!(code.as_deref(), Some("InvalidParameterException"), "{err:?}");
    sm.update_secret_version_stage()
        .secret_id("s")
        .version_stage("AWSPENDING")
        .move_to_version_id(&second)
        .remove_from_version_id(&first)
        .send()
        .await
        .unwrap();
}

/// PutSecretValue with AWSCURRENT moves the label from the version that
/// holds it, as Secrets Manager does. moto moved it from its own record of
/// the default version, which UpdateSecretVersionStage leaves stale: after
/// a label move, two versions held AWSCURRENT (found by `make demo`).
#[tokio::test(flavor = "multi_thread")]
async fn put_with_awscurrent_after_a_stage_move_leaves_one_current() {
    let bed = TestBed::start(BedOptions::nodes(0));
    let sm = aws_sdk_secretsmanager::Client::new(&bed.sdk_config(1).await);
    let first = sm.create_secret().name("s").secret_string("a").send().await.unwrap();
    let first = first.version_id().unwrap().to_owned();
    let second = sm
        .put_secret_value()
        .secret_id("s")
        .secret_string("b")
        .version_stages("next")
        .send()
        .await
        .unwrap()
        .version_id()
        .unwrap()
        .to_owned();
    sm.update_secret_version_stage()
        .secret_id("s")
        .version_stage("AWSCURRENT")
        .move_to_version_id(&second)
        .remove_from_version_id(&first)
        .send()
        .await
        .unwrap();
    let third = sm
        .put_secret_value()
        .secret_id("s")
        .secret_string("c")
        .version_stages("AWSCURRENT")
        .send()
        .await
        .unwrap()
        .version_id()
        .unwrap()
        .to_owned();
    let versions = sm.list_secret_version_ids().secret_id("s").send().await.unwrap();
    let holding = |label: &str| -> Vec<String> {
        versions
            .versions()
            .iter()
            .filter(|v| v.version_stages().iter().any(|s| s == label))
            .map(|v| v.version_id().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(holding("AWSCURRENT"), std::slice::from_ref(&third));
    assert_eq!(holding("AWSPREVIOUS"), [second]);
    let value = sm.get_secret_value().secret_id("s").send().await.unwrap();
    assert_eq!(value.secret_string(), Some("c"));

    // Each version's CreatedDate is its creation's, as GetSecretValue
    // says, however much later the list is read (moto answered the time
    // of the call).
    let created = value.created_date().copied().unwrap();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let made = u64::try_from(created.secs()).unwrap();
    crate::common::bed::wait_until("a second to pass", std::time::Duration::from_secs(5), || {
        now() > made + 1
    });
    let versions = sm.list_secret_version_ids().secret_id("s").send().await.unwrap();
    let listed = versions
        .versions()
        .iter()
        .find(|v| v.version_id() == Some(third.as_str()));
    assert_eq!(listed.and_then(|v| v.created_date()), Some(&created));
}
