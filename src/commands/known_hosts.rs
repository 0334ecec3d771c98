//! `hostkeyctl known-hosts`: client-side files for the canonical set.
//!
//! Plain known_hosts lines, hashed ones (`ssh-keygen -H`'s format:
//! `|1|base64(salt)|base64(HMAC-SHA1(salt, host))`), or DNS SSHFP records
//! (`ssh-keygen -r`'s format: SHA-1 and SHA-256 of the key blob).

use base64ct::{Base64, Encoding};
use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use ssh_key::PublicKey;

use crate::aws;
use crate::cli::{GlobalArgs, KnownHostsArgs};
use crate::commands::store_failure;
use crate::exit::{Failure, Status};
use crate::store::{SecretStore, SecretsManagerStore, VersionSelector};

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

/// Runs `known-hosts`.
pub async fn run(args: &KnownHostsArgs, global: &GlobalArgs) -> Result<Status, Failure> {
    let hosts: Vec<String> = args
        .hosts
        .iter()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .collect();
    if let Some(bad) = hosts
        .iter()
        .find(|h| h.contains(char::is_whitespace) || h.contains(','))
    {
        return Err(Failure::usage(anyhow::anyhow!("{bad:?} is not a host name")));
    }
    if hosts.is_empty() {
        return Err(Failure::usage(anyhow::anyhow!("--host needs at least one name")));
    }
    if args.ssh_config {
        return print_ssh_config(&hosts, &args.nodes, args.port);
    }
    for ca_id in &args.ca_secret_ids {
        args.placement
            .key_set_prefix
            .check_ca(ca_id)
            .map_err(|e| Failure::usage(anyhow::anyhow!("{e}; nothing was read or printed")))?;
    }
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
    let store = SecretsManagerStore::new(&config);
    let patterns: Vec<String> = hosts.iter().map(|h| host_pattern(h, args.port)).collect();
    if args.cert_authority {
        return print_cert_authorities(args, &store, &patterns.join(",")).await;
    }
    let Some(secret_id) = &args.secret_id else {
        return Err(Failure::usage(anyhow::anyhow!(
            "--secret-id is required without --cert-authority"
        )));
    };
    let selector = VersionSelector::from_options(args.version_id.as_ref(), args.stage.as_ref());
    let version = store.get(secret_id, &selector).await.map_err(store_failure)?;
    let keys: Vec<&PublicKey> = version.document.keys.keys().map(|k| k.public_key()).collect();
    let mut out = String::new();
    for key in keys {
        if args.sshfp {
            for host in &hosts {
                for record in sshfp(host, key) {
                    out.push_str(&record);
                    out.push('\n');
                }
            }
        } else if args.hash {
            for pattern in &patterns {
                let salt: [u8; 20] = rand::random();
                out.push_str(&format!("{} {}\n", hashed_host(pattern, &salt), key_part(key)));
            }
        } else {
            out.push_str(&format!("{} {}\n", patterns.join(","), key_part(key)));
        }
    }
    print!("{out}");
    Ok(Status::Success)
}

/// `--cert-authority`: a line per CA that signed the set's certificates
/// (AWSCURRENT and, during a rotation, AWSPENDING) and per `--ca-secret-id`.
async fn print_cert_authorities(
    args: &KnownHostsArgs,
    store: &SecretsManagerStore,
    patterns: &str,
) -> Result<Status, Failure> {
    let mut lines: Vec<String> = Vec::new();
    fn add(lines: &mut Vec<String>, new: Vec<String>) {
        for l in new {
            if !lines.contains(&l) {
                lines.push(l);
            }
        }
    }
    if let Some(secret_id) = &args.secret_id {
        let explicit = args.version_id.is_some() || args.stage.is_some();
        let selector = VersionSelector::from_options(args.version_id.as_ref(), args.stage.as_ref());
        let version = store.get(secret_id, &selector).await.map_err(store_failure)?;
        add(&mut lines, cert_authority_lines(&version.document, patterns));
        if !explicit
            && let Some(next) = crate::store::announced_next(store, secret_id, &version.version_id)
                .await
                .map_err(store_failure)?
        {
            add(&mut lines, cert_authority_lines(&next.document, patterns));
        }
        if lines.is_empty() && args.ca_secret_ids.is_empty() {
            return Err(Failure::usage(anyhow::anyhow!(
                "version {} of {secret_id} carries no certificates, so there is no CA to trust; sign it first (`hostkeyctl sign`), or name the CA with --ca-secret-id",
                version.version_id
            )));
        }
    }
    for ca_id in &args.ca_secret_ids {
        let ca = store.get_ca(ca_id).await.map_err(store_failure)?;
        add(
            &mut lines,
            vec![format!(
                "@cert-authority {patterns} {}\n",
                key_part(ca.key.public_key())
            )],
        );
    }
    print!("{}", lines.concat());
    Ok(Status::Success)
}

/// One `@cert-authority` line per CA that signed the set's certificates.
pub fn cert_authority_lines(document: &crate::document::SecretDocument, patterns: &str) -> Vec<String> {
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

/// ssh_config blocks: every name checks the host key as `hosts[0]`.
fn print_ssh_config(hosts: &[String], nodes: &[String], port: u16) -> Result<Status, Failure> {
    let text = ssh_config_text(hosts, nodes, port).map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    print!("{text}");
    Ok(Status::Success)
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
