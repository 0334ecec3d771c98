//! `hostkeyctl known-hosts` against OpenSSH itself: `ssh-keygen -F` on
//! plain and hashed lines and `ssh-keygen -r` SSHFP on a set OpenSSH made,
//! with no bed. Real clients through the load balancer, plain and hashed
//! files among them, are the matrix of [`crate::clients`].

use std::collections::BTreeSet;
use std::process::Command;

use hostkeyctl::keyset::KeySet;
use hostkeyctl::known_hosts::{self, Format, Hosts, HostsError};

use crate::common::support::{require, run_ok};

/// A key set made by OpenSSH itself (`ssh-keygen`), with its public files.
fn openssh_set() -> (tempfile::TempDir, KeySet) {
    let dir = tempfile::tempdir().unwrap();
    for t in ["ed25519", "ecdsa", "rsa"] {
        run_ok(
            Command::new(require("ssh-keygen"))
                .args(["-q", "-N", "", "-t", t, "-f"])
                .arg(dir.path().join(format!("ssh_host_{t}_key"))),
        );
    }
    let keys = KeySet::load_dir(dir.path()).unwrap();
    (dir, keys)
}

/// `ssh-keygen -F NAME -f FILE`: the lines OpenSSH finds for NAME.
fn found(name: &str, file: &std::path::Path) -> usize {
    let out = Command::new(require("ssh-keygen"))
        .args(["-F", name, "-f"])
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count()
}

#[test]
fn sshfp_records_match_ssh_keygen_r() {
    let (dir, keys) = openssh_set();
    let hosts = Hosts::parse(&["login.example.org".to_owned()], 22).unwrap();
    let ours: BTreeSet<String> = known_hosts::lines(&keys, &hosts, Format::Sshfp)
        .lines()
        .map(str::to_owned)
        .collect();
    let mut theirs = BTreeSet::new();
    for t in ["ed25519", "ecdsa", "rsa"] {
        let out = run_ok(
            Command::new(require("ssh-keygen"))
                .args(["-r", "login.example.org", "-f"])
                .arg(dir.path().join(format!("ssh_host_{t}_key.pub"))),
        );
        theirs.extend(out.lines().map(str::to_owned));
    }
    assert_eq!(theirs.len(), 6, "{theirs:?}");
    assert_eq!(ours, theirs);
}

/// A port other than 22 is OpenSSH's `[name]:port` pattern, which
/// `ssh-keygen -F` finds in plain and hashed files; a name with
/// whitespace or a comma would split the pattern and is refused.
#[test]
fn a_non_default_port_uses_bracketed_patterns() {
    let (dir, keys) = openssh_set();
    let hosts = Hosts::parse(&[" a.example".to_owned(), "b.example".to_owned(), String::new()], 2222).unwrap();
    let plain = known_hosts::lines(&keys, &hosts, Format::Plain);
    assert_eq!(plain.lines().count(), 3, "{plain}");
    for line in plain.lines() {
        assert!(line.starts_with("[a.example]:2222,[b.example]:2222 "), "{line}");
    }
    let hashed = known_hosts::lines(&keys, &hosts, Format::Hashed);
    assert_eq!(hashed.lines().count(), 6, "{hashed}");
    assert!(!hashed.contains("example"), "{hashed}");
    for (name, text) in [("plain", &plain), ("hashed", &hashed)] {
        let file = dir.path().join(name);
        std::fs::write(&file, text).unwrap();
        for host in ["[a.example]:2222", "[b.example]:2222"] {
            assert_eq!(found(host, &file), 3, "{host} in the {name} file:\n{text}");
        }
        assert_eq!(found("a.example", &file), 0, "port 22 must not match:\n{text}");
    }
    for bad in ["a b", "a,b"] {
        assert!(
            matches!(Hosts::parse(&[bad.to_owned()], 22), Err(HostsError::NotAHost(_))),
            "{bad}"
        );
    }
    assert!(matches!(Hosts::parse(&[" ".to_owned()], 22), Err(HostsError::Empty)));
}
