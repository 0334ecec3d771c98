//! `hostkeyctl rotate` on the test bed: full rotation, stops and crashes
//! resumed, failures that must not promote, and abort.

use std::process::Command;

use serde_json::{Value, json};

use crate::common::bed::{BedOptions, SECRET, TARGETS, TestBed, keyscan, served, set_fingerprints};
use crate::common::support::require;

/// `rotate --output json` of the bed's login nodes with `extra`: exit
/// code, report, stderr.
pub(crate) fn rotate(bed: &TestBed, extra: &[&str]) -> (i32, Value, String) {
    let mut cli = bed
        .cli("rotate --max-concurrency 100%")
        .secret()
        .targets()
        .json()
        .args(extra);
    // Promotions at once unless the test says otherwise: what these tests
    // exercise is the protocol; the overlap test and docs/rotation.md's
    // minimum overlap are tested with --min-overlap left out.
    if !extra
        .iter()
        .any(|a| a.starts_with("--min-overlap") || *a == "--overlap")
    {
        cli = cli.args(&["--min-overlap", "0"]);
    }
    let run = cli.run();
    let json = if run.stdout.trim().is_empty() {
        Value::Null
    } else {
        run.json()
    };
    (run.code, json, run.stderr)
}

/// The stages, from `status`: stage -> version id.
pub(crate) fn stages(bed: &TestBed) -> Value {
    let run = bed.cli("status").json().secret().run();
    run.ok();
    let status = run.json();
    let mut by_stage = serde_json::Map::new();
    for v in status["versions"].as_array().unwrap() {
        for s in v["stages"].as_array().unwrap() {
            by_stage.insert(s.as_str().unwrap().to_owned(), v["version_id"].clone());
        }
    }
    Value::Object(by_stage)
}

/// The fingerprints of a version's keys, from `status`.
pub(crate) fn set_of(bed: &TestBed, version: &str) -> Vec<Option<String>> {
    let status = bed.cli("status").json().secret().run().json();
    let v = crate::common::support::row(&status["versions"], "version_id", version).clone();
    set_fingerprints(&v)
}

fn prepared() -> (TestBed, String) {
    let (bed, init) = TestBed::converged(BedOptions::default());
    (bed, init["version_id"].as_str().unwrap().to_owned())
}

#[test]
fn a_full_rotation_moves_every_node_and_the_lb_to_the_new_set() {
    let (bed, old) = prepared();
    let (code, report, stderr) = rotate(&bed, &[]);
    assert_eq!(code, 0, "{stderr}\n{report}");
    assert_eq!(report["result"], "rotated");
    let new = report["current_version"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    let s = stages(&bed);
    assert_eq!(s["AWSCURRENT"], new.as_str());
    assert_eq!(s["AWSPREVIOUS"], old.as_str());
    assert!(s.get("AWSPENDING").is_none(), "{s}");
    let expected = set_of(&bed, &new);
    assert_ne!(expected, set_of(&bed, &old));
    for n in &bed.state.nodes {
        assert_eq!(served(n), expected, "{}", n.name);
    }
    let lb = bed.state.lb.clone().unwrap();
    for _ in 0..6 {
        assert_eq!(keyscan(&lb.address, lb.port, "ed25519"), expected[0]);
    }
    // The auditor's view (tags) follows the rotation.
    let mut audit = vec!["audit", "--output", "json", "--secret-id", SECRET];
    audit.extend(TARGETS);
    let run = bed.run(&audit);
    run.ok();
    assert!(run.json()["expected_source"].as_str().unwrap().contains(&new));
    roll_back(&bed, &old, &new, &audit);
}

/// `rotate --rollback` after that promotion: the previous keys come back
/// through an overlap. A client that knows only the promoted keys logs in
/// once during it (UpdateHostKeys), then 20 times strictly after the
/// rollback's promotion; the auditor role's audit passes with the tags the
/// promotion refreshed.
fn roll_back(bed: &TestBed, old: &str, new: &str, audit: &[&str]) {
    let lb = bed.state.lb.clone().unwrap();
    let known_hosts = bed.dir().join("known_hosts-rollback");
    let lines = bed.cli("known-hosts").secret().args(&["--host", &lb.address]).run();
    lines.ok();
    std::fs::write(&known_hosts, &lines.stdout).unwrap();
    let old_set = set_of(bed, old);
    let rollback = ["--rollback", "--min-overlap", "auto"];
    let (code, report, stderr) = rotate(bed, &rollback);
    assert_eq!(code, 0, "{stderr}\n{report}");
    assert_eq!(report["result"], "overlap_started", "{report}");
    let pending = stages(bed)["AWSPENDING"].as_str().unwrap().to_owned();
    assert_eq!(
        set_of(bed, &pending),
        old_set,
        "the rollback does not announce the previous keys"
    );
    let login = bed.ssh_lb(&known_hosts, &["UpdateHostKeys=yes"]);
    assert!(login.status.success(), "{}", String::from_utf8_lossy(&login.stderr));
    // Held back until the overlap passed: nothing moves (exit 3).
    let (code, _, stderr) = rotate(bed, &rollback);
    assert_eq!(code, 3, "{stderr}");
    assert_eq!(stages(bed)["AWSCURRENT"], new, "promoted before the overlap");
    bed.control("POST", "/_bed/clock", &json!({"hours": 25}));
    let (code, report, stderr) = rotate(bed, &rollback);
    assert_eq!(code, 0, "{stderr}\n{report}");
    assert_eq!(report["result"], "rotated", "{report}");
    assert_eq!(set_of(bed, stages(bed)["AWSCURRENT"].as_str().unwrap()), old_set);
    let failures: Vec<String> = (0..20)
        .map(|_| bed.ssh_lb(&known_hosts, &["UpdateHostKeys=no"]))
        .filter(|o| !o.status.success() || String::from_utf8_lossy(&o.stderr).contains("WARNING"))
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    assert!(failures.is_empty(), "after the rollback: {failures:?}");
    let run = bed.run(audit);
    run.ok();
    let current = stages(bed)["AWSCURRENT"].as_str().unwrap().to_owned();
    assert!(run.json()["expected_source"].as_str().unwrap().contains(&current));
}

#[test]
fn a_failing_node_stops_promotion_and_abort_restores_the_old_set() {
    let (bed, old) = prepared();
    let old_set = set_of(&bed, &old);
    let failing = bed.state.nodes[1].instance_id.clone();
    bed.set_faults(json!({ "fail_instances": { failing: "disk full (injected)" } }));
    let (code, report, stderr) = rotate(&bed, &["--max-errors", "100%"]);
    assert_eq!(code, 3, "{stderr}\n{report}");
    assert_eq!(report["result"], "push_failed");
    let s = stages(&bed);
    assert_eq!(s["AWSCURRENT"], old.as_str(), "a failed push promoted the new set");
    let pending = s["AWSPENDING"].as_str().unwrap().to_owned();
    let new_set = set_of(&bed, &pending);
    assert_eq!(
        served(&bed.state.nodes[0]),
        old_set,
        "the healthy nodes keep serving the current set"
    );
    assert_eq!(
        next_keys(&bed.state.nodes[0]),
        new_set,
        "the healthy nodes loaded the new set"
    );

    bed.control("POST", "/_bed/faults/reset", &json!({}));
    let (code, report, stderr) = rotate(&bed, &["--abort"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["result"], "aborted");
    for n in &bed.state.nodes {
        assert_eq!(
            served(n),
            old_set,
            "{} does not serve the old set after --abort",
            n.name
        );
        assert_eq!(
            next_keys(n),
            [None, None, None],
            "{} still offers the dropped set",
            n.name
        );
    }
    let s = stages(&bed);
    assert!(s.get("AWSPENDING").is_none(), "AWSPENDING survived --abort: {s}");
    assert_eq!(s["AWSCURRENT"], old.as_str());
    let status = bed.cli("status").json().secret().run().json();
    assert_eq!(status["rotation_in_flight"], Value::Null);
    let (code, report, _) = rotate(&bed, &["--abort"]);
    assert_eq!((code, report["result"].as_str()), (0, Some("nothing_to_abort")));
    // Nothing in flight: --resume and --finish converge the nodes to
    // AWSCURRENT (what a run killed after its promotion leaves), and
    // promote nothing.
    for again in ["--resume", "--finish"] {
        let (code, report, stderr) = rotate(&bed, &[again]);
        assert_eq!(code, 0, "{again}: {stderr}");
        assert!(
            report["steps"]
                .to_string()
                .contains("no rotation in flight to promote; converging"),
            "{report}"
        );
        // Said on stderr as well: the text report lists no steps.
        assert!(
            stderr.contains("rotate: resume: no rotation in flight to promote"),
            "{stderr}"
        );
        assert_eq!(stages(&bed)["AWSCURRENT"], old.as_str());
    }
}

/// Three OpenSSH releases on both ends (issue 25): the nodes run this
/// host's 9.2, Debian 11's 8.4 and Debian 13's 10.0 (its PerSourcePenalties
/// on, so the balancer checks as an NLB does, every 10 s), and so do the
/// clients. During the overlap each client logs in to each node directly,
/// under the balancer's name (`HostKeyAlias`): every client learns the new
/// keys from every release's sshd, its own among them, through
/// `UpdateHostKeys`. After the promotion each logs in 20 times through the
/// balancer (every backend in turn) with `StrictHostKeyChecking=yes`: no
/// warning. A client that missed the overlap is warned once.
#[test]
fn an_overlapping_rotation_lets_update_host_keys_clients_learn_the_new_keys() {
    let (bed, init) = TestBed::converged(BedOptions::three_releases());
    let old = init["version_id"].as_str().unwrap().to_owned();
    let lb = bed.state.lb.clone().unwrap();
    assert_three_releases(&bed);
    let stale = bed.dir().join("known_hosts.stale");
    let lines = bed.cli("known-hosts").secret().args(&["--host", &lb.address]).run();
    lines.ok();
    std::fs::write(&stale, &lines.stdout).unwrap();
    // Each client, with a known_hosts of its own: this host's OpenSSH 9.2,
    // Debian 11's 8.4 and Debian 13's 10.0.
    let clients: [Option<&str>; 3] = [None, Some("bullseye"), Some("trixie")];
    let file_of = |client: Option<&str>| bed.dir().join(format!("known_hosts.{}", client.unwrap_or("host")));
    for client in clients {
        std::fs::write(file_of(client), &lines.stdout).unwrap();
    }
    let ssh_with = |client: Option<&str>, file: &std::path::Path, update: &str| {
        bed.ssh_lb_with(client, file, &[&format!("UpdateHostKeys={update}")])
    };
    let ssh = |file: &std::path::Path, update: &str| ssh_with(None, file, update);

    let (code, report, stderr) = rotate(&bed, &["--overlap"]);
    assert_eq!(code, 0, "{stderr}\n{report}");
    assert_eq!(report["result"], "overlap_started");
    let s = stages(&bed);
    assert_eq!(s["AWSCURRENT"], old.as_str(), "phase one must not promote");
    let new = s["AWSPENDING"].as_str().unwrap().to_owned();
    for n in &bed.state.nodes {
        assert_eq!(
            served(n),
            set_of(&bed, &old),
            "{} must keep serving the current set first",
            n.name
        );
    }

    // During the overlap: each client learns the new keys from each node.
    let alias = format!("HostKeyAlias={}", lb.address);
    for client in clients {
        let file = file_of(client);
        for node in &bed.state.nodes {
            let login = bed.ssh_with(client, &node.address, &file, &["UpdateHostKeys=yes", &alias]);
            assert!(
                login.status.success(),
                "{client:?} to {}: {}",
                node.name,
                String::from_utf8_lossy(&login.stderr)
            );
            let log = String::from_utf8_lossy(&login.stderr);
            assert!(!log.contains("WARNING"), "{client:?} to {}: {log}", node.name);
        }
        let learned = crate::common::support::run_ok(Command::new(require("ssh-keygen")).arg("-lf").arg(&file));
        for fp in set_of(&bed, &new).into_iter().flatten() {
            assert!(learned.contains(&fp), "{client:?} did not learn {fp}:\n{learned}");
        }
    }

    // The minimum overlap (24 h without a schedule): refused until then,
    // with nothing moved (exit 3), and promoted once a day passed.
    let before = stages(&bed);
    let (code, _, stderr) = rotate(&bed, &["--finish", "--min-overlap", "auto"]);
    assert_eq!(code, 3, "{stderr}");
    assert!(
        stderr.contains("clients are given 1d 0h") && stderr.contains("--min-overlap 0"),
        "{stderr}"
    );
    assert_eq!(stages(&bed), before, "a stage moved");
    bed.control("POST", "/_bed/clock", &json!({"hours": 25}));
    let (code, report, stderr) = rotate(&bed, &["--finish", "--min-overlap", "auto"]);
    assert_eq!(code, 0, "{stderr}\n{report}");
    assert_eq!(report["result"], "rotated");
    for n in &bed.state.nodes {
        assert_eq!(served(n), set_of(&bed, &new), "{}", n.name);
        let leftovers: Vec<_> = std::fs::read_dir(&n.ssh_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| f.starts_with("hostkeyctl_next_"))
            .collect();
        assert!(leftovers.is_empty(), "{}: {leftovers:?}", n.name);
    }
    for client in clients {
        let file = file_of(client);
        let failures: Vec<String> = (0..20)
            .map(|_| ssh_with(client, &file, "no"))
            .filter(|o| !o.status.success() || String::from_utf8_lossy(&o.stderr).contains("WARNING"))
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect();
        assert!(
            failures.is_empty(),
            "{client:?}, having learned the new keys, saw warnings: {failures:?}"
        );
    }
    // A client that did not log in during the overlap sees one warning.
    let out = ssh(&stale, "no");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("REMOTE HOST IDENTIFICATION HAS CHANGED"));
}

/// The three releases' sshd serve the nodes (this host's 9.2, Debian 11's
/// 8.4, Debian 13's 10.0), and their clients are those releases'.
fn assert_three_releases(bed: &TestBed) {
    for (node, version) in bed
        .state
        .nodes
        .iter()
        .zip(["OpenSSH_9.2", "OpenSSH_8.4", "OpenSSH_10.0"])
    {
        let banner = crate::common::support::banner(&node.address, node.port);
        assert!(banner.contains(version), "{} is {banner}, not {version}", node.name);
    }
    for (suite, version) in [("bullseye", "OpenSSH_8.4"), ("trixie", "OpenSSH_10.0")] {
        let out = bed.release_command(suite, "/usr/bin/ssh").arg("-V").output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.starts_with(version), "{suite}'s ssh is {said}");
    }
}

/// The fingerprints of a node's next-set key files (ed25519, ecdsa, rsa).
pub(crate) fn next_keys(node: &crate::common::bed::Node) -> Vec<Option<String>> {
    ["ed25519", "ecdsa", "rsa"]
        .iter()
        .map(|t| {
            let path = node.ssh_dir.join(format!("hostkeyctl_next_{t}_key.pub"));
            path.exists()
                .then(|| crate::common::support::ssh_keygen_fingerprint(&path))
        })
        .collect()
}

/// The plain install the nodes' timer runs (docs/bootstrap.md): no version,
/// so the node converges to what the stages say.
fn timer(bed: &TestBed) {
    for node in &bed.state.nodes {
        let run = bed.cli("install").on(node).secret().run();
        assert_eq!(run.code, 0, "timer install on {}: {}", node.name, run.stderr);
    }
}

/// Every node serves AWSCURRENT, and a client that knows AWSCURRENT's keys
/// logs in through the load balancer (to every node) without a warning.
fn assert_serves_current(bed: &TestBed, what: &str) {
    let s = stages(bed);
    let current = set_of(bed, s["AWSCURRENT"].as_str().unwrap());
    for n in &bed.state.nodes {
        assert_eq!(served(n), current, "{what}: {} is off the stages", n.name);
    }
    let lb = bed.state.lb.clone().unwrap();
    let lines = bed.cli("known-hosts").secret().args(&["--host", &lb.address]).run();
    let known_hosts = bed.dir().join("known_hosts.current");
    std::fs::write(&known_hosts, &lines.stdout).unwrap();
    for _ in 0..bed.state.nodes.len() {
        let out = bed.ssh_lb(&known_hosts, &["UpdateHostKeys=no"]);
        assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Issue 14: a fleet SSM cannot reach is rotated by moving the stages and
/// letting the nodes' timers install: announce, timers, a client learns the
/// new keys, promote (waiting for the timers), audit clean, and the client
/// connects 20 times with no warning.
#[test]
fn a_pull_only_fleet_is_rotated_end_to_end() {
    let bed = TestBed::start(BedOptions::default().no_ssm());
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    timer(&bed);
    assert_serves_current(&bed, "before");
    // Certificates (issue 27): a CA-only client beside the plain-key one.
    let ca_only = signed_with_a_ca(&bed, false);
    timer(&bed);

    let refused = bed.cli("push").secret().targets().run();
    assert_ne!(refused.code, 0, "SSM reached a pull-only node: {}", refused.stdout);

    let lb = bed.state.lb.clone().unwrap();
    let known_hosts = bed.dir().join("known_hosts");
    let lines = bed.cli("known-hosts").secret().args(&["--host", &lb.address]).run();
    std::fs::write(&known_hosts, &lines.stdout).unwrap();

    let (code, report, stderr) = rotate(&bed, &["--pull", "--overlap", "--ca-secret-id", "hostkeyctl-ca/ca"]);
    assert_eq!(code, 0, "{stderr}\n{report}");
    assert_eq!(report["result"], "announced");
    assert!(bed.commands().is_empty(), "a pull rotation sent SSM commands");
    timer(&bed);
    // A renewal during the overlap signs both sets (it was refused).
    let (old, new) = renew_during_the_overlap(&bed);
    timer(&bed);
    assert_serial_served(&bed, 3);
    assert_eq!(ca_refusals(&bed, &ca_only), 0, "CA-only client before the promotion");
    assert_serves_current(&bed, "announced, timers ran");
    let mut status = vec!["status", "--output", "json", "--secret-id", SECRET];
    status.extend(TARGETS);
    let phase = bed.run(&status).json();
    assert_eq!(phase["phase"]["state"], "announced", "{phase}");
    assert!(phase["phase"]["since"].is_string(), "{phase}");
    assert_eq!(phase["converged"]["serving_current"], 3, "{phase}");

    // One login during the overlap: the client learns the new keys.
    let login = bed.ssh_lb(&known_hosts, &["UpdateHostKeys=yes"]);
    assert!(login.status.success(), "{}", String::from_utf8_lossy(&login.stderr));
    let learned = crate::common::support::run_ok(Command::new(require("ssh-keygen")).arg("-lf").arg(&known_hosts));
    for fp in set_of(&bed, &new).into_iter().flatten() {
        assert!(learned.contains(&fp), "the client did not learn {fp}:\n{learned}");
    }

    // Promote, waiting for the timers (which run meanwhile) to converge.
    let mut args: Vec<String> = [
        "rotate",
        "--output",
        "json",
        "--secret-id",
        SECRET,
        "--pull",
        "--finish",
        "--min-overlap",
        "0",
        "--wait",
        "120",
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend(TARGETS.map(str::to_owned));
    let finishing = Command::new(assert_cmd::cargo::cargo_bin("hostkeyctl"))
        .args(&args)
        .envs(bed.aws_env(crate::common::bed::Role::Rotation))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    crate::common::bed::wait_until("the promotion", std::time::Duration::from_secs(60), || {
        stages(&bed)["AWSCURRENT"] == new.as_str()
    });
    timer(&bed);
    let out = finishing.wait_with_output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{report}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["result"], "rotated", "{report}");
    assert_eq!(report["previous_version"], old.as_str());

    let phase = bed.run(&status).json();
    assert_eq!(phase["phase"]["state"], "steady", "{phase}");
    assert_eq!(phase["phase"]["promoted_from"], old.as_str(), "{phase}");
    assert_eq!(phase["converged"]["nodes"], 3, "{phase}");
    assert_eq!(phase["converged"]["serving_current"], 3, "{phase}");
    let run = bed.cli("audit").secret().targets().args(&["--lb", &lb.address]).run();
    run.ok();
    let failures = (0..20)
        .filter(|_| !bed.ssh_lb(&known_hosts, &["UpdateHostKeys=no"]).status.success())
        .count();
    assert_eq!(failures, 0, "the client that learned the new keys saw warnings");
    assert_serial_served(&bed, 3);
    assert_eq!(ca_refusals(&bed, &ca_only), 0, "CA-only client after the promotion");
}

/// Every node's ed25519 certificate file (what sshd serves) has `serial`.
fn assert_serial_served(bed: &TestBed, serial: u64) {
    for node in &bed.state.nodes {
        let listing = crate::common::support::run_ok(
            Command::new(require("ssh-keygen"))
                .arg("-Lf")
                .arg(node.ssh_dir.join("ssh_host_ed25519_key-cert.pub")),
        );
        assert!(
            listing.contains(&format!("Serial: {serial}")),
            "{}: {listing}",
            node.name
        );
    }
}

/// `ca init` (a CA in KMS with `kms`) and `sign` for `login.test`; the
/// known_hosts of a client that trusts only the CA.
pub(crate) fn signed_with_a_ca(bed: &TestBed, kms: bool) -> std::path::PathBuf {
    let mut init = vec!["--ca-secret-id", "hostkeyctl-ca/ca"];
    if kms {
        init.push("--kms");
    }
    bed.cli("ca init").args(&init).run().ok();
    sign(bed);
    let line = bed
        .cli("known-hosts")
        .args(&["--ca-secret-id", "hostkeyctl-ca/ca", "--host", "*", "--cert-authority"])
        .run();
    line.ok();
    let file = bed.dir().join("known_hosts.ca");
    std::fs::write(&file, &line.stdout).unwrap();
    file
}

fn sign(bed: &TestBed) -> Value {
    bed.sign_hk(&["login.test"], &[])
}

/// `sign` while a set is announced: both are renewed, each under its own
/// stage. Returns the versions AWSCURRENT and AWSPENDING are now.
fn renew_during_the_overlap(bed: &TestBed) -> (String, String) {
    let announced = stages(bed)["AWSPENDING"].as_str().unwrap().to_owned();
    let announced_keys = set_of(bed, &announced);
    let renewed = sign(bed);
    let now = stages(bed);
    assert_eq!(renewed["version_id"], now["AWSCURRENT"], "{renewed}");
    assert_eq!(renewed["pending_version_id"], now["AWSPENDING"], "{renewed}");
    assert_ne!(
        now["AWSPENDING"],
        announced.as_str(),
        "the announced set was not renewed"
    );
    assert_eq!(
        set_of(bed, now["AWSPENDING"].as_str().unwrap()),
        announced_keys,
        "renewing changed the announced keys"
    );
    let serials: Vec<u64> = renewed["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .chain(renewed["pending_certificates"].as_array().unwrap())
        .map(|c| c["serial"].as_u64().unwrap())
        .collect();
    assert!(serials.len() == 6 && serials.iter().all(|s| *s == 3), "{renewed}");
    (
        now["AWSCURRENT"].as_str().unwrap().to_owned(),
        now["AWSPENDING"].as_str().unwrap().to_owned(),
    )
}

/// Of 20 logins through the load balancer by a client that trusts only
/// the CA (checking `login.test` as the principal), how many failed.
fn ca_refusals(bed: &TestBed, ca_only: &std::path::Path) -> usize {
    (0..20)
        .filter(|_| !bed.ssh_lb(ca_only, &["HostKeyAlias=login.test"]).status.success())
        .count()
}
