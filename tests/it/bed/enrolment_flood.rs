//! D1 and D2 (docs/cluster-trust.md, "Performance and quotas"): a node's
//! own users hold its role and its identity document (IMDS open to them),
//! not its host keys, and flood the signer with requests it refuses. The
//! signer refuses them before any AWS call but one `GetItem`: no lookup
//! of the cluster, no scan, no KMS call. Its reserved concurrency is the
//! template's (10), which the bed's Lambda enforces as Lambda does
//! (testbed/emulator/functions.py: HTTP 429 past it); renewals that meet
//! it are asked again with jitter and succeed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::bed::enrolment::{cluster_bed_with, enroll, instance_of, node_request};
use crate::common::bed::{Role, Run, TestBed};

/// What the flood got back.
#[derive(Default)]
struct Tally {
    refused: AtomicU64,
    throttled: AtomicU64,
    other: AtomicU64,
}

/// `callers` tasks invoking the signer with `event` as the node role, with
/// no retry and no pause, until `stop`.
fn flood(
    bed: &TestBed,
    runtime: &tokio::runtime::Runtime,
    arn: &str,
    event: &serde_json::Value,
    callers: usize,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let config = runtime.block_on(bed.sdk_config_as(Role::Node, 1));
    (0..callers)
        .map(|_| {
            let client = aws_sdk_lambda::Client::new(&config);
            let (arn, body, stop, tally) = (arn.to_owned(), event.to_string(), stop.clone(), tally.clone());
            runtime.spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let sent = client
                        .invoke()
                        .function_name(&arn)
                        .payload(aws_sdk_lambda::primitives::Blob::new(body.clone()))
                        .send()
                        .await;
                    let counter = match &sent {
                        Ok(out) if out.function_error().is_some() => &tally.refused,
                        Err(e) if e.as_service_error().is_some_and(|s| s.is_too_many_requests_exception()) => {
                            &tally.throttled
                        }
                        _ => &tally.other,
                    };
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect()
}

/// `enroll` on each of `nodes` at once.
fn enrol_all(bed: &TestBed, nodes: &[crate::common::bed::Node], arn: &str) -> Vec<Run> {
    std::thread::scope(|s| {
        let handles: Vec<_> = nodes.iter().map(|n| s.spawn(move || enroll(bed, n, arn))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// A flood from one node (five callers, no pause) while three others
/// enrol and renew: 3 of 3 succeed each time; the flood's requests, all
/// refused, cost no signature, one lookup of the cluster a minute (for a
/// patch) and no scan of the bindings. The flood starts with the function's whole concurrency
/// held for 8 s (as a larger flood would hold it, whatever this machine's
/// speed), so every first enrolment meets HTTP 429 and is asked again.
#[test]
fn renewals_succeed_while_a_node_floods_the_signer_and_its_refusals_cost_a_read_and_a_lookup_a_minute() {
    // The signer keeps the revoked list a minute, as it does by default.
    let (bed, runtime, arn) = cluster_bed_with(
        4,
        "",
        "ecdsa",
        &serde_json::json!({"HOSTKEYCTL_ENROL_CACHE_SECONDS": "60"}),
    );
    let nodes = &bed.state.nodes;
    let (flooder, renewing) = (&nodes[0], &nodes[1..]);
    enroll(&bed, flooder, &arn).ok();
    // Keys that are not the node's (the users' own), with valid proofs,
    // over the node's identity document.
    let event = node_request(&bed, &nodes[1], &instance_of(&bed, &flooder.address), &arn, &[]);
    let before = bed.counts();
    let started = std::time::Instant::now();
    let count = |counts: &std::collections::HashMap<String, u64>, key: &str| counts.get(key).copied().unwrap_or(0);

    bed.control(
        "POST",
        "/_bed/lambda/hold",
        &serde_json::json!({"arn": arn, "seconds": 8}),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let callers = flood(&bed, &runtime, &arn, &event, 5, &stop, &tally);
    let first = enrol_all(&bed, renewing, &arn);
    let renewals = enrol_all(&bed, renewing, &arn);
    stop.store(true, Ordering::SeqCst);
    for caller in callers {
        runtime.block_on(caller).unwrap();
    }
    for run in first.iter().chain(&renewals) {
        assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.stdout);
    }
    for run in &first {
        assert!(run.stderr.contains("the signer was busy"), "{}", run.stderr);
    }
    let after = bed.counts();
    let refused = tally.refused.load(Ordering::SeqCst);
    assert!(refused >= 10, "the flood was refused {refused} times only");
    assert!(
        tally.throttled.load(Ordering::SeqCst) >= 1,
        "the flood never met the limit"
    );
    assert_eq!(tally.other.load(Ordering::SeqCst), 0, "a flood request was answered");
    // Three keys per node signed at its first enrolment; the renewals,
    // within 10 minutes, answered from the bindings; the refusals nothing.
    assert_eq!(count(&after, "kms:Sign") - count(&before, "kms:Sign"), 9);
    let lookups = count(&after, "sagemaker:DescribeClusterNode") - count(&before, "sagemaker:DescribeClusterNode");
    // Other keys have the cluster's record looked up for a patch at most
    // once a minute (the binding knows the node's image): one lookup per
    // minute begun, beside the three enrolments'.
    let minutes = started.elapsed().as_secs() / 60 + 1;
    assert!(
        (4..=3 + minutes).contains(&lookups),
        "{lookups} lookups in {minutes} minute(s): refusals looked the cluster up more than once a minute"
    );
    let environments = bed.control("POST", "/_bed/lambda/stats", &serde_json::json!({"arn": arn}))["environments"]
        .as_u64()
        .unwrap();
    let scans = count(&after, "dynamodb:Scan") - count(&before, "dynamodb:Scan");
    eprintln!(
        "flood: {refused} refused and {} throttled flood requests; 6 of 6 enrolments and renewals succeeded; kms:Sign {}; {lookups} lookups; {scans} scans by {environments} environments",
        tally.throttled.load(Ordering::SeqCst),
        count(&after, "kms:Sign") - count(&before, "kms:Sign")
    );
    assert!(
        scans <= environments,
        "{scans} scans by {environments} environments: the revoked list is read at most once a minute each"
    );
}
