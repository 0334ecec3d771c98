//! Targets from what users already have (issue 13): a load balancer's
//! target groups (`lb:`, `tg:`, `audit --lb lb:`) and a HyperPod cluster
//! (`hyperpod:`), against the bed's emulator: two network load balancers
//! (IP and instance target groups of the nodes, DNS name the bed's HAProxy)
//! and a HyperPod cluster whose login group is the nodes.

use serde_json::{Value, json};

use crate::common::bed::{BedOptions, SECRET, TestBed};

fn converged(options: BedOptions) -> TestBed {
    TestBed::converged(options).0
}

fn set_health(bed: &TestBed, kind: &str, id: &str, state: &str, reason: &str) {
    let tg = &bed.state.elb[kind].target_group_arn;
    bed.control(
        "POST",
        "/_bed/target-health",
        &json!({ "target_group_arn": tg, "id": id, "state": state, "reason": reason }),
    );
}

fn audit(bed: &TestBed, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["audit", "--output", "json", "--secret-id", SECRET];
    all.extend_from_slice(args);
    let run = bed.run(&all);
    let json = if run.stdout.trim().is_empty() {
        Value::Null
    } else {
        run.json()
    };
    (run.code, json, run.stderr)
}

fn health_by_address(report: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["host"].as_str().unwrap().to_owned(),
                n["health"]["state"].as_str().unwrap_or("-").to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

#[test]
fn lb_and_tg_targets_audit_every_target_with_its_health() {
    let bed = converged(BedOptions::default());
    let nodes = &bed.state.nodes;
    set_health(&bed, "ip", &nodes[1].address, "unhealthy", "Target.FailedHealthChecks");
    set_health(
        &bed,
        "ip",
        &nodes[2].address,
        "draining",
        "Target.DeregistrationInProgress",
    );

    let (code, report, stderr) = audit(&bed, &["--target", "lb:hp-login"]);
    assert_eq!(
        code, 0,
        "unhealthy targets serving the set are no drift: {stderr}\n{report}"
    );
    assert_eq!(
        health_by_address(&report),
        [
            (nodes[0].address.clone(), "healthy".to_owned()),
            (nodes[1].address.clone(), "unhealthy".to_owned()),
            (nodes[2].address.clone(), "draining".to_owned()),
        ],
        "{report}"
    );
    for n in report["nodes"].as_array().unwrap() {
        assert!(
            n["findings"].as_array().unwrap().iter().all(|f| f["status"] == "OK"),
            "{n}"
        );
    }
    // The table flags them.
    let table = bed
        .cli("audit")
        .secret()
        .args(&["--output", "table", "--target", "lb:hp-login"])
        .run();
    assert!(
        table.stdout.contains("(unhealthy: Target.FailedHealthChecks)"),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains("2 node(s) not healthy"), "{}", table.stdout);

    // Instance targets: resolved to the instances' addresses and names.
    set_health(&bed, "instance", &nodes[0].instance_id, "unused", "Target.InvalidState");
    let (code, report, stderr) = audit(&bed, &["--target", "lb:hp-login-i"]);
    assert_eq!(code, 0, "{stderr}");
    let names: Vec<&str> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hp-login-1", "hp-login-2", "hp-login-3"]);
    assert_eq!(report["nodes"][0]["health"]["state"], "unused");

    // One target group by ARN.
    let tg = bed.state.elb["ip"].target_group_arn.clone();
    let (code, report, stderr) = audit(&bed, &["--target", &format!("tg:{tg}")]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["nodes"].as_array().unwrap().len(), 3);
}

#[test]
fn audit_lb_by_name_samples_its_dns_name_with_the_real_backend_count() {
    let bed = converged(BedOptions::default());
    set_health(&bed, "ip", &bed.state.nodes[2].address, "unhealthy", "Target.Timeout");
    let (code, report, stderr) = audit(&bed, &["--lb", "lb:hp-login", "--samples", "12"]);
    assert_eq!(code, 0, "{stderr}\n{report}");
    let lb = &report["lb"];
    assert_eq!(lb["host"], bed.state.lb.as_ref().unwrap().address.as_str(), "{lb}");
    assert_eq!(lb["port"], 22);
    assert_eq!(lb["backends"], 2, "the healthy targets: {lb}");
    assert_eq!(lb["backends_assumed"], false);
    // No listener on the port asked for: exit 2, listing the listeners.
    let (code, _, stderr) = audit(&bed, &["--lb", "lb:hp-login", "--port", "2222"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("no listener on port 2222") && stderr.contains("TCP:22"),
        "{stderr}"
    );
}

#[test]
fn push_through_a_load_balancer_reaches_its_instances() {
    let bed = TestBed::start(BedOptions::default());
    let init = bed.init_generated(SECRET);
    let want = crate::common::bed::set_fingerprints(&init);
    // Instance targets by id; IP targets through the instances' addresses.
    for target in ["lb:hp-login-i", "lb:hp-login"] {
        let run = bed
            .cli("push")
            .secret()
            .args(&["--target", target, "--max-concurrency", "100%"])
            .run();
        assert_eq!(run.code, 0, "{target}: {}", run.stderr);
    }
    for node in &bed.state.nodes {
        assert_eq!(crate::common::bed::served(node), want, "{}", node.name);
    }
    let sent = bed.commands();
    let targeted: Vec<&Value> = sent.iter().map(|c| &c["InstanceIds"]).collect();
    for ids in targeted {
        assert_eq!(ids.as_array().unwrap().len(), 3, "{ids}");
    }
    // Mixed with EC2 filters: refused, naming the source.
    let run = bed
        .cli("push")
        .secret()
        .args(&["--target", "lb:hp-login", "--target", "tag:Role=login"])
        .run();
    run.code(2);
    assert!(run.stderr.contains("lb:hp-login names nodes itself"), "{}", run.stderr);
}

#[test]
fn hyperpod_nodes_are_audited_across_pages_and_never_pushed() {
    let bed = converged(BedOptions {
        hyperpod_workers: 120,
        ..BedOptions::default()
    });
    // The login group: the three nodes, all serving the set.
    let (code, report, stderr) = audit(&bed, &["--target", "hyperpod:hp/login-group"]);
    assert_eq!(code, 0, "{stderr}\n{report}");
    let mut hosts: Vec<String> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["host"].as_str().unwrap().to_owned())
        .collect();
    hosts.sort();
    let mut want: Vec<String> = bed.state.nodes.iter().map(|n| n.address.clone()).collect();
    want.sort();
    assert_eq!(hosts, want);
    assert!(
        report["nodes"][0]["name"].as_str().unwrap().starts_with("ip-127-"),
        "{report}"
    );
    assert_eq!(report["nodes"][0]["health"]["state"], "Running");

    // The whole cluster: 123 nodes over two pages; the workers have no sshd.
    bed.control("POST", "/_bed/counts/reset", &json!({}));
    let (code, report, stderr) = audit(&bed, &["--target", "hyperpod:hp", "--connect-timeout", "2"]);
    assert_eq!(code, 3, "workers without sshd make the audit incomplete: {stderr}");
    assert_eq!(report["nodes"].as_array().unwrap().len(), 123);
    let counts = bed.counts();
    assert_eq!(counts.get("sagemaker:ListClusterNodes"), Some(&2), "{counts:?}");
    assert_eq!(counts.get("sagemaker:DescribeClusterNode"), Some(&123), "{counts:?}");

    // push and rotate refuse, pointing to the pull path.
    for command in ["push", "rotate"] {
        let run = bed.run(&[command, "--secret-id", SECRET, "--target", "hyperpod:hp"]);
        assert_eq!(run.code, 2, "{command}: {}", run.stderr);
        assert!(run.stderr.contains("docs/bootstrap.md"), "{command}: {}", run.stderr);
    }
    let run = bed
        .cli("audit")
        .secret()
        .args(&["--target", "hyperpod:hp", "--via-ssm"])
        .run();
    run.code(2);
}

#[test]
fn unknown_sources_and_denied_calls_name_what_to_fix() {
    let bed = TestBed::start(BedOptions::nodes(1));
    bed.init_generated(SECRET);
    for (target, named) in [
        ("lb:nope", "load balancer nope"),
        (
            "tg:arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/nope/0123456789abcdef",
            "targetgroup/nope",
        ),
        ("hyperpod:nope", "HyperPod cluster nope"),
    ] {
        let (code, _, stderr) = audit(&bed, &["--target", target]);
        assert_eq!(code, 4, "{target}: {stderr}");
        assert!(
            stderr.contains(named) && stderr.contains("not found"),
            "{target}: {stderr}"
        );
    }
    bed.set_faults(json!({ "deny_actions": { "DescribeTargetHealth": "" } }));
    let (code, _, stderr) = audit(&bed, &["--target", "lb:hp-login"]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("elasticloadbalancing:DescribeTargetHealth"), "{stderr}");
}

/// Regression: moto pages DescribeInstances by reservations, so the bed's
/// virtual instances (reservations of 100) came back in one page whatever
/// MaxResults said, and a 5000-instance push timed out. The emulator pages
/// by instances, as EC2 does: every instance once, at most MaxResults each;
/// and it filters by tag without scanning every tag per instance.
#[tokio::test(flavor = "multi_thread")]
async fn the_emulator_pages_describe_instances_by_instance() {
    let bed = TestBed::start(BedOptions::nodes(0).virtual_instances(120));
    let ec2 = aws_sdk_ec2::Client::new(&bed.sdk_config(1).await);
    let mut pages = ec2.describe_instances().max_results(50).into_paginator().send();
    let mut sizes = Vec::new();
    let mut ids = std::collections::BTreeSet::new();
    while let Some(page) = pages.next().await {
        let page = page.unwrap();
        let instances: Vec<_> = page.reservations().iter().flat_map(|r| r.instances()).collect();
        sizes.push(instances.len());
        ids.extend(instances.iter().filter_map(|i| i.instance_id().map(str::to_owned)));
    }
    assert!(sizes.iter().all(|n| *n <= 50), "pages of {sizes:?}");
    let total: usize = sizes.iter().sum();
    assert_eq!(total, ids.len(), "an instance came back twice: pages of {sizes:?}");
    assert!(total >= 120, "{total} instances in pages of {sizes:?}");

    // A tag filter reads each instance's own tags: moto scanned every tag
    // of the region per instance, 70 s for one page at 5000, and a push to
    // 5000 timed out. It still finds exactly the tagged instances.
    bed.control("POST", "/_bed/counts/reset", &json!({}));
    let role = aws_sdk_ec2::types::Filter::builder()
        .name("tag:Cluster")
        .values("virtual")
        .build();
    let mut pages = ec2
        .describe_instances()
        .filters(role)
        .max_results(50)
        .into_paginator()
        .send();
    let mut tagged = std::collections::BTreeSet::new();
    while let Some(page) = pages.next().await {
        let page = page.unwrap();
        tagged.extend(
            page.reservations()
                .iter()
                .flat_map(|r| r.instances())
                .filter_map(|i| i.instance_id().map(str::to_owned)),
        );
    }
    let expected: std::collections::BTreeSet<String> = bed.state.virtual_ids.iter().cloned().collect();
    assert_eq!(tagged, expected);
    let scans = bed.count("moto:tag-scans");
    assert_eq!(scans, 0, "a tag filter scanned all of the region's tags {scans} times");
}
