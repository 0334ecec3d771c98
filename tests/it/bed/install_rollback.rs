//! `hostkeyctl install` rolling back on real sshd nodes: a failing reload,
//! a failed verification, a full disk and a config `sshd -t` refuses.

use std::process::Command;

use serde_json::Value;

use crate::common::bed::{Node, TestBed, served, snapshot};

use super::install::{adopted, assert_no_leftovers, sighups};

/// `install` of the secret on `node` with `args` rolls back (exit 3) for
/// the reason `says`, its files byte for byte as they were and sshd
/// serving what it served: the report.
pub fn assert_rolled_back(bed: &TestBed, node: &Node, args: &[&str], says: &str) -> Value {
    let before = snapshot(&node.ssh_dir);
    let served_before = served(node);
    let run = bed.cli("install").on(node).secret().args(args).run();
    run.code(3);
    let report = run.json();
    assert_eq!(report["result"], "rolled_back", "{report}");
    assert!(report["error"].as_str().unwrap().contains(says), "{report}");
    assert_eq!(snapshot(&node.ssh_dir), before, "files not restored byte for byte");
    assert_eq!(served(node), served_before, "sshd must keep serving its old keys");
    report
}

#[test]
fn a_failing_reload_restores_the_files_byte_for_byte() {
    let (bed, _) = adopted();
    let node = &bed.state.nodes[1];
    let broken = ["--reload-command", "echo 'reload is broken' >&2; exit 7"];
    let report = assert_rolled_back(&bed, node, &broken, "reload is broken");
    assert!(!node.ssh_dir.join("sshd_config.d/00-hostkeyctl.conf").exists());
    assert_no_leftovers(node);
    // The backup of the previous files is kept.
    let backup = std::path::PathBuf::from(report["backup"].as_str().unwrap());
    assert!(backup.join("manifest.json").exists());
}

#[test]
fn sshd_reading_another_host_key_path_fails_verification_and_rolls_back() {
    let (bed, _) = adopted();
    let node = &bed.state.nodes[1];
    // sshd reads its ed25519 key from elsewhere: writing ssh_host_ed25519_key
    // changes nothing it serves.
    let elsewhere = node.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::copy(
        node.ssh_dir.join("ssh_host_ed25519_key"),
        elsewhere.join("ssh_host_ed25519_key"),
    )
    .unwrap();
    let config = std::fs::read_to_string(&node.sshd_config).unwrap();
    let moved = config.replace(
        &format!("HostKey {}/ssh_host_ed25519_key", node.ssh_dir.display()),
        &format!("HostKey {}/ssh_host_ed25519_key", elsewhere.display()),
    );
    assert_ne!(config, moved);
    std::fs::write(&node.sshd_config, moved).unwrap();
    bed.start_node(&node.name);
    assert_rolled_back(&bed, node, &["--verify-timeout", "3"], "ssh-ed25519: serves");
}

/// Unmounts a tmpfs when dropped, even if the test fails.
struct Mount(std::path::PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Also the regression test for a rollback link left behind when the write
/// that failed was of a file that still had its old inode.
#[test]
fn no_space_left_while_writing_rolls_back() {
    let (bed, _) = adopted();
    let node = &bed.state.nodes[1];
    // Move the node's /etc/ssh onto a 64 KiB tmpfs with two free pages.
    let saved = node.root.join("ssh-saved");
    assert!(
        Command::new("cp")
            .arg("-a")
            .arg(&node.ssh_dir)
            .arg(&saved)
            .status()
            .unwrap()
            .success()
    );
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k,mode=755", "tmpfs"])
        .arg(&node.ssh_dir)
        .status()
        .unwrap();
    assert!(mounted.success(), "mounting a tmpfs needs root");
    let _mount = Mount(node.ssh_dir.clone());
    let copy = format!("cp -a {}/. {}/", saved.display(), node.ssh_dir.display());
    assert!(Command::new("sh").arg("-c").arg(copy).status().unwrap().success());
    let fill = format!(
        "dd if=/dev/zero of={}/filler bs=4096 2>/dev/null; true",
        node.ssh_dir.display()
    );
    Command::new("sh").arg("-c").arg(fill).status().unwrap();
    std::fs::remove_file(node.ssh_dir.join("filler")).unwrap();
    let filler = node.ssh_dir.join("filler");
    // Leave room for exactly two new files.
    let room = format!(
        "dd if=/dev/zero of={} bs=4096 count=$(( $(stat -f -c %a {}) - 2 )) 2>/dev/null",
        filler.display(),
        node.ssh_dir.display()
    );
    assert!(Command::new("sh").arg("-c").arg(room).status().unwrap().success());
    assert_rolled_back(&bed, node, &[], "No space left");
    assert_no_leftovers(node);
}

/// Regression: a rollback used to reload sshd onto restored files that
/// `sshd -t` refuses (here: group-readable keys, which Debian's sshd
/// rejects), and sshd exits on such a SIGHUP. The failure happened before
/// any reload, so the rollback must not reload at all.
#[test]
fn a_refused_config_is_rolled_back_without_taking_sshd_down() {
    let (bed, _) = adopted();
    let node = &bed.state.nodes[1];
    for t in ["ed25519", "ecdsa", "rsa"] {
        let key = node.ssh_dir.join(format!("ssh_host_{t}_key"));
        assert!(Command::new("chmod").arg("0640").arg(&key).status().unwrap().success());
    }
    assert_rolled_back(&bed, node, &[], "sshd -t");
    assert_eq!(sighups(node), 0, "sshd was reloaded onto a refused config");
}
