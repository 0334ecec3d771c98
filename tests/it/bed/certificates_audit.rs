//! The audit's certificate verdicts on the test bed (issue 17), judged on
//! certificates ssh-keygen signs, and a stray plain key beside a good one.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::bed::{BedOptions, Node, TestBed};
use crate::common::support::require;

use super::certificates::{NAME, reload_until_served};

/// A CA made with ssh-keygen, for certificates the audit must judge.
fn keygen_ca(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let out = Command::new(require("ssh-keygen"))
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    path
}

fn fingerprint_of(pub_file: &Path) -> String {
    let out = Command::new(require("ssh-keygen"))
        .arg("-lf")
        .arg(pub_file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned()
}

/// Signs `node`'s ed25519 key with ssh-keygen into its certificate file.
fn sign_node(node: &Node, ca: &Path, host: bool, principals: &str, validity: &str) -> String {
    let public = node.ssh_dir.join("ssh_host_ed25519_key.pub");
    let scratch = node.ssh_dir.join("scratch.pub");
    std::fs::copy(&public, &scratch).unwrap();
    let mut cmd = Command::new(require("ssh-keygen"));
    cmd.arg("-q")
        .arg("-s")
        .arg(ca)
        .args(["-I", "test", "-n", principals, "-V", validity]);
    if host {
        cmd.arg("-h");
    }
    let out = cmd.arg(&scratch).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cert = std::fs::read_to_string(node.ssh_dir.join("scratch-cert.pub")).unwrap();
    std::fs::remove_file(node.ssh_dir.join("scratch-cert.pub")).unwrap();
    std::fs::remove_file(&scratch).unwrap();
    cert
}

/// Serves `cert` (or none) on `node` and waits until sshd does.
fn serve(node: &Node, cert: Option<&str>) {
    let path = node.ssh_dir.join("ssh_host_ed25519_key-cert.pub");
    let config = std::fs::read_to_string(&node.sshd_config).unwrap();
    let line = format!("HostCertificate {}\n", path.display());
    let without: String = config.replace(&line, "");
    match cert {
        Some(c) => {
            std::fs::write(&path, c).unwrap();
            std::fs::write(&node.sshd_config, format!("{line}{without}")).unwrap();
        }
        None => std::fs::write(&node.sshd_config, without).unwrap(),
    }
    reload_until_served(node, cert);
}

#[test]
fn the_audit_gives_each_certificate_verdict_and_expired_certificates_fall_back_to_the_key() {
    let bed = TestBed::start(BedOptions::nodes(1));
    let node = bed.state.nodes[0].clone();
    let ca = keygen_ca(bed.dir(), "ca");
    let rogue = keygen_ca(bed.dir(), "rogue");
    let ca_fp = fingerprint_of(&ca.with_extension("pub"));
    let key_fp = fingerprint_of(&node.ssh_dir.join("ssh_host_ed25519_key.pub"));
    let endpoint = format!("{}:{}", node.address, node.port);
    let lb = bed.state.lb.clone().expect("the bed has a load balancer");
    let verdict = || {
        let run = bed
            .cli("audit")
            .json()
            .args(&[
                "--expect",
                &key_fp,
                "--key-types",
                "ssh-ed25519",
                "--endpoint",
                &endpoint,
                "--ca-fingerprint",
                &ca_fp,
                "--principal",
                NAME,
                "--warn-days",
                "10",
                "--lb",
                &lb.address,
                "--samples",
                "3",
            ])
            .run();
        let report = run.json();
        let status = report["nodes"][0]["findings"][0]["certificate"]["status"]
            .as_str()
            .unwrap_or("none")
            .to_owned();
        // The same verdict through the load balancer (one backend).
        assert_eq!(
            report["lb"]["types"][0]["certificate_status"],
            status.as_str(),
            "{report}"
        );
        (status, run.code)
    };
    let cases: [(&str, bool, &str, &str, &str, i32); 6] = [
        ("ca", true, NAME, "-5m:+30d", "OK", 0),
        ("ca", true, NAME, "-5m:+2d", "EXPIRING", 0),
        ("ca", true, NAME, "20200101:20200102", "EXPIRED", 1),
        ("rogue", true, NAME, "-5m:+30d", "WRONG_CA", 1),
        ("ca", true, "other.test", "-5m:+30d", "PRINCIPAL_MISSING", 1),
        ("ca", false, NAME, "-5m:+30d", "NOT_HOST_CERT", 1),
    ];
    for (signer, host, names, validity, want, code) in cases {
        let key = if signer == "ca" { &ca } else { &rogue };
        serve(&node, Some(&sign_node(&node, key, host, names, validity)));
        assert_eq!(verdict(), (want.to_owned(), code), "{want}");
        if want == "EXPIRED" {
            // A client that trusts the CA and knows the plain key still gets in.
            let public = std::fs::read_to_string(ca.with_extension("pub")).unwrap();
            let key = std::fs::read_to_string(node.ssh_dir.join("ssh_host_ed25519_key.pub")).unwrap();
            let kh = bed.dir().join("known_hosts.both");
            let plain: String = key.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
            std::fs::write(&kh, format!("@cert-authority * {public}{} {plain}\n", lb.address)).unwrap();
            let out = bed.ssh_lb(&kh, &[]);
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    }
    serve(&node, None);
    assert_eq!(verdict(), ("CERT_MISSING".to_owned(), 1));
    assert_stray_plain_key_is_a_mismatch(&node, &ca, &key_fp, &ca_fp);
}

/// Regression (issue 27): the set's certificate, and another plain
/// ed25519 key listed first, which every client that trusts keys gets.
/// `--ca-fingerprint` judged the certificate alone: OK, exit 0. The plain
/// key is asked for too: MISMATCH, exit 1, the certificate still OK.
fn assert_stray_plain_key_is_a_mismatch(node: &Node, ca: &Path, key_fp: &str, ca_fp: &str) {
    let stray = node.ssh_dir.join("stray_ed25519_key");
    let out = Command::new(require("ssh-keygen"))
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&stray)
        .output()
        .unwrap();
    assert!(out.status.success());
    let config = std::fs::read_to_string(&node.sshd_config).unwrap();
    std::fs::write(&node.sshd_config, format!("HostKey {}\n{config}", stray.display())).unwrap();
    serve(node, Some(&sign_node(node, ca, true, NAME, "-5m:+30d")));
    let stray_fp = fingerprint_of(&stray.with_extension("pub"));
    assert_eq!(
        crate::common::bed::keyscan(&node.address, node.port, "ed25519").as_deref(),
        Some(stray_fp.as_str()),
        "sshd does not serve the stray plain key"
    );
    let endpoint = format!("{}:{}", node.address, node.port);
    let run = crate::common::support::hostkeyctl()
        .args([
            "audit",
            "--output",
            "json",
            "--expect",
            key_fp,
            "--key-types",
            "ssh-ed25519",
            "--endpoint",
            &endpoint,
            "--ca-fingerprint",
            ca_fp,
            "--principal",
            NAME,
        ])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let finding = &report["nodes"][0]["findings"][0];
    assert_eq!(run.status.code(), Some(1), "{report}");
    assert_eq!(finding["status"], "MISMATCH", "{report}");
    assert_eq!(finding["served"], stray_fp.as_str(), "{report}");
    assert_eq!(finding["certificate"]["status"], "OK", "{report}");
}
