//! A profile node that already serves a host certificate (issue 17): install
//! refuses it, keeps it or replaces it, as the admin chooses.

use std::path::Path;

use crate::common::bed::{Node, SECRET, TestBed};
use crate::common::support::require;

use super::profiles::{files, in_node, install, profile_bed};

/// A node serving a host certificate is refused with exit 2, naming the
/// HostCertificate line, and nothing is touched: a client that trusts only
/// the CA still logs in.
#[test]
fn host_certificate_is_refused_kept_or_replaced_as_the_admin_chooses() {
    let bed = profile_bed("host-certificate");
    let node = bed.state.profiles[0].clone();
    let before = files(&node);
    bed.init_generated(SECRET);
    let theirs = node.ssh_dir.join("ssh_host_ed25519_key-cert.pub");
    let their_cert = std::fs::read_to_string(&theirs).unwrap();
    // No choice made, or keep for keys that are being replaced: nothing written.
    for extra in [&[][..], &["--existing-certificates", "keep"][..]] {
        let mut args = vec!["--secret-id", SECRET];
        args.extend_from_slice(extra);
        let run = install(&bed, &node, &args);
        run.code(2);
        assert_eq!(run.json()["result"], "refused");
        assert!(
            run.stderr.contains("/etc/ssh/ssh_host_ed25519_key-cert.pub"),
            "{}",
            run.stderr
        );
        assert_eq!(files(&node), before, "a refused install wrote");
    }
    let connect = |ca: &str| {
        let known_hosts = bed.dir().join("known_hosts.ca");
        std::fs::write(&known_hosts, format!("@cert-authority login.example {ca}")).unwrap();
        in_node(&bed, &node, &require("ssh"))
            .arg("-i")
            .arg(&bed.state.client_key)
            .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"])
            .args(["-o", "HostKeyAlias=login.example"])
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .arg(format!("root@{}", node.address))
            .arg("true")
            .output()
            .unwrap()
    };
    let their_ca = std::fs::read_to_string(node.root.join("host_ca.pub")).unwrap();
    // Keep: the node's own keys adopted, its certificate stays served.
    bed.init_from_node("hostkeys/adopted", &node);
    let run = install(
        &bed,
        &node,
        &["--secret-id", "hostkeys/adopted", "--existing-certificates", "keep"],
    );
    run.ok();
    let out = connect(&their_ca);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Replace: our set, signed by our CA, goes into their certificate file.
    let ca = bed
        .cli("ca init")
        .json()
        .args(&["--ca-secret-id", "hostkeyctl-ca/ca"])
        .run();
    ca.ok();
    let ours = ca.json()["public_key"].as_str().unwrap().to_owned();
    let sign = bed
        .cli("sign")
        .secret()
        .args(&["--ca-secret-id", "hostkeyctl-ca/ca", "--principal", "login.example"])
        .run();
    sign.ok();
    let run = install(
        &bed,
        &node,
        &["--secret-id", SECRET, "--existing-certificates", "replace"],
    );
    run.ok();
    let out = connect(&ours);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!connect(&their_ca).status.success(), "their CA still trusted");
    // Later runs (push, the timer) need no choice: the file holds the set's
    // certificate from the set's CA.
    let run = install(&bed, &node, &["--secret-id", SECRET]);
    run.ok();
    assert_eq!(run.json()["result"], "unchanged", "{}", run.stdout);
    let cert = std::fs::read_to_string(&theirs).unwrap();
    assert_ne!(cert, their_cert, "their certificate file was not replaced");
    assert!(cert.starts_with("ssh-ed25519-cert-v01@openssh.com "), "{cert}");
    // The node's own certificate from the same CA, for its own name (issue
    // 27: refuse overwrote it, and a client using that name was refused).
    own_certificate_from_the_sets_ca(&bed, &node, &theirs);
    let before = files(&node);
    let run = install(&bed, &node, &["--secret-id", SECRET]);
    run.code(2);
    assert!(
        run.stderr.contains("/etc/ssh/ssh_host_ed25519_key-cert.pub"),
        "{}",
        run.stderr
    );
    assert_eq!(files(&node), before, "refuse overwrote the node's own certificate");
}

/// Signs `node`'s ed25519 key (the set's, installed) with the set's CA
/// (`hostkeyctl-ca/ca`, read as the bed) into `cert_file`, for the node's
/// own name and with a key id of its own, as an admin would outside
/// hostkeyctl.
fn own_certificate_from_the_sets_ca(bed: &TestBed, node: &Node, cert_file: &Path) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let text = runtime.block_on(bed.secret_value("hostkeyctl-ca/ca"));
    let ca: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("ca");
    std::fs::write(&key, ca["private_key"].as_str().unwrap()).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let public = dir.path().join("host.pub");
    std::fs::copy(node.ssh_dir.join("ssh_host_ed25519_key.pub"), &public).unwrap();
    crate::common::support::run_ok(
        std::process::Command::new(require("ssh-keygen"))
            .arg("-q")
            .arg("-s")
            .arg(&key)
            .args([
                "-h",
                "-I",
                "node-1 own certificate",
                "-n",
                "node-1.example",
                "-V",
                "-5m:+1d",
            ])
            .arg(&public),
    );
    std::fs::copy(dir.path().join("host-cert.pub"), cert_file).unwrap();
}
