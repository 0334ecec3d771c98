//! `hostkeyctl known-hosts` against OpenSSH itself: real ssh through the
//! load balancer, `ssh-keygen -F` on hashed lines, `ssh-keygen -r` SSHFP.

use std::collections::BTreeSet;
use std::process::Command;

use crate::common::bed::{BedOptions, TestBed};
use crate::common::support::{require, run_ok};

fn pushed() -> TestBed {
    TestBed::converged(BedOptions::default()).0
}

#[test]
fn real_ssh_trusts_the_lb_with_plain_and_hashed_files() {
    let bed = pushed();
    let lb = bed.state.lb.clone().unwrap();
    for hash in [false, true] {
        let mut args = vec!["known-hosts", "--secret-id", "hostkeys/hk", "--host", &lb.address];
        if hash {
            args.push("--hash");
        }
        let run = bed.run(&args);
        run.ok();
        assert_eq!(run.stdout.lines().count(), 3, "{}", run.stdout);
        let file = bed.dir().join(if hash { "known_hosts.hashed" } else { "known_hosts" });
        std::fs::write(&file, &run.stdout).unwrap();
        let failures: Vec<String> = (0..20)
            .map(|_| bed.ssh_lb(&file, &[]))
            .filter(|o| !o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect();
        assert!(
            failures.is_empty(),
            "hash={hash}: {} of 20 failed: {failures:?}",
            failures.len()
        );
        if hash {
            assert!(
                !run.stdout.contains(&lb.address),
                "the host name is visible in a hashed file"
            );
            let found = run_ok(
                Command::new(require("ssh-keygen"))
                    .args(["-F", &lb.address, "-f"])
                    .arg(&file),
            );
            assert_eq!(found.lines().filter(|l| !l.starts_with('#')).count(), 3, "{found}");
        }
    }
}

#[test]
fn sshfp_records_match_ssh_keygen_r() {
    let bed = TestBed::start(BedOptions {
        nodes: 1,
        ..BedOptions::default()
    });
    bed.init_from_node("hostkeys/hk", &bed.state.nodes[0]);
    let run = bed.run(&[
        "known-hosts",
        "--secret-id",
        "hostkeys/hk",
        "--host",
        "login.example.org",
        "--sshfp",
    ]);
    run.ok();
    let ours: BTreeSet<String> = run.stdout.lines().map(str::to_owned).collect();
    let mut theirs = BTreeSet::new();
    for t in ["ed25519", "ecdsa", "rsa"] {
        let pub_file = bed.state.nodes[0].ssh_dir.join(format!("ssh_host_{t}_key.pub"));
        let out = run_ok(
            Command::new(require("ssh-keygen"))
                .args(["-r", "login.example.org", "-f"])
                .arg(&pub_file),
        );
        theirs.extend(out.lines().map(str::to_owned));
    }
    assert_eq!(ours, theirs);
}

#[test]
fn a_non_default_port_uses_bracketed_patterns() {
    let bed = TestBed::start(BedOptions {
        nodes: 1,
        ..BedOptions::default()
    });
    bed.init_generated("hostkeys/hk");
    let run = bed.run(&[
        "known-hosts",
        "--secret-id",
        "hostkeys/hk",
        "--host",
        "a.example,b.example",
        "--port",
        "2222",
    ]);
    run.ok();
    for line in run.stdout.lines() {
        assert!(line.starts_with("[a.example]:2222,[b.example]:2222 "), "{line}");
    }
    let bad = bed.run(&["known-hosts", "--secret-id", "hostkeys/hk", "--host", "a b"]);
    bad.code(2);
}
