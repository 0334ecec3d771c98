//! The metadata service kept to root on a login node, on a real netfilter:
//! the node build's `imds-guard` runs as the boot unit runs it, with
//! iptables reaching a network namespace this test creates
//! ([`NodeNetfilter`]), where a stand-in metadata service answers. A login
//! user (uid 65534) must get nothing; root must; an allowed user
//! (`--allow-user`) and the opt-out (`--open`) get through; a firewall rule
//! put above the guard makes `--check` say open, and the next run puts the
//! guard first again.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::bed::netfilter::NodeNetfilter;
use crate::common::support::node_binary;

const ANSWER: &str = "i-0123456789abcdef0";

/// Runs `program args` as root on the node: the stand-ins first on PATH.
fn on_node(bin: &Path, program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .env("PATH", format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.display()))
        .output()
        .unwrap()
}

fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_login_user_gets_nothing_from_the_metadata_service_and_the_opt_out_restores_it() {
    let bin = tempfile::tempdir().unwrap();
    let node = NodeNetfilter::new(bin.path());
    let (hk, iptables) = (node_binary(), bin.path().join("iptables"));
    let guard = |args: &[&str]| {
        on_node(
            bin.path(),
            &hk,
            &[&["imds-guard", "--output", "json"][..], args].concat(),
        )
    };
    let jumps = || {
        ok(on_node(bin.path(), &iptables, &["-S", "OUTPUT"]))
            .lines()
            .filter(|l| l.contains("HOSTKEYCTL-IMDS"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(node.metadata_as(65534), ANSWER, "open before");

    ok(guard(&[]));
    ok(guard(&[]));
    let checked: serde_json::Value = serde_json::from_str(&ok(guard(&["--check"]))).unwrap();
    assert_eq!(checked[0]["state"], "root_only", "{checked}");
    assert_eq!(checked[0]["destination"], "169.254.169.254/32");
    assert_eq!(checked[1]["state"], "root_only", "the IPv6 endpoint too: {checked}");
    assert_eq!(jumps().len(), 1, "a second run added nothing");
    assert_eq!(node.metadata_as(0), ANSWER);
    assert!(node.metadata_as(65534).starts_with("refused:"));

    ok(guard(&["--allow-user", "65534"]));
    assert_eq!(node.metadata_as(65534), ANSWER, "an allowed user");
    assert!(node.metadata_as(1).starts_with("refused:"), "another user");

    ok(on_node(bin.path(), &iptables, &["-I", "OUTPUT", "1", "-j", "ACCEPT"]));
    assert_eq!(
        guard(&["--check"]).status.code(),
        Some(1),
        "a rule above the guard is open"
    );
    ok(guard(&[]));
    let first = ok(on_node(bin.path(), &iptables, &["-S", "OUTPUT"]));
    let first = first.lines().find(|l| l.starts_with("-A OUTPUT")).unwrap();
    assert!(first.ends_with("-j HOSTKEYCTL-IMDS"), "{first}");
    assert_eq!(jumps().len(), 1, "the old jump went in the same transaction");
    assert!(node.metadata_as(65534).starts_with("refused:"));

    ok(guard(&["--open"]));
    assert_eq!(guard(&["--check"]).status.code(), Some(1));
    assert_eq!(node.metadata_as(65534), ANSWER, "the opt-out restores it");
    assert!(jumps().is_empty(), "--open leaves no jump");
}
