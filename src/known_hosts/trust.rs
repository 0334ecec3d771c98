//! known_hosts lines (plain or hashed), `@cert-authority` lines, the CAs
//! that signed a set, and the ssh_config block.

use super::*;

use base64ct::{Base64, Encoding};
use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
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
    lines_of(keys.keys().map(|k| k.public_key()), hosts, format)
}

/// [`lines`] for public keys, in the order given.
pub fn lines_of<'a>(keys: impl Iterator<Item = &'a PublicKey>, hosts: &Hosts, format: Format) -> String {
    let patterns = hosts.patterns();
    let mut out = String::new();
    for key in keys {
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

/// The CAs that signed the set's certificates, each once.
pub fn signing_cas(document: &SecretDocument) -> Vec<PublicKey> {
    let mut out: Vec<PublicKey> = Vec::new();
    for cert in document.certificates.values() {
        let ca = PublicKey::from(cert.signature_key().clone());
        if !out.contains(&ca) {
            out.push(ca);
        }
    }
    out
}

/// One `@cert-authority` line per CA, for the patterns.
pub fn cert_authority_lines(cas: &[PublicKey], patterns: &str) -> Vec<String> {
    cas.iter()
        .map(|ca| format!("@cert-authority {patterns} {}\n", key_part(ca)))
        .collect()
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

impl crate::exit::ExitStatus for TrustError {
    /// The store's status; no certificates to trust is 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            TrustError::Store(e) => e.status(),
            TrustError::NoCertificates { .. } => crate::exit::Status::Usage,
        }
    }
}

/// Where [`cert_authorities`] finds the CAs to trust.
pub struct CaSources<'a> {
    /// The key set whose certificates name their CAs, and the version asked
    /// for; `None` selects AWSCURRENT and, during a rotation, AWSPENDING too.
    pub secret: Option<(&'a SecretId, Option<VersionSelector>)>,
    /// CAs named by their secret, read with `GetSecretValue`.
    pub ca_secret_ids: &'a [SecretId],
}

/// Every CA that signed the certificates of a set nodes may offer
/// (AWSCURRENT, an announced set, a set a promotion retired while it is
/// still offered) and every named CA, each once.
pub async fn cert_authorities(store: &impl SecretStore, sources: &CaSources<'_>) -> Result<Vec<PublicKey>, TrustError> {
    let mut cas: Vec<PublicKey> = Vec::new();
    fn add(cas: &mut Vec<PublicKey>, new: Vec<PublicKey>) {
        for ca in new {
            if !cas.contains(&ca) {
                cas.push(ca);
            }
        }
    }
    if let Some((secret_id, pin)) = &sources.secret {
        let selector = pin
            .clone()
            .unwrap_or_else(|| VersionSelector::Stage(crate::store::stage(crate::store::STAGE_CURRENT)));
        let version = store.get(secret_id, &selector).await?;
        let version_id = version.version_id.clone();
        add(&mut cas, signing_cas(&version.document));
        if pin.is_none() {
            // Every set nodes may offer: an announced one, and a set a
            // promotion retired that nodes not converged yet sign with.
            let servable = crate::store::servable_with(store, secret_id, version).await?;
            for other in servable.others() {
                add(&mut cas, signing_cas(&other.document));
            }
        }
        if cas.is_empty() && sources.ca_secret_ids.is_empty() {
            return Err(TrustError::NoCertificates {
                secret: (*secret_id).clone(),
                version: version_id,
            });
        }
    }
    for ca_id in sources.ca_secret_ids {
        let ca = store.get_ca(ca_id).await?;
        add(&mut cas, vec![ca.key.public_key().clone()]);
    }
    Ok(cas)
}

/// The `Host` block of `--ssh-config`: every name the cluster is reached
/// by checks the keys as the first --host name (`HostKeyAlias`), and ssh
/// learns an announced set (`UpdateHostKeys yes`: OpenSSH before 8.5, and
/// any ssh with its own `UserKnownHostsFile`, leave it off). Without the
/// alias, ssh skips the update whenever a served key is known under
/// another name too (`clientloop.c`, docs/clients.md). --host names are
/// plain names or addresses; --node names may be patterns with `*` and `?`
/// (a subnet's addresses, HyperPod's node names), never `*` alone, which
/// would give every host the cluster's identity.
pub fn ssh_config_text(hosts: &[String], nodes: &[String], port: u16) -> Result<String, String> {
    let plain = |n: &str, wild: bool| {
        !n.is_empty()
            && n.chars().any(|c| c.is_ascii_alphanumeric())
            && n.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':') || (wild && matches!(c, '*' | '?'))
            })
    };
    let nodes: Vec<&str> = nodes.iter().map(|n| n.trim()).filter(|n| !n.is_empty()).collect();
    if let Some(bad) = hosts.iter().find(|n| !plain(n, false)) {
        return Err(format!(
            "{bad:?} is not a host name or address; --host takes plain names (letters, digits, . - _ :)"
        ));
    }
    if let Some(bad) = nodes.iter().find(|n| !plain(n, true)) {
        return Err(format!(
            "{bad:?} is not a host name, address or pattern; --node takes names with letters, digits, . - _ : and the wildcards * ?, with at least one letter or digit"
        ));
    }
    let Some(alias) = hosts.first() else {
        return Err("--host needs at least one name".to_owned());
    };
    let mut names: Vec<&str> = hosts.iter().map(String::as_str).collect();
    names.extend(nodes);
    let mut out = format!(
        "# hostkeyctl: one host identity for {alias}; every name below checks it as {alias}\n\
         # and learns the next keys during a rotation (docs/clients.md)\n"
    );
    out.push_str(&format!(
        "Host {}\n    HostKeyAlias {alias}\n    UpdateHostKeys yes\n",
        names.join(" ")
    ));
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
            text.lines().skip(2).collect::<Vec<_>>(),
            [
                "Host login.test n1 10.0.0.5",
                "    HostKeyAlias login.test",
                "    UpdateHostKeys yes",
                "    Port 2222"
            ]
        );
        let subnet =
            super::ssh_config_text(&["login.test".into()], &["10.1.*".into(), "hp-login-?".into()], 22).unwrap();
        assert!(subnet.contains("Host login.test 10.1.* hp-login-?\n"), "{subnet}");
        assert!(
            super::ssh_config_text(&["login*".into()], &[], 22).is_err(),
            "a pattern as the alias"
        );
        for bad in ["*", "*.*", "!n1", "a#b", "\"q\""] {
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
