//! `hostkeyctl audit` on the test bed: real sshd nodes and HAProxy.

use std::process::Command;

use serde_json::Value;

use crate::common::bed::{BedOptions, SECRET, TARGETS, TestBed, connections, keyscan};
use crate::common::support::require;

fn audit(bed: &TestBed, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["audit", "--output", "json"];
    args.extend_from_slice(extra);
    let run = bed.run(&args);
    assert!(run.code >= 0 && run.code <= 4, "{}", run.stderr);
    (run.code, run.json())
}

fn node<'a>(report: &'a Value, name: &str) -> &'a Value {
    crate::common::support::row(&report["nodes"], "name", name)
}

fn statuses(node: &Value) -> Vec<(String, String)> {
    crate::common::support::pairs(&node["findings"], "key_type", "status")
}

fn lb_distinct(report: &Value, key_type: &str) -> usize {
    crate::common::support::row(&report["lb"]["types"], "key_type", key_type)["seen"]
        .as_array()
        .unwrap()
        .len()
}

const MANAGED: [&str; 3] = ["ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"];

#[test]
fn mismatches_before_push_and_one_key_per_type_after() {
    let bed = TestBed::start(BedOptions::default());
    let lb = bed.state.lb.clone().unwrap();
    let lb_arg = format!("{}:{}", lb.address, lb.port);
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    let mut args = vec!["--secret-id", SECRET, "--lb", &lb_arg, "--samples", "9"];
    args.extend(TARGETS);

    let (code, report) = audit(&bed, &args);
    assert_eq!(code, 1, "{report}");
    assert!(statuses(node(&report, "hp-login-1")).iter().all(|(_, s)| s == "OK"));
    for name in ["hp-login-2", "hp-login-3"] {
        let s = statuses(node(&report, name));
        assert_eq!(s.len(), 3, "{s:?}");
        assert!(s.iter().all(|(_, v)| v == "MISMATCH"), "{name}: {s:?}");
    }
    for t in MANAGED {
        assert_eq!(lb_distinct(&report, t), 3, "{t} through the LB: {report}");
    }
    assert_eq!(report["lb"]["backends"], 3);
    assert!(
        report["expected_source"].as_str().unwrap().starts_with("tags of"),
        "{report}"
    );

    bed.cli("push --max-concurrency 100%").secret().targets().run().ok();
    let (code, report) = audit(&bed, &args);
    assert_eq!(code, 0, "{report}");
    for t in MANAGED {
        assert_eq!(lb_distinct(&report, t), 1, "{t} through the LB: {report}");
    }
    assert_eq!(
        report["summary"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["OK"]
    );
}

#[test]
fn reported_fingerprints_equal_what_ssh_keyscan_sees_in_three_connections() {
    let bed = TestBed::start(BedOptions::default());
    bed.init_generated(SECRET);
    let mut args = vec!["--secret-id", SECRET];
    args.extend(TARGETS);
    // The bed's own check that each sshd is up is one connection, logged
    // by the child sshd starts for it, maybe after the bed said ready (the
    // load balancer's come from its own address, not counted here).
    for n in &bed.state.nodes {
        crate::common::bed::wait_until(
            &format!("sshd on {} to log the bed's connection", n.name),
            std::time::Duration::from_secs(10),
            || connections(n) >= 1,
        );
    }
    let before: Vec<usize> = bed.state.nodes.iter().map(connections).collect();
    let (_, report) = audit(&bed, &args);
    // Three keys, three connections (sshd signs with one host key per
    // connection before authentication; its first KEXINIT says which types
    // to ask for, where all five were asked), and a retry only after a
    // drop or a timeout. sshd logs a connection in the child it starts for
    // it, so its count may lag the audit's a moment.
    for (n, b) in bed.state.nodes.iter().zip(&before) {
        let ours = node(&report, &n.name);
        let (opened, retries) = (
            ours["connections"].as_u64().unwrap() as usize,
            ours["retries"].as_u64().unwrap() as usize,
        );
        assert_eq!(opened - retries, 3, "{}: {ours}", n.name);
        crate::common::bed::wait_until(
            &format!(
                "sshd on {} to log the audit's {opened} connections (has {})",
                n.name,
                connections(n) - b
            ),
            std::time::Duration::from_secs(10),
            || connections(n) - b == opened,
        );
    }
    for n in &bed.state.nodes {
        let findings = node(&report, &n.name)["findings"].as_array().unwrap().clone();
        for (short, key_type) in [
            ("ed25519", "ssh-ed25519"),
            ("ecdsa", "ecdsa-sha2-nistp256"),
            ("rsa", "ssh-rsa"),
        ] {
            let ours = findings.iter().find(|f| f["key_type"] == key_type).unwrap()["served"]
                .as_str()
                .unwrap()
                .to_owned();
            assert_eq!(Some(ours), keyscan(&n.address, n.port, short), "{} {key_type}", n.name);
        }
    }
    // What ssh-keyscan printed for node 1 (its comment lines too), and
    // its fingerprints, are each an expected set: node 1 matches, the
    // others (with keys of their own) do not.
    let n1 = &bed.state.nodes[0];
    let scan = Command::new(require("ssh-keyscan"))
        .args(["-t", "rsa,ecdsa,ed25519", &n1.address])
        .output()
        .unwrap();
    let known_hosts = bed.dir().join("known_hosts");
    std::fs::write(&known_hosts, &scan.stdout).unwrap();
    let fps: Vec<String> = ["ed25519", "ecdsa", "rsa"]
        .iter()
        .map(|t| keyscan(&n1.address, n1.port, t).unwrap())
        .collect();
    let mut expect = vec![];
    for fp in &fps {
        expect.extend(["--expect", fp.as_str()]);
    }
    let endpoints: Vec<String> = bed
        .state
        .nodes
        .iter()
        .map(|n| format!("{}:{}", n.address, n.port))
        .collect();
    for source in [vec!["--known-hosts", known_hosts.to_str().unwrap()], expect] {
        let mut args = source.clone();
        for e in &endpoints {
            args.extend(["--endpoint", e.as_str()]);
        }
        let (code, report) = audit(&bed, &args);
        assert_eq!(code, 1, "{source:?}: {report}");
        let first = statuses(&report["nodes"][0]);
        assert!(
            first.len() == 3 && first.iter().all(|(_, s)| s == "OK"),
            "{source:?}: {first:?}"
        );
        let second = statuses(&report["nodes"][1]);
        assert!(second.iter().any(|(_, s)| s == "MISMATCH"), "{source:?}: {second:?}");
    }
}

#[test]
fn unmanaged_types_and_stopped_nodes_are_reported() {
    let (bed, _) = TestBed::converged(BedOptions::default());
    let mut args = vec!["--secret-id", SECRET];
    args.extend(TARGETS);

    // A stopped sshd: UNREACHABLE, exit 3.
    bed.stop_node("hp-login-3");
    let (code, report) = audit(&bed, &args);
    assert_eq!(code, 3, "{report}");
    let down = &node(&report, "hp-login-3")["findings"][0];
    assert_eq!(down["status"], "UNREACHABLE");
    assert_eq!(down["detail"], "connection refused");
    bed.start_node("hp-login-3");

    // An extra host key type outside the set, served by an sshd whose
    // HostKeyAlgorithms pin was removed: UNMANAGED, exit 1.
    let n = &bed.state.nodes[1];
    let extra = n.ssh_dir.join("ssh_host_ecdsa384_key");
    assert!(
        Command::new(require("ssh-keygen"))
            .args(["-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f"])
            .arg(&extra)
            .status()
            .unwrap()
            .success()
    );
    std::fs::remove_file(n.ssh_dir.join("sshd_config.d/00-hostkeyctl.conf")).unwrap();
    let config = std::fs::read_to_string(&n.sshd_config).unwrap();
    std::fs::write(&n.sshd_config, format!("{config}HostKey {}\n", extra.display())).unwrap();
    bed.start_node(&n.name);
    let (code, report) = audit(&bed, &args);
    assert_eq!(code, 1, "{report}");
    let s = statuses(node(&report, &n.name));
    assert!(
        s.contains(&("ecdsa-sha2-nistp384".to_owned(), "UNMANAGED".to_owned())),
        "{s:?}"
    );
    assert!(s.contains(&("ssh-ed25519".to_owned(), "OK".to_owned())), "{s:?}");
}

#[test]
fn many_probes_of_one_node_never_report_it_unreachable() {
    let bed = TestBed::start(BedOptions::nodes(1));
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    let endpoint = format!("{}:22", bed.state.nodes[0].address);
    let mut args = vec!["--secret-id", SECRET, "--concurrency", "64"];
    for _ in 0..40 {
        args.extend(["--endpoint", endpoint.as_str()]);
    }
    let (code, report) = audit(&bed, &args);
    assert_eq!(code, 0, "{}", report["summary"]);
    assert_eq!(report["nodes"].as_array().unwrap().len(), 40);
    assert_eq!(report["summary"]["OK"], 120, "{}", report["summary"]);
}

#[test]
fn via_ssm_sees_keys_written_but_not_served() {
    let (bed, _) = TestBed::converged(BedOptions::default().no_reexec());
    // Someone regenerated node 2's ed25519 key on disk without reloading
    // sshd (started with -r): clients still see the right key.
    let n = &bed.state.nodes[1];
    crate::common::bed::change_ed25519_key_by_hand(n);

    let mut args = vec!["--secret-id", SECRET];
    args.extend(TARGETS);
    let (code, _) = audit(&bed, &args);
    assert_eq!(code, 0, "what is served is still right");
    args.push("--via-ssm");
    let (code, report) = audit(&bed, &args);
    assert_eq!(code, 1, "{report}");
    let on_disk = report["on_disk"].as_object().unwrap();
    assert_eq!(on_disk.len(), 3);
    assert_eq!(on_disk[&n.instance_id]["result"], "drift", "{report}");
    for other in [&bed.state.nodes[0], &bed.state.nodes[2]] {
        assert_eq!(on_disk[&other.instance_id]["result"], "match", "{report}");
    }
}

/// Regression (hardening finding 1): `audit --via-ssm` put the fingerprints
/// from the secret's tags on the nodes' shell line unquoted, so anyone who
/// could tag the secret ran commands as root on every node. A tag value is
/// now parsed as a fingerprint before anything is sent; this one is refused
/// with exit 2 naming the tag, and no node runs anything.
#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_fingerprint_tag_never_reaches_a_nodes_shell() {
    let bed = TestBed::start(BedOptions::default());
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    let marker = bed.dir().join("pwned-by-a-tag");
    let sm = aws_sdk_secretsmanager::Client::new(&bed.sdk_config(1).await);
    let tag = aws_sdk_secretsmanager::types::Tag::builder()
        .key("hostkeyctl:fp:ssh-ed25519")
        .value(format!("$(touch {})", marker.display()))
        .build();
    sm.tag_resource().secret_id(SECRET).tags(tag).send().await.unwrap();

    let run = bed.cli("audit").json().secret().targets().args(&["--via-ssm"]).run();
    run.code(2);
    assert!(
        run.stderr.contains("tag hostkeyctl:fp:ssh-ed25519") && run.stderr.contains("is not a SHA256 fingerprint"),
        "{}",
        run.stderr
    );
    assert!(bed.commands().is_empty(), "something was sent: {:?}", bed.commands());
    assert!(!marker.exists(), "a node ran the tag's command");
}

/// Regression (seams): a bare IPv6 address was split at its last colon
/// (`::1` became host `:` and port 1). `--endpoint [::1]:22` and
/// `--endpoint ::1` must both reach a real sshd on ::1 port 22.
#[test]
fn ipv6_endpoints_with_and_without_brackets_reach_port_22() {
    crate::common::support::ensure_privsep_dir();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("ssh_host_ed25519_key");
    crate::common::support::run_ok(
        Command::new(require("ssh-keygen"))
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key),
    );
    let fp = crate::common::support::ssh_keygen_fingerprint(&dir.path().join("ssh_host_ed25519_key.pub"));
    let config = dir.path().join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "ListenAddress [::1]:22\nHostKey {}\nPidFile {}/sshd.pid\nUsePAM no\n",
            key.display(),
            dir.path().display()
        ),
    )
    .unwrap();
    let mut sshd = Command::new(require("sshd"))
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .spawn()
        .unwrap();
    crate::common::bed::wait_until("sshd on [::1]:22", std::time::Duration::from_secs(10), || {
        std::net::TcpStream::connect("[::1]:22").is_ok()
    });
    for endpoint in ["[::1]:22", "::1"] {
        let out = crate::common::support::hostkeyctl()
            .args([
                "audit",
                "--output",
                "json",
                "--key-types",
                "ssh-ed25519",
                "--expect",
                &fp,
                "--endpoint",
                endpoint,
            ])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let node = &report["nodes"][0];
        assert_eq!(
            (node["host"].as_str(), node["port"].as_u64()),
            (Some("::1"), Some(22)),
            "{endpoint}: {report}"
        );
        assert_eq!(
            statuses(node),
            [("ssh-ed25519".to_owned(), "OK".to_owned())],
            "{endpoint}: {report}"
        );
        assert_eq!(out.status.code(), Some(0), "{endpoint}: {report}");
    }
    let _ = sshd.kill();
    let _ = sshd.wait();
}

/// Issue 25, on three real OpenSSH 10.0 nodes (Debian 13's sshd, stock
/// PerSourcePenalties) behind HAProxy, which connects from its own
/// address as an NLB whose IP targets do not preserve the client's, with
/// health checks every 10 s as an NLB's: `audit --lb` with 30 samples of
/// three types is 30 connections per backend from one address, twice the
/// threshold, which unpaced left every backend refusing the balancer for
/// everyone. Paced by the backends, no sshd logs a penalty, the audit said
/// what the pacing would cost, and real logins through the balancer right
/// after reach every backend.
#[test]
fn an_lb_audit_of_openssh_10_nodes_is_paced_and_locks_nobody_out() {
    let bed = TestBed::start(BedOptions {
        release: Some("trixie"),
        lb_check_interval: "10",
        ..BedOptions::default()
    });
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    let run = bed
        .cli("audit")
        .json()
        .secret()
        .args(&["--lb", "lb:hp-login", "--samples", "30"])
        .run();
    assert_eq!(run.code, 1, "the nodes' keys differ: {}\n{}", run.stderr, run.stdout);
    let report = run.json();
    assert_eq!(report["lb"]["backends"], 3, "{report}");
    assert_eq!(report["lb"]["connections"], 90, "{}", report["lb"]);
    assert!(
        run.stderr.contains("OpenSSH_10.0") && run.stderr.contains("paced at 3/s"),
        "{}",
        run.stderr
    );
    for node in &bed.state.nodes {
        let log = std::fs::read_to_string(node.root.join("sshd.log")).unwrap();
        // At LogLevel VERBOSE sshd notes each connection's deferred
        // penalty; a penalty that takes effect is "activating", and a
        // refused connection "drop connection".
        assert!(log.contains("deferred penalty"), "not a penalizing sshd: {log}");
        assert!(
            !log.contains("activating") && !log.contains("drop connection"),
            "{}: {log}",
            node.name
        );
    }
    // Real logins through the balancer, right after: every backend lets
    // the balancer's address in.
    let lb = bed.state.lb.clone().unwrap();
    let mut known_hosts = String::new();
    for node in &bed.state.nodes {
        for t in ["ed25519", "ecdsa", "rsa"] {
            let line = std::fs::read_to_string(node.ssh_dir.join(format!("ssh_host_{t}_key.pub"))).unwrap();
            known_hosts.push_str(&format!("{} {}\n", lb.address, crate::common::support::key_part(&line)));
        }
    }
    let file = bed.dir().join("known_hosts.every-backend");
    std::fs::write(&file, known_hosts).unwrap();
    for i in 0..6 {
        let out = bed.ssh_lb(&file, &[]);
        assert!(
            out.status.success(),
            "login {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for node in &bed.state.nodes {
        let log = std::fs::read_to_string(node.root.join("sshd.log")).unwrap();
        assert!(
            log.contains("Accepted publickey for root"),
            "{} was not reached: {log}",
            node.name
        );
        assert!(!log.contains("drop connection"), "{}: {log}", node.name);
    }
}

/// Issue 27: HAProxy `balance source` pins this host to one backend, as
/// NLB flow hashing and source affinity do. The set is that backend's;
/// the other two serve keys of their own. Audited through the balancer
/// alone it said OK (exit 0), every sample reaching the one good backend;
/// now it is incomplete (exit 3), says how many distinct keys it saw and
/// names `--lb lb:NAME`, which audits the backends directly and finds the
/// two that differ (exit 1).
#[test]
fn a_balancer_that_pins_clients_cannot_make_an_audit_ok() {
    let bed = TestBed::start(BedOptions {
        lb_balance: "source",
        ..BedOptions::default()
    });
    let lb = bed.state.lb.clone().unwrap();
    let seen = keyscan(&lb.address, lb.port, "ed25519").expect("the balancer answers");
    let pinned = bed
        .state
        .nodes
        .iter()
        .find(|n| keyscan(&n.address, n.port, "ed25519").as_deref() == Some(seen.as_str()))
        .expect("the balancer reaches a node")
        .clone();
    bed.init_from_node(SECRET, &pinned);
    let alone = bed
        .cli("audit")
        .json()
        .secret()
        .args(&["--lb", &format!("{}:{}", lb.address, lb.port), "--samples", "12"])
        .run();
    let report = alone.json();
    assert_eq!(alone.code, 3, "{}\n{report}", alone.stderr);
    assert_eq!(report["conclusion"], "incomplete", "{report}");
    assert_eq!(report["lb"]["distinct"], 1, "{report}");
    assert_eq!(report["lb"]["alone"], true, "{report}");
    assert!(alone.stderr.contains("--lb lb:NAME"), "{}", alone.stderr);
    let named = bed.cli("audit").json().secret().args(&["--lb", "lb:hp-login"]).run();
    let report = named.json();
    assert_eq!(named.code, 1, "{}\n{report}", named.stderr);
    assert_eq!(report["nodes"].as_array().unwrap().len(), 3, "{report}");
}
