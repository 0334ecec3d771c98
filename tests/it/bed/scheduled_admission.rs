//! A full scheduled rotation of a pull fleet with a node replaced in the
//! middle, admission keeping the load balancer's target group: a client
//! that logs in through the balancer 5 times a second throughout, strict
//! and learning with UpdateHostKeys, sees no host key warning from the
//! replacement (it serves its own keys until its timer runs; admission
//! holds it out until then), nor from the promotion's convergence: a node
//! whose timer installed the promotion keeps offering the retired set
//! (`Retiring`), so the client's logins there do not drop the keys the
//! nodes not converged yet still sign with.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::bed::admission::{
    Login, StopOnDrop, a_replaced_node_gives_way_to_a_successor_once_it_serves, accepted, admit, five_more_logins,
    lb_known_hosts, log_in_until,
};
use crate::bed::rotate::{set_of, stages};
use crate::bed::scheduled::{deploy_function, ended, next_interval, schedule};
use crate::common::bed::{BedOptions, Node, SECRET, TestBed, served, wait_until};

/// The timers of `nodes`: the plain install.
fn timers(bed: &TestBed, nodes: &[&Node]) {
    for node in nodes {
        let run = bed.cli("install").on(node).secret().run();
        assert_eq!(run.code, 0, "timer install on {}: {}", node.name, run.stderr);
    }
}

#[test]
fn a_node_replaced_mid_rotation_and_the_promotions_convergence_warn_no_client() {
    let bed = TestBed::start(BedOptions::nodes(4).held(1).no_ssm());
    let nodes = bed.state.nodes.clone();
    let (old, new) = (&nodes[2], &nodes[3]);
    bed.init_from_node(SECRET, &nodes[0]);
    timers(&bed, &[&nodes[0], &nodes[1], old]);
    let known_hosts = lb_known_hosts(&bed);
    let arn = deploy_function(&bed, true, &[], None);

    let stop = AtomicBool::new(false);
    let count = AtomicUsize::new(0);
    let more_logins = || five_more_logins(&count);
    let logins: Vec<Login> = std::thread::scope(|s| {
        let client = s.spawn(|| log_in_until(&bed, &known_hosts, &["UpdateHostKeys=yes"], &stop, &count));
        let _stop = StopOnDrop(&stop);
        more_logins();
        // The schedule announces the next set; the timers offer it.
        bed.cli("schedule enable")
            .secret()
            .args(&["--function", &arn, "--schedule", "rate(30 days)"])
            .run()
            .ok();
        assert_eq!(ended(&bed, 1)["status"], "succeeded");
        timers(&bed, &[&nodes[0], &nodes[1], old]);
        more_logins();

        // Mid-interval, node 3 is replaced (admission.rs's phase).
        a_replaced_node_gives_way_to_a_successor_once_it_serves(&bed, old, new);
        more_logins();

        // The interval ends: the rotation promotes the announced set, which
        // every live node (the new one too) was seen serving.
        let announced = schedule(&bed)["announced_version"].as_str().unwrap().to_owned();
        let next_set = set_of(&bed, &announced);
        let record = next_interval(&bed, 2);
        assert_eq!(record["status"], "succeeded", "{record}");
        let current = stages(&bed)["AWSCURRENT"].as_str().unwrap().to_owned();
        assert_eq!(set_of(&bed, &current), next_set, "the announced set was promoted");
        more_logins();
        // Admission keeps the nodes catching up with the promotion; their
        // timers bring them to it.
        let (code, report) = admit(&bed, &[]);
        assert_eq!(code, 3, "{report}");
        // One node converges; the client logs in there (learning with
        // UpdateHostKeys what it offers) and then on the others, which
        // still sign with the retired set.
        timers(&bed, &[&nodes[0]]);
        let before = accepted(&nodes[0]);
        wait_until("three logins on the converged node", Duration::from_secs(60), || {
            accepted(&nodes[0]) >= before + 3
        });
        more_logins();
        timers(&bed, &[&nodes[1], new]);
        let (code, report) = admit(&bed, &[]);
        assert_eq!(code, 0, "{report}");
        assert_eq!(served(new), served(&nodes[0]), "the new node serves the current set");
        more_logins();
        stop.store(true, Ordering::Relaxed);
        client.join().unwrap()
    });
    let warned: Vec<&String> = logins
        .iter()
        .filter(|l| l.warned())
        .filter_map(|l| l.failure.as_ref())
        .collect();
    let failed = logins.iter().filter(|l| l.failure.is_some() && !l.warned()).count();
    eprintln!(
        "scheduled rotation with a node replaced: {} strict logins; host key warnings: {}; failed to connect (the replaced node's end, before its removal): {}",
        logins.len(),
        warned.len(),
        failed
    );
    assert!(logins.len() >= 30, "the client logged in {} times", logins.len());
    assert!(
        warned.is_empty(),
        "{} host key warnings, the first: {:?}",
        warned.len(),
        warned.first().map(|w| w.lines().rev().take(3).collect::<Vec<_>>())
    );
}
