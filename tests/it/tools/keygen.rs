//! `hostkeyctl keygen` and key set files against OpenSSH's own tools.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use hostkeyctl::document::SecretDocument;
use hostkeyctl::keyset::{KeyAlgorithm, KeySet};

use crate::common::support::{
    ensure_privsep_dir, fixtures, hostkeyctl, key_part, require, run_ok, ssh_keygen_fingerprint,
};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn keygen_writes_keys_openssh_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("keys");
    let out = hostkeyctl()
        .args(["keygen", "--output", "json", "--out-dir"])
        .arg(&out_dir)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let keys = report["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 3, "{report}");

    let mut sshd_config = String::new();
    for key in keys {
        let private = std::path::PathBuf::from(key["private_key_file"].as_str().unwrap());
        let public = std::path::PathBuf::from(key["public_key_file"].as_str().unwrap());
        assert_eq!(mode(&private), 0o600, "{}", private.display());
        assert_eq!(mode(&public), 0o644, "{}", public.display());
        // ssh-keygen derives the same public key from our private key file...
        let derived = run_ok(Command::new(require("ssh-keygen")).arg("-y").arg("-f").arg(&private));
        let written = std::fs::read_to_string(&public).unwrap();
        assert_eq!(key_part(&derived), key_part(&written));
        // ...and prints the fingerprint we reported.
        assert_eq!(ssh_keygen_fingerprint(&public), key["fingerprint"].as_str().unwrap());
        sshd_config.push_str(&format!("HostKey {}\n", private.display()));
    }
    let rsa = keys.iter().find(|k| k["algorithm"] == "ssh-rsa").unwrap();
    let rsa_info = run_ok(
        Command::new(require("ssh-keygen"))
            .arg("-lf")
            .arg(rsa["public_key_file"].as_str().unwrap()),
    );
    assert!(rsa_info.starts_with("3072 "), "default RSA size is 3072: {rsa_info}");

    // sshd itself accepts the files as host keys.
    ensure_privsep_dir();
    let config = dir.path().join("sshd_config");
    std::fs::write(
        &config,
        format!("{sshd_config}ListenAddress 127.0.0.1:2\nPidFile none\n"),
    )
    .unwrap();
    run_ok(Command::new(require("sshd")).arg("-t").arg("-f").arg(&config));
}

#[test]
fn keygen_refuses_to_overwrite_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["keygen", "--output", "json", "--algorithms", "ed25519", "--out-dir"];
    hostkeyctl().args(args).arg(dir.path()).assert().success();
    let key = dir.path().join("ssh_host_ed25519_key");
    let before = std::fs::read(&key).unwrap();

    let assert = hostkeyctl().args(args).arg(dir.path()).assert().code(2);
    let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
    assert!(
        stderr.contains("already exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&key).unwrap(), before, "refused keygen changed the key");

    hostkeyctl()
        .args(args)
        .arg(dir.path())
        .arg("--force")
        .assert()
        .success();
    assert_ne!(std::fs::read(&key).unwrap(), before, "--force did not replace the key");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
}

#[test]
fn keygen_rejects_bad_arguments_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expect) in [
        (vec!["--rsa-bits", "1024"], "--rsa-bits 1024 is out of range"),
        (vec!["--algorithms", "dsa"], "unknown host key algorithm \"dsa\""),
        (
            vec!["--algorithms", "ed25519,bogus"],
            "unknown host key algorithm \"bogus\"",
        ),
    ] {
        let assert = hostkeyctl()
            .arg("keygen")
            .arg("--out-dir")
            .arg(dir.path())
            .args(&args)
            .assert()
            .code(2);
        let stderr = String::from_utf8_lossy(&assert.get_output().stderr).to_string();
        assert!(stderr.contains(expect), "{args:?}: {stderr}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "a refused keygen wrote files"
    );
}

#[test]
fn keygen_subset_writes_only_those_algorithms() {
    let dir = tempfile::tempdir().unwrap();
    hostkeyctl()
        .args([
            "keygen",
            "--output",
            "json",
            "--algorithms",
            "ecdsa,ed25519",
            "--out-dir",
        ])
        .arg(dir.path())
        .assert()
        .success();
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ssh_host_ecdsa_key",
            "ssh_host_ecdsa_key.pub",
            "ssh_host_ed25519_key",
            "ssh_host_ed25519_key.pub"
        ]
    );
}

/// Key sets made by `ssh-keygen -A` load, and round-trip through the secret
/// document and back to files unchanged, byte for byte.
#[test]
fn ssh_keygen_sets_round_trip_through_the_document() {
    let fresh = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(fresh.path().join("etc/ssh")).unwrap();
    run_ok(
        Command::new(require("ssh-keygen"))
            .arg("-A")
            .arg("-f")
            .arg(fresh.path()),
    );
    for source in [fixtures().join("node-a"), fresh.path().join("etc/ssh")] {
        let set = KeySet::load_dir(&source).unwrap();
        let mut expected = KeyAlgorithm::ALL.to_vec();
        expected.sort();
        assert_eq!(set.algorithms(), expected, "{}", source.display());
        let json = SecretDocument::new(set.clone()).to_json().unwrap();
        let parsed = SecretDocument::parse(&json).unwrap();
        assert_eq!(parsed.keys, set);
        let out = tempfile::tempdir().unwrap();
        parsed.keys.write_dir(out.path(), false).unwrap();
        for a in KeyAlgorithm::ALL {
            for name in [a.private_file_name(), a.public_file_name()] {
                assert_eq!(
                    std::fs::read(out.path().join(&name)).unwrap(),
                    std::fs::read(source.join(&name)).unwrap(),
                    "{name} from {} changed in the round trip",
                    source.display()
                );
            }
            assert_eq!(
                ssh_keygen_fingerprint(&out.path().join(a.public_file_name())),
                set.get(a).unwrap().fingerprint().as_str()
            );
        }
    }
}
