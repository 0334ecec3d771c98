//! The sshd double's reading of its config, as `sshd -T` reports it: the
//! first value of each setting wins, `Include` globs are read in order,
//! and a `Match` block ends what applies to every connection.

use std::path::{Path, PathBuf};

use crate::install::sshd::Effective;
use crate::install::sshd_config::include_matches;

/// OpenSSH 9.2's default `KexAlgorithms` (`sshd -T` with none set).
pub const OPENSSH_9_2_KEX: &str = "sntrup761x25519-sha512@openssh.com,curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,ecdh-sha2-nistp384,ecdh-sha2-nistp521,diffie-hellman-group-exchange-sha256,diffie-hellman-group16-sha512,diffie-hellman-group18-sha512,diffie-hellman-group14-sha256";

/// Reads `path` into `e`, following includes up to four deep.
pub(super) fn parse_file(ssh_dir: &Path, path: &Path, e: &mut Effective, depth: usize) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (keyword, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let rest = rest.trim();
        match keyword.to_ascii_lowercase().as_str() {
            "match" => break,
            "include" if depth < 4 => {
                for pattern in rest.split_whitespace() {
                    let full = if Path::new(pattern).is_absolute() {
                        PathBuf::from(pattern)
                    } else {
                        ssh_dir.join(pattern)
                    };
                    let (Some(dir), Some(name)) = (full.parent(), full.file_name()) else {
                        continue;
                    };
                    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
                        .map(|d| d.flatten().map(|f| f.path()).collect())
                        .unwrap_or_default();
                    files.sort();
                    for f in files {
                        let fname = f
                            .file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        if include_matches(&name.to_string_lossy(), &fname) {
                            parse_file(ssh_dir, &f, e, depth + 1);
                        }
                    }
                }
            }
            "hostkey" => e.host_keys.push(rest.to_owned()),
            "hostkeyalgorithms" if e.host_key_algorithms.is_none() => {
                e.host_key_algorithms = Some(rest.to_owned());
            }
            "listenaddress" => e.listen.push(rest.to_owned()),
            "pidfile" if e.pid_file.is_none() => e.pid_file = Some(rest.to_owned()),
            "hostcertificate" => e.host_certificates.push(rest.to_owned()),
            "versionaddendum" if e.version_addendum.is_none() => e.version_addendum = Some(rest.to_owned()),
            "kexalgorithms" if e.kex_algorithms.is_none() => e.kex_algorithms = Some(rest.to_owned()),
            _ => {}
        }
    }
}
