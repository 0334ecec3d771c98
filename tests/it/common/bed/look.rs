//! Looking at the bed's nodes from outside: real `ssh` and `ssh-keyscan`
//! logins, another release's tools, and what a node serves and holds.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Node, TestBed};
use crate::common::support::require;

/// The SHA256 fingerprint `ssh-keyscan -t TYPE` then `ssh-keygen -lf -` see
/// at an endpoint, or `None` if the server offered no such key.
pub fn keyscan(address: &str, port: u16, key_type: &str) -> Option<String> {
    let scan = Command::new(require("ssh-keyscan"))
        .args(["-T", "5", "-p", &port.to_string(), "-t", key_type, address])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&scan.stdout).to_string();
    if text.trim().is_empty() {
        return None;
    }
    let mut keygen = Command::new(require("ssh-keygen"))
        .args(["-lf", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    keygen.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = keygen.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .map(str::to_owned)
}

/// Waits for a condition, polling; fails the test with `what` on timeout.
pub fn wait_until(what: &str, timeout: Duration, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

impl TestBed {
    /// A real `ssh` login through the load balancer with `known_hosts`,
    /// `StrictHostKeyChecking=yes` and extra `-o` options, running `true`.
    pub fn ssh_lb(&self, known_hosts: &Path, options: &[&str]) -> std::process::Output {
        self.ssh_lb_with(None, known_hosts, options)
    }

    /// [`TestBed::ssh_lb`] with the `ssh` of another Debian release
    /// (`bullseye`: OpenSSH 8.4, `trixie`: 10.0), run from that release's
    /// file system (scripts/build-releases.sh) in a mount namespace of its
    /// own, where the bed's directory keeps its path.
    pub fn ssh_lb_with(&self, release: Option<&str>, known_hosts: &Path, options: &[&str]) -> std::process::Output {
        let lb = self.state.lb.clone().expect("the bed has a load balancer");
        self.ssh_with(release, &lb.address, known_hosts, options)
    }

    /// A real `ssh` login to `address` (a node, the load balancer), as
    /// [`TestBed::ssh_lb_with`].
    pub fn ssh_with(
        &self,
        release: Option<&str>,
        address: &str,
        known_hosts: &Path,
        options: &[&str],
    ) -> std::process::Output {
        let mut cmd = match release {
            None => Command::new(require("ssh")),
            Some(suite) => self.release_command(suite, "/usr/bin/ssh"),
        };
        cmd.arg("-i")
            .arg(&self.state.client_key)
            .arg("-o")
            .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
            .args([
                "-o",
                "StrictHostKeyChecking=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=5",
            ]);
        for option in options {
            cmd.args(["-o", option]);
        }
        cmd.arg(format!("root@{address}")).arg("true").output().unwrap()
    }
}

impl TestBed {
    /// `program` from the file system of Debian `suite` (read-only under
    /// an overlay on a tmpfs, in a private mount namespace, with the bed's
    /// directory at its own path), in the host's network: another
    /// release's client tools, as on a user's machine.
    pub fn release_command(&self, suite: &str, program: &str) -> Command {
        let releases = std::env::var_os("HOSTKEYCTL_RELEASES")
            .map_or_else(|| PathBuf::from("/var/cache/hostkeyctl-bed/releases"), PathBuf::from);
        let fs = releases.join(suite);
        assert!(
            fs.join(".built").is_file(),
            "no {suite} root file system in {}: run scripts/build-releases.sh (make deps)",
            releases.display()
        );
        let top = tempfile::Builder::new()
            .prefix(&format!("{suite}-"))
            .tempdir_in(self.dir())
            .unwrap()
            .keep();
        let merged = top.join("fs");
        // Every path through the one quoting function, as on a node.
        let q = |p: &dyn std::fmt::Display| hostkeyctl::shell::quote(&p.to_string()).unwrap();
        let (bed, top, merged, fs) = (self.dir().display(), top.display(), merged.display(), fs.display());
        let script = [
            format!("mount -t tmpfs tmpfs {}", q(&top)),
            format!(
                "mkdir {} {} {}",
                q(&format!("{top}/up")),
                q(&format!("{top}/work")),
                q(&merged)
            ),
            format!(
                "mount -t overlay overlay -o {} {}",
                q(&format!("lowerdir={fs},upperdir={top}/up,workdir={top}/work")),
                q(&merged)
            ),
            format!("mkdir -p {}", q(&format!("{merged}{bed}"))),
            format!("mount --bind {} {}", q(&bed), q(&format!("{merged}{bed}"))),
            format!("mount -t proc proc {}", q(&format!("{merged}/proc"))),
            format!("mount --rbind /dev {}", q(&format!("{merged}/dev"))),
            format!("exec chroot {} {} \"$@\"", q(&merged), q(&program)),
        ]
        .join(" && ");
        let mut cmd = Command::new(require("unshare"));
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            &script,
            program,
        ]);
        cmd
    }
}

/// Someone regenerates `node`'s ed25519 host key by hand, on disk (an sshd
/// that re-executes serves it from its next connection; one started with
/// `-r` only after a reload).
pub fn change_ed25519_key_by_hand(node: &Node) {
    let key = node.ssh_dir.join("ssh_host_ed25519_key");
    std::fs::remove_file(&key).unwrap();
    std::fs::remove_file(node.ssh_dir.join("ssh_host_ed25519_key.pub")).unwrap();
    crate::common::support::run_ok(
        std::process::Command::new(crate::common::support::require("ssh-keygen"))
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key),
    );
}

/// The fingerprints a node serves for the three managed types, by ssh-keyscan.
pub fn served(node: &Node) -> Vec<Option<String>> {
    ["ed25519", "ecdsa", "rsa"]
        .iter()
        .map(|t| keyscan(&node.address, node.port, t))
        .collect()
}

/// How many connections the node's sshd has accepted from this host
/// directly (127.0.0.1), not through the load balancer (its own address):
/// its `Connection from` lines (login nodes log at `LogLevel VERBOSE`).
pub fn connections(node: &Node) -> usize {
    let log = std::fs::read_to_string(node.root.join("sshd.log")).unwrap_or_default();
    log.lines().filter(|l| l.contains("Connection from 127.0.0.1 ")).count()
}

/// The fingerprints in an init report, in ed25519, ecdsa, rsa order.
pub fn set_fingerprints(init: &Value) -> Vec<Option<String>> {
    ["ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"]
        .iter()
        .map(|t| {
            init["keys"]
                .as_array()
                .unwrap()
                .iter()
                .find(|k| k["algorithm"] == *t)
                .map(|k| k["fingerprint"].as_str().unwrap().to_owned())
        })
        .collect()
}

/// Every file in a directory (not recursive): name, a digest of its bytes
/// (so a failing comparison never prints key material), and mode.
pub fn snapshot(dir: &Path) -> Vec<(String, u64, u32)> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    use std::os::unix::fs::PermissionsExt;
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o7777;
            let mut h = DefaultHasher::new();
            std::fs::read(&p).unwrap().hash(&mut h);
            (p.file_name().unwrap().to_string_lossy().into_owned(), h.finish(), mode)
        })
        .collect();
    out.sort();
    out
}

/// The private key lines (base64 body) of the host keys in a directory.
pub fn private_lines(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("ssh_host_") && !name.ends_with(".pub") {
            let text = std::fs::read_to_string(&path).unwrap();
            // The private key file embeds the public key; a line that is
            // only a piece of the public key's base64 (it happens for ECDSA)
            // is public material, shown by any ssh client at debug level.
            let public = std::fs::read_to_string(path.with_extension("pub")).unwrap_or_default();
            out.extend(
                text.lines()
                    .filter(|l| !l.starts_with("-----") && !public.contains(*l))
                    .map(str::to_owned),
            );
        }
    }
    out
}

/// Whether a real `ssh` client can get a host key of `algorithm` from the node.
pub fn offers(node: &Node, algorithm: &str, client_key: &Path) -> bool {
    let known_hosts = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new(require("ssh"))
        .arg("-i")
        .arg(client_key)
        .args([
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=accept-new",
            "-o",
            "ConnectTimeout=5",
        ])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.path().display()))
        .arg("-o")
        .arg(format!("HostKeyAlgorithms={algorithm}"))
        .arg(format!("root@{}", node.address))
        .arg("true")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("no matching host key type") {
        return false;
    }
    assert!(
        out.status.success(),
        "ssh -o HostKeyAlgorithms={algorithm} failed: {stderr}"
    );
    true
}
