//! Issue 57: no message of any kind on connecting. A real OpenSSH 10.6
//! client (Debian testing's, scripts/build-releases.sh) warns on every
//! login through the balancer to nodes whose crypto policy leaves the
//! post-quantum key exchange out (RHEL 9's and Amazon Linux 2023's
//! DEFAULT); the audit reports it on each node from the KEXINIT it reads
//! anyway; install adds the exchange sshd holds; then 20 strict logins
//! print nothing. And every other message the audit finds, each planted
//! on a node of its own: DSA only, SHA-1 RSA only, a short RSA key, an
//! sshd with no post-quantum exchange at all (OpenSSH 8.4, whose upgrade
//! is named), and a balancer address serving another key (CheckHostIP).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::bed::{BedOptions, Node, Role, Run, SECRET, TARGETS, TestBed, change_ed25519_key_by_hand};
use crate::common::support::{key_part, require, run_ok};

/// What OpenSSH 10.1 and later print on a connection without a
/// post-quantum key exchange (`WarnWeakCrypto`).
const PQ_WARNING: &str = "connection is not using a post-quantum key exchange";

/// The client that warns: Debian testing's OpenSSH 10.6.
const NEWEST_CLIENT: &str = "forky";

/// `n` logins of the newest client through the balancer: how many
/// succeeded, and how many printed the post-quantum warning (or any
/// other WARNING).
fn logins(bed: &TestBed, known_hosts: &Path, options: &[&str], n: usize) -> (usize, usize, Vec<String>) {
    let (mut ok, mut warned, mut other) = (0, 0, Vec::new());
    for _ in 0..n {
        let out = bed.ssh_lb_with(Some(NEWEST_CLIENT), known_hosts, options);
        ok += usize::from(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        warned += usize::from(stderr.contains(PQ_WARNING));
        if !stderr.contains(PQ_WARNING) && (stderr.contains("WARNING") || stderr.contains("Warning")) {
            other.push(stderr);
        }
    }
    (ok, warned, other)
}

/// A known_hosts file with every node's own keys under the balancer's
/// address.
fn every_backend(bed: &TestBed) -> std::path::PathBuf {
    let lb = bed.state.lb.clone().unwrap();
    let mut lines = String::new();
    for node in &bed.state.nodes {
        for t in ["ed25519", "ecdsa", "rsa"] {
            let line = std::fs::read_to_string(node.ssh_dir.join(format!("ssh_host_{t}_key.pub"))).unwrap();
            lines.push_str(&format!("{} {}\n", lb.address, key_part(&line)));
        }
    }
    let file = bed.dir().join("known_hosts.every-backend");
    std::fs::write(&file, lines).unwrap();
    file
}

/// `push` of the set to every login node at once, as the admin: its
/// report, the command having succeeded.
fn push_all(bed: &TestBed) -> Run {
    let run = bed
        .cli("push")
        .secret()
        .targets()
        .json()
        .args(&["--max-concurrency", "100%"])
        .run();
    run.ok();
    run
}

/// The nodes' client messages by node name: their codes.
fn codes(report: &Value) -> Vec<(String, Vec<String>)> {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let codes = n["client_messages"]
                .as_array()
                .map(|m| m.iter().map(|m| m["code"].as_str().unwrap().to_owned()).collect())
                .unwrap_or_default();
            (n["name"].as_str().unwrap().to_owned(), codes)
        })
        .collect()
}

#[test]
fn a_crypto_policy_fleet_warns_current_clients_until_install_adds_the_post_quantum_exchange() {
    let bed = TestBed::start(BedOptions {
        crypto_policy: true,
        ..BedOptions::default()
    });
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    // Before: the audit finds the warning on every node and says install
    // fixes it.
    let audit = |args: &[&str]| bed.cli("audit").json().secret().args(args).run();
    let before = audit(&TARGETS).json();
    for node in before["nodes"].as_array().unwrap() {
        let m = &node["client_messages"][0];
        assert_eq!(m["code"], "no_post_quantum_kex", "{node}");
        assert_eq!(m["certain"], true, "{node}");
        assert!(m["fix"].as_str().unwrap().contains("hostkeyctl install adds it"), "{m}");
    }
    // Node 1 serves the set (it was adopted from it): the warning alone
    // makes drift's exit status for a current client, none for 10.0.
    let node1 = format!("{}:22", bed.state.nodes[0].address);
    let current = audit(&["--endpoint", &node1]);
    assert_eq!(current.code, 1, "{}\n{}", current.stderr, current.stdout);
    assert_eq!(current.json()["conclusion"], "client_warnings");
    let old_client = audit(&["--endpoint", &node1, "--client-version", "10.0"]);
    assert_eq!(old_client.code, 0, "{}\n{}", old_client.stderr, old_client.stdout);
    assert_eq!(old_client.json()["nodes"][0]["client_messages"][0]["certain"], false);
    // Each node still serves its own keys: the users know them all.
    let before_file = every_backend(&bed);
    let (ok, warned, _) = logins(&bed, &before_file, &[], 20);
    assert_eq!(
        (ok, warned),
        (20, 20),
        "the 10.6 client warns on every login before install"
    );

    // Install (push): each node reports the exchange added.
    let pushed = push_all(&bed);
    // Debian 12's 9.2 takes both names of sntrup761 (a backport): the
    // ones sshd accepts, in OpenSSH's order, then the policy's whole list.
    let mut added = Vec::new();
    for row in pushed.json()["results"].as_array().unwrap() {
        assert_eq!(row["kex"]["status"], "added", "{row}");
        added = row["kex"]["post_quantum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_str().unwrap().to_owned())
            .collect();
        assert!(added.iter().any(|k| k == "sntrup761x25519-sha512@openssh.com"), "{row}");
    }
    for node in &bed.state.nodes {
        let drop_in = std::fs::read_to_string(node.ssh_dir.join("sshd_config.d/00-hostkeyctl.conf")).unwrap();
        let policy =
            std::fs::read_to_string(node.root.join("etc/crypto-policies/back-ends/opensshserver.config")).unwrap();
        let policy_kex = policy.lines().find_map(|l| l.strip_prefix("KexAlgorithms ")).unwrap();
        // Nothing the policy allowed is taken away.
        let line = format!("KexAlgorithms {},{policy_kex}\n", added.join(","));
        assert!(drop_in.contains(&line), "{drop_in}");
    }
    // A second install changes nothing: the line is stable over itself.
    let again = push_all(&bed);
    for row in again.json()["results"].as_array().unwrap() {
        assert_eq!(row["result"], "unchanged", "{row}");
    }

    // After: a clean audit, and 20 strict logins that print nothing.
    let after = audit(&TARGETS);
    assert_eq!(after.code, 0, "{}\n{}", after.stderr, after.stdout);
    assert!(
        codes(&after.json()).iter().all(|(_, c)| c.is_empty()),
        "{}",
        after.stdout
    );
    let known_hosts = bed.dir().join("known_hosts.newest");
    let listed = bed.run(&[
        "known-hosts",
        "--secret-id",
        SECRET,
        "--host",
        &bed.state.lb.clone().unwrap().address,
    ]);
    listed.ok();
    std::fs::write(&known_hosts, &listed.stdout).unwrap();
    let (ok, warned, other) = logins(&bed, &known_hosts, &[], 20);
    assert_eq!((ok, warned), (20, 0), "{other:?}");
    assert!(other.is_empty(), "{other:?}");
}

/// Plants a drop-in on `node` (before every other setting: sshd keeps the
/// first value) and reloads its sshd.
fn plant(node: &Node, settings: &str) {
    std::fs::write(node.ssh_dir.join("sshd_config.d/00-aa-planted.conf"), settings).unwrap();
    let pid = std::fs::read_to_string(node.root.join("run/sshd.pid")).unwrap();
    run_ok(Command::new("kill").args(["-HUP", pid.trim()]));
    crate::common::bed::wait_until("the planted sshd answers", std::time::Duration::from_secs(10), || {
        std::net::TcpStream::connect((node.address.as_str(), node.port)).is_ok()
    });
}

/// A new host key of `kind` (and `bits`) at `path`.
fn keygen(path: &Path, kind: &str, bits: &str) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(path.with_extension("pub"));
    run_ok(
        Command::new(require("ssh-keygen"))
            .args(["-q", "-N", "", "-t", kind, "-b", bits, "-f"])
            .arg(path),
    );
}

/// `hostkeyctl audit ARGS` as the auditor, with `/etc/hosts` naming the
/// balancer `lb.hostkeyctl.test` at each of `addresses` (an NLB's DNS name
/// has one per zone), in a mount namespace of its own.
fn audit_with_hosts(bed: &TestBed, addresses: &[&str], args: &[&str]) -> Run {
    let hosts = bed.dir().join("hosts");
    let conf = bed.dir().join("host.conf");
    let lines: String = addresses.iter().map(|a| format!("{a} lb.hostkeyctl.test\n")).collect();
    std::fs::write(&hosts, format!("127.0.0.1 localhost\n{lines}")).unwrap();
    std::fs::write(&conf, "multi on\n").unwrap();
    let binary = assert_cmd::cargo::cargo_bin("hostkeyctl");
    let script = format!(
        "mount --bind {} /etc/hosts && mount --bind {} /etc/host.conf && exec \"$0\" \"$@\"",
        hosts.display(),
        conf.display()
    );
    let out = Command::new(require("unshare"))
        .args(["--mount", "--propagation", "private", "--", "sh", "-c", &script])
        .arg(binary)
        .arg("audit")
        .args(args)
        .env_remove("HOSTKEYCTL_OUTPUT")
        .env_remove("AWS_PROFILE")
        .env("HOSTKEYCTL_PACING_DIR", "")
        .envs(bed.aws_env(Role::Auditor))
        .output()
        .unwrap();
    Run::from(out)
}

#[test]
fn every_other_message_is_found_on_the_node_that_causes_it() {
    let bed = TestBed::start(BedOptions {
        nodes: 4,
        release: Some(",,,bullseye"),
        ..BedOptions::default()
    });
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    let pushed = push_all(&bed);
    // OpenSSH 8.4 holds no post-quantum exchange: install says which
    // release brings one (its own sshd answers, in its own root).
    let nodes = &bed.state.nodes;
    for row in pushed.json()["results"].as_array().unwrap() {
        let old = row["instance_id"] == nodes[3].instance_id.as_str();
        let want = if old { "unsupported" } else { "offered" };
        assert_eq!(row["kex"]["status"], want, "{row}");
        if old {
            assert!(row["kex"]["upgrade"].as_str().unwrap().contains("Debian 12"), "{row}");
        }
    }
    // Node 1 offers only DSA, node 2 only SHA-1 RSA signatures, node 3 a
    // 1024-bit RSA key and an ed25519 key of its own.
    let dsa = nodes[0].ssh_dir.join("ssh_host_dsa_key");
    keygen(&dsa, "dsa", "1024");
    plant(
        &nodes[0],
        &format!("HostKey {}\nHostKeyAlgorithms ssh-dss\n", dsa.display()),
    );
    plant(&nodes[1], "HostKeyAlgorithms ssh-rsa\n");
    keygen(&nodes[2].ssh_dir.join("ssh_host_rsa_key"), "rsa", "1024");
    change_ed25519_key_by_hand(&nodes[2]);
    plant(&nodes[2], "");
    // The balancer's name resolves to its address and node 3's, as an
    // NLB's would to one address per zone.
    let lb = bed.state.lb.clone().unwrap();
    let mut args = vec![
        "--secret-id",
        SECRET,
        "--output",
        "json",
        "--lb",
        "lb.hostkeyctl.test:22",
    ];
    args.extend(TARGETS);
    let run = audit_with_hosts(&bed, &[&lb.address, &nodes[2].address], &args);
    assert_eq!(run.code, 1, "{}\n{}", run.stderr, run.stdout);
    let report = run.json();
    let found = codes(&report);
    let of = |node: &Node| found.iter().find(|(n, _)| *n == node.name).unwrap().1.clone();
    assert_eq!(of(&nodes[0]), ["dsa_only"], "{report}");
    assert_eq!(of(&nodes[1]), ["sha1_only"], "{report}");
    assert_eq!(of(&nodes[2]), ["small_rsa"], "{report}");
    assert_eq!(of(&nodes[3]), ["no_post_quantum_kex"], "{report}");
    let old = crate::common::support::row(&report["nodes"], "name", nodes[3].name.as_str());
    assert!(
        old["client_messages"][0]["fix"].as_str().unwrap().contains("Debian 12"),
        "{old}"
    );
    // A 1024-bit key is refused only by clients that require 2048 bits.
    let small = crate::common::support::row(&report["nodes"], "name", nodes[2].name.as_str());
    assert_eq!(small["client_messages"][0]["certain"], false, "{small}");
    // Each of the balancer's addresses was asked once; node 3's serves
    // another key: drift, and CheckHostIP's message.
    let addresses = report["lb"]["addresses"].as_array().unwrap();
    assert_eq!(addresses.len(), 2, "{}", report["lb"]);
    let third = addresses
        .iter()
        .find(|a| a["address"] == nodes[2].address.as_str())
        .unwrap();
    assert_eq!(third["status"], "MISMATCH", "{third}");
    let lb_codes: Vec<&str> = report["lb"]["client_messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["code"].as_str().unwrap())
        .collect();
    assert!(lb_codes.contains(&"check_host_ip"), "{}", report["lb"]);
}
