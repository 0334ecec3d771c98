//! What `hostkeyctl enroll` sets up once the certificates are written
//! (work in progress): sshd serves them, and this node's ssh client trusts
//! the CA for the cluster's names, strictly.
//!
//! - sshd: a drop-in [`SSHD_DROP_IN`] with one `HostCertificate` per
//!   certificate, in the `sshd_config.d` the main config includes; `sshd -t`
//!   before the reload, and the previous drop-in back if it fails.
//! - the client: a marked block in `ssh_known_hosts` with the
//!   `@cert-authority` line for the cluster's host patterns, and
//!   `ssh_config.d/` [`CLIENT_DROP_IN`] turning `StrictHostKeyChecking yes`
//!   on for them. OpenSSH takes the first value it reads, and Debian's and
//!   Amazon Linux's `ssh_config` include `ssh_config.d/*.conf` at the top,
//!   before lines such as a `Host * StrictHostKeyChecking no` appended
//!   below; a user's own `~/.ssh/config` is read first and still wins.

use std::path::{Path, PathBuf};

use super::node::NodeError;
use crate::fsutil::{WriteOptions, write_atomic};
use crate::install::sshd::{ReloadMethod, SshdControl};

/// The sshd drop-in enrolment owns.
pub const SSHD_DROP_IN: &str = "50-hostkeyctl-enrolment.conf";
/// The ssh client drop-in enrolment owns (first, so its values win).
pub const CLIENT_DROP_IN: &str = "00-hostkeyctl-cluster.conf";
const BEGIN: &str = "# BEGIN hostkeyctl enrolment (hostkeyctl enroll writes this block)";
const END: &str = "# END hostkeyctl enrolment";

fn write(path: &Path, text: &str) -> Result<(), NodeError> {
    let options = WriteOptions {
        mode: 0o644,
        owner: None,
        overwrite: true,
    };
    write_atomic(path, text.as_bytes(), &options).map_err(|e| NodeError::Write {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// sshd serves `certificates`: the drop-in, `sshd -t`, the reload. On a
/// failed test the previous drop-in (or none) is put back and sshd is not
/// reloaded.
pub fn configure_sshd(
    sshd: &impl SshdControl,
    method: &ReloadMethod,
    certificates: &[PathBuf],
) -> Result<String, NodeError> {
    let dir = sshd.config().parent().unwrap_or(Path::new("/")).join("sshd_config.d");
    let main = std::fs::read_to_string(sshd.config()).unwrap_or_default();
    if !main.lines().any(|l| {
        let l = l.trim();
        l.to_ascii_lowercase().starts_with("include") && l.contains("sshd_config.d")
    }) {
        return Err(NodeError::Answer(format!(
            "{} includes no sshd_config.d: add `Include {}/*.conf` at its top, then enroll again",
            sshd.config().display(),
            dir.display()
        )));
    }
    let path = dir.join(SSHD_DROP_IN);
    let before = std::fs::read_to_string(&path).ok();
    let mut text = String::from("# hostkeyctl enroll: this node's host certificates, signed for its own keys\n");
    for cert in certificates {
        text.push_str(&format!("HostCertificate {}\n", cert.display()));
    }
    write(&path, &text)?;
    if let Err(e) = sshd.test() {
        let restored = match &before {
            Some(old) => write(&path, old),
            None => std::fs::remove_file(&path).map_err(|e| NodeError::Write {
                path: path.clone(),
                reason: e.to_string(),
            }),
        };
        return Err(NodeError::Answer(format!(
            "sshd -t refused the certificates ({e}); the drop-in was {}",
            if restored.is_ok() { "put back" } else { "NOT put back" }
        )));
    }
    sshd.reload(method)
        .map_err(|e| NodeError::Answer(format!("sshd reload: {e}")))
}

/// Replaces the marked block of `text` with `block` (appended when absent).
fn with_block(text: &str, block: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line == BEGIN {
            inside = true;
        } else if line == END {
            inside = false;
        } else if !inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(&format!("{BEGIN}\n{block}{END}\n"));
    out
}

/// This node's client trusts `ca_line` for `patterns`, strictly.
pub fn configure_client(client_dir: &Path, ca_line: &str, patterns: &[String]) -> Result<(), NodeError> {
    if patterns.is_empty() {
        return Ok(());
    }
    let known = client_dir.join("ssh_known_hosts");
    let text = std::fs::read_to_string(&known).unwrap_or_default();
    write(
        &known,
        &with_block(
            &text,
            &format!("@cert-authority {} {}\n", patterns.join(","), ca_line.trim()),
        ),
    )?;
    let conf_dir = client_dir.join("ssh_config.d");
    crate::fsutil::create_dir_all(&conf_dir, 0o755).map_err(|e| NodeError::Write {
        path: conf_dir.clone(),
        reason: e.to_string(),
    })?;
    write(
        &conf_dir.join(CLIENT_DROP_IN),
        &format!(
            "# hostkeyctl enroll: the cluster's nodes are checked against its CA, strictly\nHost {}\n    StrictHostKeyChecking yes\n    UpdateHostKeys no\n    GlobalKnownHostsFile {}\n",
            patterns.join(" "),
            known.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::with_block;

    #[test]
    fn the_block_is_replaced_and_every_other_line_kept() {
        let once = with_block("node-a ssh-ed25519 AAAA\n", "@cert-authority x ssh-ed25519 CA1\n");
        let twice = with_block(&once, "@cert-authority x ssh-ed25519 CA2\n");
        assert!(twice.starts_with("node-a ssh-ed25519 AAAA\n"), "{twice}");
        assert!(twice.contains("CA2") && !twice.contains("CA1"), "{twice}");
        assert_eq!(twice.matches("BEGIN hostkeyctl").count(), 1);
    }
}
