//! Client-side trust in the canonical set: known_hosts lines, plain or
//! hashed (`ssh-keygen -H`'s format: `|1|base64(salt)|base64(HMAC-SHA1(salt,
//! host))`), DNS SSHFP records (`ssh-keygen -r`'s: SHA-1 and SHA-256 of the
//! key blob), `@cert-authority` lines, and the ssh_config block that makes
//! every name of the fleet check one identity. `hostkeyctl known-hosts`
//! prints what this module renders.

use base64ct::{Base64, Encoding};
use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use ssh_key::PublicKey;

use crate::document::SecretDocument;
use crate::ids::{SecretId, VersionId};
use crate::keyset::KeySet;
use crate::store::{SecretStore, StoreError, VersionSelector};

/// The names clients reach the fleet by, and its port: checked where they
/// enter, since each becomes a pattern in a client's known_hosts.
#[derive(Debug, Clone)]
pub struct Hosts {
    names: Vec<String>,
    port: u16,
}

/// Why [`Hosts::parse`] refused the names.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// Whitespace or a comma would split the pattern in known_hosts.
    #[error(
        "{0:?} is not a host name: a known_hosts pattern has no whitespace or commas; give each name its own --host"
    )]
    NotAHost(String),
    #[error("--host needs at least one name")]
    Empty,
}

impl Hosts {
    /// Trims each name and drops empty ones; refuses names with whitespace
    /// or commas, and an empty list.
    pub fn parse(names: &[String], port: u16) -> Result<Self, HostsError> {
        let names: Vec<String> = names
            .iter()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .collect();
        if let Some(bad) = names
            .iter()
            .find(|h| h.contains(char::is_whitespace) || h.contains(','))
        {
            return Err(HostsError::NotAHost(bad.clone()));
        }
        if names.is_empty() {
            return Err(HostsError::Empty);
        }
        Ok(Self { names, port })
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Each name's known_hosts pattern (`[name]:port` unless port 22).
    pub fn patterns(&self) -> Vec<String> {
        self.names.iter().map(|h| host_pattern(h, self.port)).collect()
    }
}

/// What [`lines`] renders for each key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One line per key with every pattern, comma-separated.
    Plain,
    /// One line per key and pattern, each with its own random salt.
    Hashed,
    /// Two SSHFP records per key and name (the port plays no part in DNS).
    Sshfp,
}

/// The lines for every key of `keys`, newline-terminated.
pub fn lines(keys: &KeySet, hosts: &Hosts, format: Format) -> String {
    let patterns = hosts.patterns();
    let mut out = String::new();
    for key in keys.keys().map(|k| k.public_key()) {
        match format {
            Format::Sshfp => {
                for host in hosts.names() {
                    for record in sshfp(host, key) {
                        out.push_str(&record);
                        out.push('\n');
                    }
                }
            }
            Format::Hashed => {
                for pattern in &patterns {
                    let salt: [u8; 20] = rand::random();
                    out.push_str(&format!("{} {}\n", hashed_host(pattern, &salt), key_part(key)));
                }
            }
            Format::Plain => out.push_str(&format!("{} {}\n", patterns.join(","), key_part(key))),
        }
    }
    out
}

/// The host pattern for a name and port (`[name]:port` unless 22).
pub fn host_pattern(name: &str, port: u16) -> String {
    if port == 22 {
        name.to_owned()
    } else {
        format!("[{name}]:{port}")
    }
}

/// `ssh-keygen -H`'s hashed form of a host pattern, with the given salt.
pub fn hashed_host(pattern: &str, salt: &[u8; 20]) -> String {
    // HMAC accepts keys of any length; new_from_slice cannot fail here.
    let mut mac = match <Hmac<Sha1> as KeyInit>::new_from_slice(salt) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(pattern.as_bytes());
    let digest = mac.finalize().into_bytes();
    format!("|1|{}|{}", Base64::encode_string(salt), Base64::encode_string(&digest))
}

/// The key part of a known_hosts line: type and base64, no comment.
pub fn key_part(key: &PublicKey) -> String {
    let line = crate::keyset::public_line(key);
    line.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

/// `ssh-keygen -r`'s SSHFP records for one key.
pub fn sshfp(name: &str, key: &PublicKey) -> Vec<String> {
    let algorithm = match key.algorithm() {
        ssh_key::Algorithm::Rsa { .. } => 1,
        ssh_key::Algorithm::Dsa => 2,
        ssh_key::Algorithm::Ecdsa { .. } => 3,
        ssh_key::Algorithm::Ed25519 => 4,
        _ => return Vec::new(),
    };
    let Ok(blob) = key.to_bytes() else { return Vec::new() };
    let sha1 = Sha1::digest(&blob);
    let sha256 = Sha256::digest(&blob);
    vec![
        format!("{name} IN SSHFP {algorithm} 1 {}", hex::encode(sha1)),
        format!("{name} IN SSHFP {algorithm} 2 {}", hex::encode(sha256)),
    ]
}

/// One `@cert-authority` line per CA that signed the set's certificates.
pub fn cert_authority_lines(document: &SecretDocument, patterns: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for cert in document.certificates.values() {
        let ca = PublicKey::from(cert.signature_key().clone());
        let line = format!("@cert-authority {patterns} {}\n", key_part(&ca));
        if !out.contains(&line) {
            out.push(line);
        }
    }
    out
}

/// Why [`cert_authorities`] printed nothing.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The set has no certificates and no CA was named: nothing to trust.
    #[error(
        "version {version} of {secret} carries no certificates, so there is no CA to trust; sign it first (`hostkeyctl sign`), or name the CA with --ca-secret-id"
    )]
    NoCertificates { secret: SecretId, version: VersionId },
}

/// Where [`cert_authorities`] finds the CAs to trust.
pub struct CaSources<'a> {
    /// The key set whose certificates name their CAs, and the version asked
    /// for; `None` selects AWSCURRENT and, during a rotation, AWSPENDING too.
    pub secret: Option<(&'a SecretId, Option<VersionSelector>)>,
    /// CAs named by their secret, read with `GetSecretValue`.
    pub ca_secret_ids: &'a [SecretId],
}

/// A `@cert-authority` line per CA that signed the set's certificates
/// (AWSCURRENT and, during a rotation, AWSPENDING) and per named CA, each
/// once.
pub async fn cert_authorities(
    store: &impl SecretStore,
    sources: &CaSources<'_>,
    patterns: &str,
) -> Result<Vec<String>, TrustError> {
    let mut lines: Vec<String> = Vec::new();
    fn add(lines: &mut Vec<String>, new: Vec<String>) {
        for l in new {
            if !lines.contains(&l) {
                lines.push(l);
            }
        }
    }
    if let Some((secret_id, pin)) = &sources.secret {
        let selector = pin
            .clone()
            .unwrap_or_else(|| VersionSelector::Stage(crate::store::stage(crate::store::STAGE_CURRENT)));
        let version = store.get(secret_id, &selector).await?;
        add(&mut lines, cert_authority_lines(&version.document, patterns));
        if pin.is_none()
            && let Some(next) = crate::store::announced_next(store, secret_id, &version.version_id).await?
        {
            add(&mut lines, cert_authority_lines(&next.document, patterns));
        }
        if lines.is_empty() && sources.ca_secret_ids.is_empty() {
            return Err(TrustError::NoCertificates {
                secret: (*secret_id).clone(),
                version: version.version_id,
            });
        }
    }
    for ca_id in sources.ca_secret_ids {
        let ca = store.get_ca(ca_id).await?;
        add(
            &mut lines,
            vec![format!(
                "@cert-authority {patterns} {}\n",
                key_part(ca.key.public_key())
            )],
        );
    }
    Ok(lines)
}

/// The `Host` block of `--ssh-config`. Names are host names or addresses
/// only: ssh_config gives `*`, `?`, `!`, `#` and quotes meanings of their own.
pub fn ssh_config_text(hosts: &[String], nodes: &[String], port: u16) -> Result<String, String> {
    let plain = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
    };
    let mut names: Vec<&str> = hosts.iter().map(String::as_str).collect();
    names.extend(nodes.iter().map(|n| n.trim()).filter(|n| !n.is_empty()));
    if let Some(bad) = names.iter().find(|n| !plain(n)) {
        return Err(format!(
            "{bad:?} is not a host name or address; --ssh-config takes plain names (letters, digits, . - _ :)"
        ));
    }
    let Some(alias) = names.first() else {
        return Err("--host needs at least one name".to_owned());
    };
    let mut out = format!("# hostkeyctl: one host identity for {alias}; every name below checks it as {alias}\n");
    out.push_str(&format!("Host {}\n    HostKeyAlias {alias}\n", names.join(" ")));
    if port != 22 {
        out.push_str(&format!("    Port {port}\n"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{hashed_host, host_pattern};

    #[test]
    fn ssh_config_aliases_every_name_to_the_first_and_refuses_patterns() {
        let text = super::ssh_config_text(&["login.test".into()], &["n1".into(), "10.0.0.5".into()], 2222).unwrap();
        assert_eq!(
            text.lines().skip(1).collect::<Vec<_>>(),
            [
                "Host login.test n1 10.0.0.5",
                "    HostKeyAlias login.test",
                "    Port 2222"
            ]
        );
        for bad in ["*", "!n1", "a#b", "\"q\""] {
            assert!(
                super::ssh_config_text(&["login.test".into()], &[bad.into()], 22).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn patterns_and_hashes_have_openssh_shapes() {
        assert_eq!(host_pattern("login", 22), "login");
        assert_eq!(host_pattern("login", 2222), "[login]:2222");
        let h = hashed_host("login", &[7u8; 20]);
        assert!(h.starts_with("|1|BwcHBwcHBwcHBwcHBwcHBwcHBwc=|"), "{h}");
        assert_eq!(h.len(), "|1|".len() + 28 + 1 + 28);
    }
}
