//! What `hostkeyctl enroll` sets up once the certificates are written:
//! sshd serves them, and this node's ssh client trusts
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

use super::request::NodeError;
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

/// A host pattern as known_hosts and ssh_config take it, and nothing that
/// could end its line or field there: `*.ec2.internal`, `ip-10-1-*`,
/// `10.1.*`, or one negated (`!10.1.17.*`: the login nodes left out).
/// Wildcards alone (`*`) would make every host strict and trust the CA for
/// all of them: refused.
fn is_pattern(p: &str) -> bool {
    let body = p.strip_prefix('!').unwrap_or(p);
    !body.is_empty()
        && body.len() <= 253
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '*' | '?'))
        && body.chars().any(|c| c.is_ascii_alphanumeric())
}

/// A host pattern of the cluster's nodes, checked as [`is_pattern`] says:
/// the only form in which a pattern reaches `ssh_known_hosts` or
/// `ssh_config`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPattern(String);

impl HostPattern {
    /// The pattern.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for HostPattern {
    type Err = String;

    fn from_str(p: &str) -> Result<Self, String> {
        if is_pattern(p) {
            Ok(HostPattern(p.to_owned()))
        } else {
            Err(format!(
                "{} is not a host pattern: letters, digits, '.', '-', '_', ':' and the wildcards '*' and '?', at least one letter or digit, optionally after a leading '!' (known_hosts and ssh_config take no CIDR)",
                crate::escape::escape(p)
            ))
        }
    }
}

/// Where the cluster reaches its login nodes: their patterns, and the port
/// of their listener for the cluster (`--login-hosts`, `--cluster-port`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginRoute {
    /// The login nodes' names and addresses.
    pub hosts: Vec<HostPattern>,
    /// Their listener's port.
    pub port: u16,
}

impl LoginRoute {
    /// The route the two settings give, if any; each without the other is
    /// refused, as is port 22 (the load balancer's sshd).
    pub fn new(hosts: &[HostPattern], port: Option<u16>) -> Result<Option<LoginRoute>, String> {
        match (hosts.is_empty(), port) {
            (true, None) => Ok(None),
            (false, None) => Err(
                "--login-hosts without --cluster-port: give the port of the login nodes' listener for the cluster too"
                    .to_owned(),
            ),
            (true, Some(_)) => Err(
                "--cluster-port without --login-hosts: name the login nodes (`--login-hosts 'ip-10-1-17-*,10.1.17.*'`), so every node reaches them on that port".to_owned(),
            ),
            (false, Some(0 | 22)) => Err(
                "--cluster-port must be a port of its own, not 0 or 22: the load balancer forwards users to port 22, where the canonical set is served".to_owned(),
            ),
            (false, Some(port)) => {
                if hosts.iter().any(|h| h.as_str().starts_with('!')) {
                    return Err("--login-hosts takes no negated pattern: name the login nodes".to_owned());
                }
                Ok(Some(LoginRoute {
                    hosts: hosts.to_vec(),
                    port,
                }))
            }
        }
    }

    /// Refuses login patterns that are also trust patterns: every node
    /// such a pattern covers would be reached on the listener's port,
    /// where only login nodes listen.
    pub fn check_against(&self, trust: &[HostPattern]) -> Result<(), String> {
        let same: Vec<&str> = self
            .hosts
            .iter()
            .filter(|h| trust.contains(h))
            .map(HostPattern::as_str)
            .collect();
        if same.is_empty() {
            return Ok(());
        }
        Err(format!(
            "--login-hosts {} is also a --trust pattern: every node it covers would be reached on --cluster-port, where only login nodes listen; name the login nodes alone (`ip-10-1-17-*,10.1.17.*`)",
            same.join(",")
        ))
    }

    /// The names known_hosts matches for a host on this port
    /// (`[ip-10-1-17-*]:2222`).
    fn known_hosts_patterns(&self) -> Vec<String> {
        self.hosts
            .iter()
            .map(|h| format!("[{}]:{}", h.as_str(), self.port))
            .collect()
    }
}

/// The drop-in's directory, and whether the main config includes the
/// drop-in by name: an `Include` of that directory whose pattern matches
/// [`SSHD_DROP_IN`] as sshd's glob(3) does (a relative path is sshd's
/// config directory's).
fn sshd_reads_drop_in(sshd: &impl SshdControl) -> (PathBuf, bool) {
    let base = sshd.config().parent().unwrap_or(Path::new("/"));
    let dir = base.join("sshd_config.d");
    let main = std::fs::read_to_string(sshd.config()).unwrap_or_default();
    let included = main
        .lines()
        .map(str::trim)
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.eq_ignore_ascii_case("include"))
        })
        .flat_map(|l| l.split_whitespace().skip(1))
        .any(|arg| {
            let path = base.join(arg);
            path.parent() == Some(dir.as_path())
                && path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|pattern| crate::install::sshd_config::include_matches(pattern, SSHD_DROP_IN))
        });
    (dir, included)
}

/// Before anything is asked of the signer: sshd will read enrolment's
/// drop-in (OpenSSH 8.2 and later read `Include`; older ones cannot).
pub fn preflight_sshd(sshd: &impl SshdControl) -> Result<(), NodeError> {
    let (dir, included) = sshd_reads_drop_in(sshd);
    if included {
        return Ok(());
    }
    Err(NodeError::Sshd(format!(
        "{} does not include {}/{SSHD_DROP_IN}: add `Include {}/*.conf` at its top (OpenSSH 8.2 or later), then enroll again; nothing was asked or written",
        sshd.config().display(),
        dir.display(),
        dir.display()
    )))
}

/// sshd serves `certificates`: the drop-in, `sshd -t`, the reload, then
/// `sshd -T` must list them. On a failed test the previous drop-in (or
/// none) is put back and sshd is not reloaded.
pub fn configure_sshd(
    sshd: &impl SshdControl,
    method: &ReloadMethod,
    certificates: &[PathBuf],
) -> Result<String, NodeError> {
    preflight_sshd(sshd)?;
    let (dir, _) = sshd_reads_drop_in(sshd);
    crate::fsutil::create_dir_all(&dir, 0o755).map_err(|e| NodeError::Write {
        path: dir.clone(),
        reason: e.to_string(),
    })?;
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
        return Err(NodeError::Sshd(format!(
            "sshd -t refused the certificates ({e}); the drop-in was {}, sshd was not reloaded; the certificates are written beside the keys",
            if restored.is_ok() { "put back" } else { "NOT put back" }
        )));
    }
    let effective = sshd.effective().map_err(|e| NodeError::Sshd(format!("sshd -T: {e}")))?;
    let missing: Vec<String> = certificates
        .iter()
        .map(|c| c.display().to_string())
        .filter(|c| !effective.host_certificates.contains(c))
        .collect();
    if !missing.is_empty() {
        return Err(NodeError::Sshd(format!(
            "sshd -T does not list {} as hostcertificate: another setting wins over {}; sshd was not reloaded",
            missing.join(", "),
            path.display()
        )));
    }
    if let Some(pinned) = &effective.host_key_algorithms {
        let unoffered = unoffered(pinned, certificates);
        if !unoffered.is_empty() {
            return Err(NodeError::Sshd(format!(
                "sshd's HostKeyAlgorithms ({pinned}) has no certificate algorithm for {}, so sshd would not offer those certificates and strict clients would refuse this node; sshd was not reloaded ({} stays, as sshd -t passed). Add the `-cert-v01@openssh.com` algorithms of those types to the setting that pins it (`sshd -T | grep hostkeyalgorithms` shows the value), then enroll again",
                unoffered.join(", "),
                path.display()
            )));
        }
    }
    sshd.reload(method).map_err(|e| {
        NodeError::Sshd(format!(
            "the reload failed ({e}); {} passed sshd -t and stays",
            path.display()
        ))
    })
}

/// The certificate files among `certificates` whose certificate algorithm
/// `pinned` (sshd's `HostKeyAlgorithms`) leaves out. A file that does not
/// read is left to sshd, which said it loads.
fn unoffered(pinned: &str, certificates: &[PathBuf]) -> Vec<String> {
    let allowed: Vec<&str> = pinned.split(',').map(str::trim).collect();
    certificates
        .iter()
        .filter(|path| {
            let Some(cert) = std::fs::read_to_string(path)
                .ok()
                .and_then(|t| ssh_key::Certificate::from_openssh(t.trim()).ok())
            else {
                return false;
            };
            let names: Vec<String> = match cert.public_key().algorithm() {
                ssh_key::Algorithm::Rsa { .. } => ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]
                    .iter()
                    .map(|n| format!("{n}-cert-v01@openssh.com"))
                    .collect(),
                other => vec![format!("{}-cert-v01@openssh.com", other.as_str())],
            };
            !names.iter().any(|n| allowed.contains(&n.as_str()))
        })
        .map(|p| p.display().to_string())
        .collect()
}

/// Replaces the marked block of `text` with `block` (appended when
/// absent). A block with no end is refused: everything after it would be
/// lost.
fn with_block(text: &str, block: &str) -> Result<String, String> {
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
    if inside {
        return Err(format!(
            "it has \"{BEGIN}\" with no \"{END}\" after it: remove the broken block by hand"
        ));
    }
    out.push_str(&format!("{BEGIN}\n{block}{END}\n"));
    Ok(out)
}

const TOP_BEGIN: &str =
    "# BEGIN hostkeyctl enrolment: read first, so the cluster is checked strictly (hostkeyctl enroll)";
const TOP_END: &str = "# END hostkeyctl enrolment";

/// `ssh_config` with a marked `Include` of `drop_in` at its top, unless a
/// line above its first `Host` or `Match` already includes
/// `ssh_config.d/*.conf` (Debian's and Ubuntu's file). ParallelCluster's
/// cookbook writes an `ssh_config` with no `Include` and a `Match exec`
/// that turns checking off for every VPC address, and OpenSSH keeps the
/// first value it reads: the drop-in must come before it.
fn with_include(text: &str, drop_in: &Path) -> Result<String, String> {
    let mut rest = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line == TOP_BEGIN {
            inside = true;
        } else if line == TOP_END && inside {
            inside = false;
        } else if !inside {
            rest.push_str(line);
            rest.push('\n');
        }
    }
    if inside {
        return Err(format!(
            "it has \"{TOP_BEGIN}\" with no \"{TOP_END}\" after it: remove the broken block by hand"
        ));
    }
    let includes_first = rest
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .take_while(|l| {
            let word = l.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
            word != "host" && word != "match"
        })
        .any(|l| l.to_ascii_lowercase().starts_with("include") && l.contains("ssh_config.d/*.conf"));
    if includes_first {
        return Ok(rest);
    }
    Ok(format!("{TOP_BEGIN}\nInclude {}\n{TOP_END}\n{rest}", drop_in.display()))
}

/// This node's client trusts `ca_line` for `patterns`, strictly, except
/// the `revoked` keys: the `@cert-authority` and `@revoked` block, the
/// drop-in, and the drop-in read before
/// anything in `ssh_config` that could turn checking off. The CA is
/// written as its key alone (a comment could carry a line of its own);
/// every file is worked out before any is written.
pub fn configure_client(
    client_dir: &Path,
    ca_line: &str,
    revoked: &[String],
    patterns: &[HostPattern],
    route: Option<&LoginRoute>,
) -> Result<(), NodeError> {
    let host_patterns: Vec<&str> = patterns.iter().map(HostPattern::as_str).collect();
    if host_patterns.is_empty() {
        return Ok(());
    }
    // known_hosts names a host on another port `[name]:port`.
    let mut patterns: Vec<String> = host_patterns.iter().map(|p| (*p).to_owned()).collect();
    if let Some(route) = route {
        patterns.extend(route.known_hosts_patterns());
    }
    let ca = ssh_key::PublicKey::from_openssh(ca_line.trim())
        .and_then(|k| ssh_key::PublicKey::from(k.key_data().clone()).to_openssh())
        .map_err(|e| NodeError::Answer(format!("the CA is not a public key: {e}")))?;
    crate::fsutil::create_dir_all(client_dir, 0o755).map_err(|e| NodeError::Write {
        path: client_dir.to_path_buf(),
        reason: e.to_string(),
    })?;
    let broken = |path: &Path, why: String| NodeError::Write {
        path: path.to_path_buf(),
        reason: why,
    };
    let known = client_dir.join("ssh_known_hosts");
    let mut block = format!("@cert-authority {} {ca}\n", patterns.join(","));
    for line in revoked {
        // Revoked instances' keys: refused even with a valid certificate.
        let key = ssh_key::PublicKey::from_openssh(line.trim())
            .and_then(|k| ssh_key::PublicKey::from(k.key_data().clone()).to_openssh())
            .map_err(|e| NodeError::Answer(format!("a revoked key is not a public key: {e}")))?;
        block.push_str(&format!("@revoked {} {key}\n", patterns.join(",")));
    }
    let known_text =
        with_block(&std::fs::read_to_string(&known).unwrap_or_default(), &block).map_err(|why| broken(&known, why))?;
    let conf_dir = client_dir.join("ssh_config.d");
    let drop_in = conf_dir.join(CLIENT_DROP_IN);
    let main = client_dir.join("ssh_config");
    let main_text = std::fs::read_to_string(&main).unwrap_or_default();
    let updated = with_include(&main_text, &drop_in).map_err(|why| broken(&main, why))?;
    write(&known, &known_text)?;
    crate::fsutil::create_dir_all(&conf_dir, 0o755).map_err(|e| NodeError::Write {
        path: conf_dir.clone(),
        reason: e.to_string(),
    })?;
    let strict = format!(
        "    StrictHostKeyChecking yes\n    UpdateHostKeys no\n    GlobalKnownHostsFile {}\n",
        known.display()
    );
    let mut text = String::from("# hostkeyctl enroll: the cluster's nodes are checked against its CA, strictly\n");
    if let Some(route) = route {
        let hosts: Vec<&str> = route.hosts.iter().map(HostPattern::as_str).collect();
        text.push_str(&format!(
            "# The login nodes serve the cluster on a listener of their own (the load balancer's port serves the canonical set)\nHost {}\n    Port {}\n{strict}",
            hosts.join(" "),
            route.port
        ));
    }
    text.push_str(&format!("Host {}\n{strict}", host_patterns.join(" ")));
    write(&drop_in, &text)?;
    if updated != main_text {
        write(&main, &updated)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{HostPattern, is_pattern, unoffered, with_block, with_include};
    use crate::keyset::{HostKey, KeyAlgorithm};
    use std::path::Path;

    #[test]
    fn a_pin_without_the_certificates_algorithm_is_found_before_the_reload() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for a in [KeyAlgorithm::Ed25519, KeyAlgorithm::Rsa] {
            let ca = crate::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
            let key = HostKey::generate(a, crate::keyset::MIN_RSA_BITS)
                .unwrap()
                .private_key()
                .public_key()
                .clone();
            let request = crate::certificate::SignRequest {
                principals: vec![crate::certificate::Principal::parse("n1").unwrap()],
                valid_after: 0,
                valid_before: u64::MAX,
                serial: 1,
                key_id: "t".to_owned(),
            };
            let (_, cert) = crate::certificate::sign_keys(&ca, &[key], &request).unwrap().remove(0);
            let path = dir.path().join(format!("{}-cert.pub", a.short_name()));
            std::fs::write(&path, crate::certificate::certificate_line(&cert)).unwrap();
            files.push(path);
        }
        let names = |v: Vec<String>| {
            v.iter()
                .map(|p| p.rsplit('/').next().unwrap().to_owned())
                .collect::<Vec<_>>()
        };
        // A pin of plain algorithms alone (a hardened sshd_config, say).
        let plain = "ssh-ed25519,ecdsa-sha2-nistp256,rsa-sha2-512,rsa-sha2-256";
        assert_eq!(names(unoffered(plain, &files)), ["ed25519-cert.pub", "rsa-cert.pub"]);
        let pinned = format!("ssh-ed25519-cert-v01@openssh.com,rsa-sha2-256-cert-v01@openssh.com,{plain}");
        assert!(unoffered(&pinned, &files).is_empty());
        let half = format!("ssh-ed25519-cert-v01@openssh.com,{plain}");
        assert_eq!(names(unoffered(&half, &files)), ["rsa-cert.pub"]);
    }

    #[test]
    fn the_drop_in_is_included_before_any_host_or_match_once() {
        let drop_in = Path::new("/etc/ssh/ssh_config.d/00-hostkeyctl-cluster.conf");
        // Debian and Ubuntu: the directory is included at the top already.
        let debian = "Include /etc/ssh/ssh_config.d/*.conf\n\nHost *\n    SendEnv LANG LC_*\n";
        assert_eq!(with_include(debian, drop_in).unwrap(), debian);
        // ParallelCluster's cookbook: no Include, a Match that turns checking off.
        let pcluster = "Host *\n  UseRoaming no\nMatch exec \"ssh_target_checker.sh %h\"\n  StrictHostKeyChecking no\n";
        let once = with_include(pcluster, drop_in).unwrap();
        assert!(
            once.starts_with("# BEGIN hostkeyctl enrolment") && once.ends_with(pcluster),
            "{once}"
        );
        assert!(once.contains("\nInclude /etc/ssh/ssh_config.d/00-hostkeyctl-cluster.conf\n"));
        assert_eq!(
            with_include(&once, drop_in).unwrap(),
            once,
            "a second enroll adds nothing"
        );
        // An Include below a Host line is read too late.
        let late = "Host *\n  StrictHostKeyChecking no\nInclude /etc/ssh/ssh_config.d/*.conf\n";
        assert!(with_include(late, drop_in).unwrap().starts_with("# BEGIN"));
        // A block with no end: refused, nothing after it is lost.
        let cut = once.replace("# END hostkeyctl enrolment\n", "");
        assert!(with_include(&cut, drop_in).is_err());
    }

    #[test]
    fn the_block_is_replaced_and_every_other_line_kept() {
        let once = with_block("node-a ssh-ed25519 AAAA\n", "@cert-authority x ssh-ed25519 CA1\n").unwrap();
        let twice = with_block(&once, "@cert-authority x ssh-ed25519 CA2\n").unwrap();
        assert!(twice.starts_with("node-a ssh-ed25519 AAAA\n"), "{twice}");
        assert!(twice.contains("CA2") && !twice.contains("CA1"), "{twice}");
        assert_eq!(twice.matches("BEGIN hostkeyctl").count(), 1);
        let cut = twice.replace("# END hostkeyctl enrolment\n", "");
        assert!(with_block(&format!("{cut}node-b ssh-ed25519 BBBB\n"), "x\n").is_err());
    }

    #[test]
    fn only_host_patterns_reach_known_hosts_and_ssh_config() {
        for good in [
            "*.ec2.internal",
            "ip-10-1-*",
            "10.1.*",
            "node-?",
            "fe80::1",
            "!10.1.17.*",
        ] {
            assert!(is_pattern(good), "{good}");
        }
        for bad in [
            "",
            "*",
            "*.*",
            "!",
            "!!a",
            "10.1.0.0/16",
            "a b",
            "a,b",
            "a\nHost *",
            "x\"",
            "a#b",
        ] {
            assert!(!is_pattern(bad), "{bad:?}");
            assert!(bad.parse::<HostPattern>().is_err(), "{bad:?}");
        }
    }
}
