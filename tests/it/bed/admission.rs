//! Admission on the bed: HAProxy follows the ip target group (what a
//! Network Load Balancer does with its registered targets), a real OpenSSH
//! client logs in through it 5 times a second with
//! `StrictHostKeyChecking=yes` throughout, and `admit` (its own policy,
//! IAM enforced) keeps the target group to the cluster's nodes that serve
//! the set: a replaced node and its successor, a drifted node, the safety
//! limits, another target group refused.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::bed::{BedOptions, Node, SECRET, TARGETS, TestBed, change_ed25519_key_by_hand, wait_until};

/// One login through the balancer: when it started and ended, and what
/// went wrong.
pub(crate) struct Login {
    pub(crate) at: Instant,
    pub(crate) done: Instant,
    pub(crate) failure: Option<String>,
}

impl Login {
    /// Whether the login was under way at some time in `window`: one that
    /// started just before a change can meet it (a handshake takes a
    /// while, longer on a loaded host).
    pub(crate) fn during(&self, window: &(Instant, Instant)) -> bool {
        self.at <= window.1 && self.done >= window.0
    }

    /// Whether the client warned about or refused the host key (not a
    /// connection that failed).
    pub(crate) fn warned(&self) -> bool {
        self.failure.as_deref().is_some_and(|f| {
            f.contains("WARNING") || f.contains("Host key verification failed") || f.contains("IDENTIFICATION")
        })
    }
}

/// Sets its flag when dropped: a phase that panics stops the client too,
/// or the scope would wait for it forever.
pub(crate) struct StopOnDrop<'a>(pub(crate) &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Strict logins through the balancer, 5 a second, with `options`, until
/// `stop`. `count` follows how many were made.
pub(crate) fn log_in_until(
    bed: &TestBed,
    known_hosts: &Path,
    options: &[&str],
    stop: &AtomicBool,
    count: &AtomicUsize,
) -> Vec<Login> {
    let mut out = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let at = Instant::now();
        let o = bed.ssh_lb(known_hosts, options);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        let failure = (!o.status.success() || stderr.contains("WARNING")).then_some(stderr);
        out.push(Login {
            at,
            done: Instant::now(),
            failure,
        });
        count.fetch_add(1, Ordering::Relaxed);
        // The pace of the client, not a wait for a condition.
        std::thread::sleep(Duration::from_millis(200).saturating_sub(at.elapsed()));
    }
    out
}

/// Waits until the client (`log_in_until`) has logged in five more times:
/// every phase starts and ends with the client logging in.
pub(crate) fn five_more_logins(count: &AtomicUsize) {
    let from = count.load(Ordering::Relaxed);
    wait_until("five more logins", Duration::from_secs(60), || {
        count.load(Ordering::Relaxed) >= from + 5
    });
}

/// A strict client's known_hosts: AWSCURRENT's lines for the balancer's
/// address, as `known-hosts` prints them.
pub(crate) fn lb_known_hosts(bed: &TestBed) -> PathBuf {
    let lb = bed.state.lb.clone().unwrap();
    let lines = bed.cli("known-hosts").secret().args(&["--host", &lb.address]).run();
    lines.ok();
    let known_hosts = bed.dir().join("strict_known_hosts");
    std::fs::write(&known_hosts, &lines.stdout).unwrap();
    known_hosts
}

/// Logins `node` accepted so far (its sshd's log).
pub(crate) fn accepted(node: &Node) -> usize {
    let log = std::fs::read_to_string(node.root.join("sshd.log")).unwrap_or_default();
    log.lines().filter(|l| l.contains("Accepted publickey")).count()
}

fn ip_group(bed: &TestBed) -> String {
    format!("tg:{}", bed.state.elb["ip"].target_group_arn)
}

/// `admit` once, as the admission role, on the ip target group.
pub(crate) fn admit(bed: &TestBed, extra: &[&str]) -> (i32, Value) {
    let group = ip_group(bed);
    let mut args = vec!["--target-group", group.as_str()];
    args.extend(TARGETS);
    args.extend(extra);
    let run = bed.cli("admit").secret().json().args(&args).run();
    assert!(run.stdout.starts_with('{'), "admit gave no report: {}", run.stderr);
    (run.code, run.json())
}

/// Each node's decision in a report, by name.
fn decisions(report: &Value) -> Vec<(String, String)> {
    crate::common::support::pairs(&report["nodes"], "name", "decision")
}

/// The decision for the node or target at `address` (its target id in
/// the ip target group; names need not be unique).
pub(crate) fn decision_of(report: &Value, address: &str) -> String {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["target_id"] == address)
        .map(|n| n["decision"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("{address} is not in {report}"))
}

/// The ip target group's balancer's backends, as HAProxy's configuration
/// holds them: where it routes new connections.
pub(crate) fn backends(bed: &TestBed) -> Vec<String> {
    backends_of(bed, "login")
}

/// The backends of HAProxy's `backend` section (`login`: the ip target
/// group's balancer; `login-i`: the instance target group's).
pub(crate) fn backends_of(bed: &TestBed, backend: &str) -> Vec<String> {
    let config = std::fs::read_to_string(bed.dir().join("haproxy.cfg")).unwrap();
    let header = format!("backend {backend}");
    config
        .lines()
        .skip_while(|l| l.trim() != header)
        .skip(1)
        .take_while(|l| l.starts_with(' '))
        .filter_map(|l| l.trim().strip_prefix("server "))
        .map(|l| l.split(' ').nth(1).unwrap().to_owned())
        .collect()
}

/// Waits until no target of the ip target group is draining (each
/// drain lasts the group's deregistration delay).
fn drains_end(bed: &TestBed) {
    let elb = crate::bed::load_balancer::Elb::new(bed);
    let group = &bed.state.elb["ip"].target_group_arn;
    wait_until("the drains to end", Duration::from_secs(30), || {
        !elb.states(group).iter().any(|(_, _, state)| state == "draining")
    });
}

/// The pids of HAProxy's workers (its master's children).
fn lb_workers(bed: &TestBed) -> Vec<u32> {
    let master = bed.state.lb.as_ref().unwrap().pid.to_string();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // pid (comm) state ppid ...: comm may hold spaces, so after ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if ppid == Some(master.as_str()) {
            out.extend(entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

/// Sets an instance's Name tag (as the bed).
fn name_instance(bed: &TestBed, instance: &str, name: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let ec2 = aws_sdk_ec2::Client::new(&bed.sdk_config(1).await);
        let tag = aws_sdk_ec2::types::Tag::builder().key("Name").value(name).build();
        ec2.create_tags().resources(instance).tags(tag).send().await.unwrap();
    });
}

pub(crate) fn terminate(bed: &TestBed, instance: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let ec2 = aws_sdk_ec2::Client::new(&bed.sdk_config(1).await);
        ec2.terminate_instances().instance_ids(instance).send().await.unwrap();
    });
}

/// A node replaced: its instance terminated, a successor at a new address
/// with its own keys. The old address is removed; the successor is held
/// out (no login reaches it) until its install has run, then admitted, and
/// logins reach it. Returns the window in which logins could fail: from
/// the old node's end until the balancer no longer had it, its old worker
/// included (as in [`a_drifted_node_is_drained`]: the reload takes over the
/// listening socket, and until the old worker ends it may still send a
/// login where the old configuration said).
pub(crate) fn a_replaced_node_gives_way_to_a_successor_once_it_serves(
    bed: &TestBed,
    old: &Node,
    new: &Node,
) -> (Instant, Instant) {
    let start = Instant::now();
    let workers = lb_workers(bed);
    bed.stop_node(&old.name);
    terminate(bed, &old.instance_id);
    bed.launch_node(&new.name);
    let (code, report) = admit(bed, &[]);
    assert_eq!(code, 1, "a cluster node serving other keys is drift: {report}");
    assert_eq!(decision_of(&report, &old.address), "remove", "{report}");
    assert_eq!(decision_of(&report, &new.address), "hold", "{report}");
    wait_until("the balancer's old worker to end", Duration::from_secs(30), || {
        let now = lb_workers(bed);
        now.len() == 1 && !workers.contains(&now[0])
    });
    let end = Instant::now();
    assert!(
        !backends(bed).contains(&format!("{}:22", old.address)),
        "{:?}",
        backends(bed)
    );
    assert!(!backends(bed).contains(&format!("{}:22", new.address)));
    // Its install (the lifecycle step, the timer).
    let run = bed.cli("install").on(new).secret().run();
    assert_eq!(run.code, 0, "install on {}: {}", new.name, run.stderr);
    assert_eq!(accepted(new), 0, "a login reached {} before its admission", new.name);
    let dry = admit(bed, &["--dry-run"]);
    assert_eq!(decision_of(&dry.1, &new.address), "admit", "{}", dry.1);
    assert_eq!(dry.0, 3, "a dry run with a change to make: {}", dry.1);
    assert!(
        !backends(bed).contains(&format!("{}:22", new.address)),
        "a dry run changed the group"
    );
    let (code, report) = admit(bed, &[]);
    assert_eq!(
        (code, decision_of(&report, &new.address)),
        (0, "admit".to_owned()),
        "{report}"
    );
    wait_until(
        "a login through the balancer reaching the new node",
        Duration::from_secs(30),
        || accepted(new) > 0,
    );
    (start, end)
}

/// The audit of a HyperPod cluster with its load balancer names the
/// cluster nodes that are no target and the targets that are no cluster
/// node. The bed's HyperPod cluster still lists the replaced node and not
/// its successor: each is reported.
fn the_audit_says_what_admission_would_do(bed: &TestBed, old: &Node, new: &Node) {
    let run = bed
        .cli("audit")
        .secret()
        .json()
        .args(&[
            "--target",
            "hyperpod:hp/login-group",
            "--lb",
            "lb:hp-login",
            "--samples",
            "3",
        ])
        .run();
    let report = run.json();
    let mut found: Vec<(String, String)> = report["membership"]["findings"]
        .as_array()
        .unwrap_or_else(|| panic!("no membership: {report}"))
        .iter()
        .map(|f| {
            (
                f["verdict"].as_str().unwrap().to_owned(),
                f["address"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            ("NOT_A_TARGET".to_owned(), old.address.clone()),
            ("NOT_IN_CLUSTER".to_owned(), new.address.clone())
        ],
        "{report}"
    );
}

/// The instance target group is not admission's: RegisterTargets there is
/// refused (exit 4), and nothing changes.
fn another_target_group_is_refused(bed: &TestBed) {
    let other = format!("tg:{}", bed.state.elb["instance"].target_group_arn);
    let mut args = vec!["--target-group", other.as_str()];
    args.extend(TARGETS);
    let run = bed.cli("admit").secret().args(&args).run();
    assert_eq!(run.code, 4, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("RegisterTargets") && run.stderr.contains("hp-login-i"),
        "{}",
        run.stderr
    );
    let usage = bed.iam_usage();
    let refused = usage["denied"]["hostkeyctl-admission"].to_string();
    assert!(refused.contains("elasticloadbalancing:RegisterTargets"), "{usage}");
    a_partial_target_is_refused(bed);
    stale_tags_are_refused_never_read_around(bed);
}

/// `--target` naming one node of three: the other targets are strangers
/// that serve the set, so they are kept and reported (exit 3), and the
/// group is left as it was.
fn a_partial_target_is_refused(bed: &TestBed) {
    let before = backends(bed);
    let group = ip_group(bed);
    let run = bed
        .cli("admit")
        .secret()
        .json()
        .args(&["--target-group", &group, "--target", "tag:Name=hp-login-1"])
        .run();
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    let kept: Vec<&Value> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["member"] == false && n["target_state"] != "draining")
        .collect();
    assert!(!kept.is_empty());
    for n in kept {
        assert_eq!(n["decision"], "keep", "{n}");
        assert!(n["reason"].as_str().unwrap().contains("--target too narrow"), "{n}");
    }
    assert_eq!(backends(bed), before);
}

/// With the fingerprint tags gone, admission refuses (exit 2, saying how
/// to write them again) and never reads the secret's value instead.
fn stale_tags_are_refused_never_read_around(bed: &TestBed) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sm = runtime.block_on(async { aws_sdk_secretsmanager::Client::new(&bed.sdk_config(1).await) });
    let tags = runtime.block_on(async { sm.describe_secret().secret_id(SECRET).send().await.unwrap() });
    let version = tags
        .tags()
        .iter()
        .find(|t| t.key() == Some("hostkeyctl:version"))
        .and_then(|t| t.value())
        .unwrap()
        .to_owned();
    runtime.block_on(async {
        sm.untag_resource()
            .secret_id(SECRET)
            .tag_keys("hostkeyctl:version")
            .send()
            .await
            .unwrap();
    });
    let (code, _, stderr) = {
        let group = ip_group(bed);
        let mut args = vec!["--target-group", group.as_str()];
        args.extend(TARGETS);
        let run = bed.cli("admit").secret().args(&args).run();
        (run.code, run.stdout, run.stderr)
    };
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("rotate --resume"), "{stderr}");
    let usage = bed.iam_usage();
    let asked = format!(
        "{}{}",
        usage["allowed"]["hostkeyctl-admission"], usage["denied"]["hostkeyctl-admission"]
    );
    assert!(
        !asked.contains("GetSecretValue"),
        "admission asked for the value: {usage}"
    );
    let tag = aws_sdk_secretsmanager::types::Tag::builder()
        .key("hostkeyctl:version")
        .value(version)
        .build();
    runtime.block_on(async {
        sm.tag_resource().secret_id(SECRET).tags(tag).send().await.unwrap();
    });
}

#[test]
fn admission_lets_users_reach_only_nodes_serving_the_set() {
    let options = BedOptions::nodes(4).held(1);
    let (bed, _) = TestBed::converged(options);
    let known_hosts = lb_known_hosts(&bed);
    let nodes = bed.state.nodes.clone();
    let stop = AtomicBool::new(false);
    let count = AtomicUsize::new(0);
    let more_logins = || five_more_logins(&count);
    let (logins, windows) = std::thread::scope(|s| {
        let client = s.spawn(|| log_in_until(&bed, &known_hosts, &["UpdateHostKeys=no"], &stop, &count));
        let _stop = StopOnDrop(&stop);
        more_logins();
        let replaced = a_replaced_node_gives_way_to_a_successor_once_it_serves(&bed, &nodes[2], &nodes[3]);
        the_audit_says_what_admission_would_do(&bed, &nodes[2], &nodes[3]);
        more_logins();
        another_target_group_is_refused(&bed);
        let drifted = a_drifted_node_is_drained(&bed, &nodes[0], &nodes[1]);
        more_logins();
        stop.store(true, Ordering::Relaxed);
        (client.join().unwrap(), (replaced, drifted))
    });
    let failed: Vec<&Login> = logins.iter().filter(|l| l.failure.is_some()).collect();
    let in_window = |w: &(Instant, Instant)| failed.iter().filter(|l| l.during(w)).count();
    let outside: Vec<&String> = failed
        .iter()
        .filter(|l| ![windows.0, windows.1].iter().any(|w| l.during(w)))
        .filter_map(|l| l.failure.as_ref())
        .collect();
    eprintln!(
        "admission: {} strict logins; failed while the replaced node was still a target: {}; while the drifted node was: {}",
        logins.len(),
        in_window(&windows.0),
        in_window(&windows.1)
    );
    assert!(logins.len() >= 15, "the client logged in {} times", logins.len());
    assert!(outside.is_empty(), "logins failed outside the windows: {outside:?}");
    safety_limits_hold(&bed, &nodes);
    a_promotion_converging_drains_nothing(&bed, &[&nodes[0], &nodes[1], &nodes[3]]);
    crate::bed::admission_strangers::strangers_never_steer_admission(&bed, &[&nodes[0], &nodes[1], &nodes[3]]);
}

/// A promotion the pull fleet's timers have not installed yet: every
/// target serves the previous set first and the new AWSCURRENT as extra
/// keys (its banner says so). Admission keeps them all (exit 3 until they
/// converge), never drains them as drifted; each timer's install brings
/// its node back to "the set".
fn a_promotion_converging_drains_nothing(bed: &TestBed, nodes: &[&Node]) {
    for node in nodes {
        let run = bed.cli("install").on(node).secret().run();
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    // The node drained above comes back once its drain has ended, and
    // takes users once its checks pass.
    drains_end(bed);
    let (code, report) = admit(bed, &[]);
    assert_eq!(code, 0, "every node serves the set again: {report}");
    wait_until("every node to take users", Duration::from_secs(30), || {
        backends(bed).len() == 3
    });
    let before = backends(bed);
    bed.cli("rotate")
        .secret()
        .targets()
        .args(&["--overlap", "--max-concurrency", "100%"])
        .run()
        .ok();
    let promoted = bed
        .cli("rotate")
        .secret()
        .targets()
        .args(&["--pull", "--finish", "--min-overlap", "0", "--wait", "0"])
        .run();
    assert!(matches!(promoted.code, 0 | 3), "{}", promoted.stderr);
    let (code, report) = admit(bed, &[]);
    assert_eq!(code, 3, "{report}");
    for node in nodes {
        assert_eq!(decision_of(&report, &node.address), "keep", "{report}");
    }
    assert!(report.to_string().contains("\"serves\":\"promoting\""), "{report}");
    assert_eq!(backends(bed), before, "a converging promotion changed the group");
    for node in nodes {
        let run = bed.cli("install").on(node).secret().run();
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    let (code, report) = admit(bed, &[]);
    assert_eq!(code, 0, "{report}");
}

/// A node whose keys were changed by hand is drained at the next run.
/// Returns the window between the change and the drain.
fn a_drifted_node_is_drained(bed: &TestBed, node: &Node, twin: &Node) -> (Instant, Instant) {
    // The two share a Name, as ParallelCluster's login nodes do: each is
    // judged by what it served itself.
    for n in [node, twin] {
        name_instance(bed, &n.instance_id, "LoginNode");
    }
    // A drain under way (the replaced node's old address, for the group's
    // deregistration delay) counts against --max-drain: until it ends, the
    // drain below would be held back (exit 3), as it should.
    drains_end(bed);
    let start = Instant::now();
    let workers = lb_workers(bed);
    change_ed25519_key_by_hand(node);
    let (code, report) = admit(bed, &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(decision_of(&report, &node.address), "drain", "{report}");
    assert_eq!(decision_of(&report, &twin.address), "keep", "{report}");
    let gone = format!("{}:22", node.address);
    assert!(!backends(bed).contains(&gone), "{:?}", backends(bed));
    // The reload takes over the listening socket, and the old worker ends
    // once its sessions have (an NLB's draining): until then it may still
    // send a login to the drained node.
    let before = accepted(node);
    wait_until("the balancer's old worker to end", Duration::from_secs(30), || {
        let now = lb_workers(bed);
        now.len() == 1 && !workers.contains(&now[0])
    });
    let end = Instant::now();
    let after = accepted(node);
    assert!(after - before <= 5, "the drained node kept taking logins");
    (start, end)
}

/// With two of three targets drifted, one run drains one, holds the other
/// back and exits 3; with every target drifted it drains none.
fn safety_limits_hold(bed: &TestBed, nodes: &[Node]) {
    // Node 1 (drained for drift) serves the set again, and comes back once
    // its deregistration delay has ended (AWS keeps it draining until then).
    let run = bed.cli("install").on(&nodes[0]).secret().run();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let elb = crate::bed::load_balancer::Elb::new(bed);
    let group = &bed.state.elb["ip"].target_group_arn;
    wait_until("node 1's drain to end", Duration::from_secs(30), || {
        elb.health(group, &nodes[0].address, 22).is_none()
    });
    let (code, report) = admit(bed, &[]);
    assert_eq!(
        (code, decision_of(&report, &nodes[0].address)),
        (0, "admit".to_owned()),
        "{report}"
    );
    // Capacity is a healthy target: until node 1 passes its checks, it
    // takes nobody, and drains would count on it.
    elb.await_state(group, &nodes[0].address, 22, "healthy");
    // Targets: nodes 1, 2 and 4. Two drift.
    change_ed25519_key_by_hand(&nodes[1]);
    change_ed25519_key_by_hand(&nodes[3]);
    let (code, report) = admit(bed, &[]);
    assert_eq!(code, 3, "{report}");
    let mut got = vec![
        decision_of(&report, &nodes[1].address),
        decision_of(&report, &nodes[3].address),
    ];
    got.sort();
    assert_eq!(got, ["drain", "held_back"], "{report}");
    let held = crate::common::support::row(&report["nodes"], "decision", "held_back")["reason"].to_string();
    assert!(held.contains("--max-drain 1"), "{held}");
    // Now every remaining target drifts: none is drained.
    change_ed25519_key_by_hand(&nodes[0]);
    let before = backends(bed);
    let (code, report) = admit(bed, &["--max-drain", "5"]);
    assert_eq!(code, 3, "{report}");
    assert!(
        decisions(&report).iter().all(|(_, d)| d != "drain" && d != "remove"),
        "{report}"
    );
    assert_eq!(
        backends(bed),
        before,
        "a run with every target drifted changed the group"
    );
}
