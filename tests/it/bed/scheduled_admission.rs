//! A full scheduled rotation of a pull fleet with a node replaced in the
//! middle, admission keeping the load balancer's target group: a client
//! that logs in through the balancer 5 times a second throughout, strict
//! and learning with UpdateHostKeys, sees no host key warning from the
//! replacement (it serves its own keys until its timer runs; admission
//! holds it out until then). The one window that warns is the
//! promotion's convergence (docs/rotation.md, "Who sees a warning": nodes
//! whose timer ran no longer offer the previous set): measured and
//! reported, and no warning is allowed outside it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::bed::admission::{
    Login, StopOnDrop, a_replaced_node_gives_way_to_a_successor_once_it_serves, admit, log_in_until,
};
use crate::bed::rotate::{set_of, stages};
use crate::bed::scheduled::{deploy_function, ended, next_interval, schedule};
use crate::common::bed::{BedOptions, Node, TestBed, served, wait_until};

/// The timers of `nodes`: the plain install.
fn timers(bed: &TestBed, nodes: &[&Node]) {
    for node in nodes {
        let run = bed.cli("install").on(node).secret().run();
        assert_eq!(run.code, 0, "timer install on {}: {}", node.name, run.stderr);
    }
}

#[test]
fn a_node_replaced_mid_rotation_warns_no_client_only_the_promotions_convergence_does() {
    let bed = TestBed::start(BedOptions {
        nodes: 4,
        held: 1,
        no_ssm: true,
        ..BedOptions::default()
    });
    let nodes = bed.state.nodes.clone();
    let (old, new) = (&nodes[2], &nodes[3]);
    bed.init_from_node("hostkeys/hk", &nodes[0]);
    timers(&bed, &[&nodes[0], &nodes[1], old]);
    let lb = bed.state.lb.clone().unwrap();
    let known_hosts = bed.dir().join("known_hosts");
    let lines = bed.cli("known-hosts").secret().args(&["--host", &lb.address]).run();
    lines.ok();
    std::fs::write(&known_hosts, &lines.stdout).unwrap();
    let arn = deploy_function(&bed, true, &[], None);

    let stop = AtomicBool::new(false);
    let count = AtomicUsize::new(0);
    let more_logins = || {
        let from = count.load(Ordering::Relaxed);
        wait_until("five more logins", Duration::from_secs(60), || {
            count.load(Ordering::Relaxed) >= from + 5
        });
    };
    let (logins, converging): (Vec<Login>, (Instant, Instant)) = std::thread::scope(|s| {
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
        let promoted_at = Instant::now();
        let record = next_interval(&bed, 2);
        assert_eq!(record["status"], "succeeded", "{record}");
        let current = stages(&bed)["AWSCURRENT"].as_str().unwrap().to_owned();
        assert_eq!(set_of(&bed, &current), next_set, "the announced set was promoted");
        more_logins();
        // Admission keeps the nodes catching up with the promotion; their
        // timers bring them to it.
        let (code, report) = admit(&bed, &[]);
        assert_eq!(code, 3, "{report}");
        timers(&bed, &[&nodes[0], &nodes[1], new]);
        let converged_at = Instant::now();
        let (code, report) = admit(&bed, &[]);
        assert_eq!(code, 0, "{report}");
        assert_eq!(served(new), served(&nodes[0]), "the new node serves the current set");
        more_logins();
        stop.store(true, Ordering::Relaxed);
        (client.join().unwrap(), (promoted_at, converged_at))
    });
    let during = |l: &&Login| l.at >= converging.0 && l.at <= converging.1;
    let warned: Vec<&String> = logins
        .iter()
        .filter(|l| l.warned() && !during(l))
        .filter_map(|l| l.failure.as_ref())
        .collect();
    let converging_warnings = logins.iter().filter(|l| l.warned() && during(l)).count();
    let failed = logins.iter().filter(|l| l.failure.is_some() && !l.warned()).count();
    eprintln!(
        "scheduled rotation with a node replaced: {} strict logins; host key warnings: {} outside the promotion's convergence, {} during it (nodes whose timer ran stop offering the previous set: a client that learned that through UpdateHostKeys is warned by a node not converged yet); {} failed to connect",
        logins.len(),
        warned.len(),
        converging_warnings,
        failed
    );
    assert!(logins.len() >= 30, "the client logged in {} times", logins.len());
    assert!(warned.is_empty(), "host key warnings: {warned:?}");
}
