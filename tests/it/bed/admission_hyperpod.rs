//! Admission of a HyperPod login group through a node's replacement, the
//! way HyperPod reports it (`ListClusterNodes`): the node is
//! `ShuttingDown` first, then gone, and its successor runs at a new
//! address with its own keys. The admission pass that sees the status
//! (the function runs on HyperPod's node events) drains the node while it
//! still serves; the successor is held out until its install has run, then
//! admitted. A strict OpenSSH client logs in through the balancer 5 times
//! a second throughout: not one login fails.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::bed::admission::{Login, StopOnDrop, accepted, five_more_logins, lb_known_hosts, log_in_until};
use crate::common::bed::{BedOptions, Node, TestBed, wait_until};

/// `admit` once, as the admission role, for the HyperPod login group.
fn admit_group(bed: &TestBed) -> (i32, Value) {
    let group = format!("tg:{}", bed.state.elb["ip"].target_group_arn);
    let target = format!("hyperpod:{}/login-group", cluster(bed));
    let run = bed
        .cli("admit")
        .secret()
        .json()
        .args(&["--target-group", &group, "--target", &target])
        .run();
    assert!(run.stdout.starts_with('{'), "admit gave no report: {}", run.stderr);
    (run.code, run.json())
}

fn cluster(bed: &TestBed) -> String {
    bed.state
        .hyperpod
        .as_ref()
        .expect("the bed's HyperPod cluster")
        .cluster
        .clone()
}

/// The decision for the node at `address`.
fn decision(report: &Value, address: &str) -> String {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["address"] == address)
        .map_or_else(|| "absent".to_owned(), |n| n["decision"].as_str().unwrap().to_owned())
}

/// The HyperPod instance id of the node at `node`'s address.
fn cluster_id(bed: &TestBed, node: &Node) -> String {
    let hyperpod = bed.state.hyperpod.as_ref().unwrap();
    let (id, _) = hyperpod.nodes.iter().find(|(_, ip)| **ip == node.address).unwrap();
    id.clone()
}

#[test]
fn a_hyperpod_replacement_fails_no_login() {
    let (bed, _) = TestBed::converged(BedOptions::nodes(4).held(1));
    let known_hosts = lb_known_hosts(&bed);
    let nodes = bed.state.nodes.clone();
    let (old, new) = (&nodes[2], &nodes[3]);
    let stop = AtomicBool::new(false);
    let count = AtomicUsize::new(0);
    let more_logins = || five_more_logins(&count);
    let logins: Vec<Login> = std::thread::scope(|s| {
        let client = s.spawn(|| log_in_until(&bed, &known_hosts, &["UpdateHostKeys=no"], &stop, &count));
        let _stop = StopOnDrop(&stop);
        more_logins();
        let (code, report) = admit_group(&bed);
        assert_eq!(code, 0, "the group is the cluster's: {report}");
        // HyperPod replaces the node: first it reports it ShuttingDown.
        let old_id = cluster_id(&bed, old);
        let body = json!({"cluster": cluster(&bed), "instance_id": old_id, "status": "ShuttingDown"});
        bed.control("POST", "/_bed/hyperpod/status", &body);
        let (code, report) = admit_group(&bed);
        assert_eq!(
            (code, decision(&report, &old.address)),
            (0, "drain".to_owned()),
            "{report}"
        );
        // Sessions that started before the drain end (connection draining);
        // then the node goes, and its successor joins with its own keys.
        more_logins();
        bed.stop_node(&old.name);
        let body = json!({
            "cluster": cluster(&bed),
            "instance_id": old_id,
            "successor": "i-0b0000000000000001",
            "address": new.address,
        });
        bed.control("POST", "/_bed/hyperpod/replace", &body);
        bed.launch_node(&new.name);
        let (code, report) = admit_group(&bed);
        assert_eq!(
            (code, decision(&report, &new.address)),
            (1, "hold".to_owned()),
            "a successor serving its own keys is held out: {report}"
        );
        more_logins();
        assert_eq!(accepted(new), 0, "a login reached {} before its admission", new.name);
        // Its install (the lifecycle step), then the next pass admits it.
        let run = bed.cli("install").on(new).secret().run();
        assert_eq!(run.code, 0, "install on {}: {}", new.name, run.stderr);
        let (code, report) = admit_group(&bed);
        assert_eq!(
            (code, decision(&report, &new.address)),
            (0, "admit".to_owned()),
            "{report}"
        );
        wait_until("a login reaching the successor", Duration::from_secs(30), || {
            accepted(new) > 0
        });
        more_logins();
        stop.store(true, Ordering::Relaxed);
        client.join().unwrap()
    });
    let failed: Vec<&str> = logins.iter().filter_map(|l| l.failure.as_deref()).collect();
    eprintln!(
        "HyperPod replacement with admission: {} strict logins, {} failed",
        logins.len(),
        failed.len()
    );
    assert!(logins.len() >= 25, "the client logged in {} times", logins.len());
    assert!(
        failed.is_empty(),
        "{} logins failed, the first: {:?}",
        failed.len(),
        failed.first()
    );
}
