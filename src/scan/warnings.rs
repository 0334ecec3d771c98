//! What an OpenSSH client prints about a server before the user's session,
//! and from which client release, judged from what the server sent before
//! the key exchange ([`Hello`]: its banner and first KEXINIT) and the keys
//! it served. No extra connection: the audit reads what its handshakes
//! already heard (docs/clients.md, "Messages clients print").
//!
//! Sources, OpenSSH's release notes (<https://www.openssh.com/releasenotes.html>):
//! 10.1 warns on a key exchange that is not post-quantum (`WarnWeakCrypto`);
//! 9.9 adds `mlkem768x25519-sha256`; 8.5 adds
//! `sntrup761x25519-sha512@openssh.com` (9.0 makes it the default, 9.9
//! adds the plain name); 10.0 removes DSA (7.0 disabled it); 8.8 disables
//! `ssh-rsa` (SHA-1) signatures; 9.1 adds `RequiredRSASize` (1024); 8.5
//! turns `CheckHostIP` off by default.

use std::fmt;

use serde::Serialize;

use super::Hello;

/// The post-quantum hybrid key exchanges, in OpenSSH's preference order.
/// A 10.1 or later client warns on a connection that uses none of them.
pub const POST_QUANTUM_KEX: [&str; 3] = [
    "mlkem768x25519-sha256",
    "sntrup761x25519-sha512",
    "sntrup761x25519-sha512@openssh.com",
];

/// The classical exchange every post-quantum hybrid above also runs: a
/// configuration that allows it allows what the hybrids add to it.
pub const X25519_KEX: [&str; 2] = ["curve25519-sha256", "curve25519-sha256@libssh.org"];

/// Whether `name` is a post-quantum hybrid key exchange.
pub fn is_post_quantum(name: &str) -> bool {
    POST_QUANTUM_KEX.contains(&name)
}

/// An OpenSSH client release, `MAJOR.MINOR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ClientVersion(pub u32, pub u32);

impl ClientVersion {
    /// The newest OpenSSH release this build knows (Debian unstable's
    /// `openssh-client` 1:10.6p1-1, the bed's newest client): what the
    /// audit judges against unless told otherwise.
    pub const NEWEST: ClientVersion = ClientVersion(10, 6);
}

impl fmt::Display for ClientVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

impl std::str::FromStr for ClientVersion {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not an OpenSSH release: give MAJOR.MINOR, e.g. 10.1 or 9.6");
        let (major, minor) = s.trim().split_once('.').ok_or_else(bad)?;
        let major: u32 = major.parse().map_err(|_| bad())?;
        let digits: String = minor.chars().take_while(char::is_ascii_digit).collect();
        let minor: u32 = digits.parse().map_err(|_| bad())?;
        if !(1..=99).contains(&major) {
            return Err(bad());
        }
        Ok(ClientVersion(major, minor))
    }
}

/// Which message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum MessageCode {
    /// The server offers no post-quantum key exchange.
    NoPostQuantumKex,
    /// The server's only host key algorithm is DSA (`ssh-dss`).
    DsaOnly,
    /// The server signs only with SHA-1 RSA (`ssh-rsa`).
    Sha1Only,
    /// An RSA host key shorter than clients require.
    SmallRsa,
    /// An address users reach serves another key than the name does.
    CheckHostIp,
}

impl MessageCode {
    /// The name in the JSON and the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageCode::NoPostQuantumKex => "no_post_quantum_kex",
            MessageCode::DsaOnly => "dsa_only",
            MessageCode::Sha1Only => "sha1_only",
            MessageCode::SmallRsa => "small_rsa",
            MessageCode::CheckHostIp => "check_host_ip",
        }
    }
}

/// One message clients print about a server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClientMessage {
    /// Which message.
    pub code: MessageCode,
    /// What the client prints (the first line).
    pub text: String,
    /// The clients that print it.
    pub clients: String,
    /// Whether the client release judged against prints it with its
    /// default settings (what makes the audit's exit status).
    pub certain: bool,
    /// Accepted by the site (`--accept-message`): reported, not counted.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub accepted: bool,
    /// What fixes it.
    pub fix: String,
}

/// The messages a client of `client` release prints about the server that
/// sent `hello`, from its KEXINIT alone.
pub fn from_hello(hello: &Hello, client: ClientVersion) -> Vec<ClientMessage> {
    let mut out = Vec::new();
    if !hello.kex_algorithms.is_empty() && !hello.kex_algorithms.iter().any(|k| is_post_quantum(k)) {
        out.push(ClientMessage {
            code: MessageCode::NoPostQuantumKex,
            text: "WARNING: connection is not using a post-quantum key exchange algorithm.".to_owned(),
            clients: "OpenSSH 10.1 and later (WarnWeakCrypto yes, the default)".to_owned(),
            certain: client >= ClientVersion(10, 1),
            accepted: false,
            fix: post_quantum_fix(hello),
        });
    }
    let algorithms: Vec<&str> = hello.host_key_algorithms.iter().map(String::as_str).collect();
    let usable = |a: &&str| {
        !matches!(*a, "ssh-dss" | "ssh-rsa") && !a.starts_with("ssh-dss-cert") && !a.starts_with("ssh-rsa-cert")
    };
    if !algorithms.is_empty() && !algorithms.iter().any(usable) {
        let dsa_only = !algorithms.iter().any(|a| a.starts_with("ssh-rsa"));
        out.push(match dsa_only {
            true => ClientMessage {
                code: MessageCode::DsaOnly,
                text: "Unable to negotiate: no matching host key type found. Their offer: ssh-dss".to_owned(),
                clients: "OpenSSH 7.0 and later (10.0 removed DSA: no option brings it back)".to_owned(),
                certain: client >= ClientVersion(7, 0),
                accepted: false,
                fix: "give the node an Ed25519, ECDSA or RSA host key: hostkeyctl install serves the set's".to_owned(),
            },
            false => ClientMessage {
                code: MessageCode::Sha1Only,
                text: "Unable to negotiate: no matching host key type found. Their offer: ssh-rsa".to_owned(),
                clients: "OpenSSH 8.8 and later (ssh-rsa SHA-1 signatures off by default)".to_owned(),
                certain: client >= ClientVersion(8, 8),
                accepted: false,
                fix: "let sshd sign with rsa-sha2-256/512 (OpenSSH 7.2 and later) or serve an Ed25519 key: hostkeyctl install pins HostKeyAlgorithms to the set's".to_owned(),
            },
        });
    }
    out
}

/// The message for an RSA host key of `bits`, if any.
pub fn from_rsa_bits(bits: usize, client: ClientVersion) -> Option<ClientMessage> {
    let fix = "rotate to a set whose RSA key has 3072 bits (hostkeyctl's default): hostkeyctl rotate".to_owned();
    match bits {
        0..1024 => Some(ClientMessage {
            code: MessageCode::SmallRsa,
            text: format!("Bad server host key: Invalid key length ({bits}-bit RSA)"),
            clients: "every OpenSSH release since 7.0 (9.1 and later: RequiredRSASize 1024)".to_owned(),
            certain: client >= ClientVersion(7, 0),
            accepted: false,
            fix,
        }),
        1024..2048 => Some(ClientMessage {
            code: MessageCode::SmallRsa,
            text: format!("Bad server host key: Invalid key length ({bits}-bit RSA)"),
            clients: "clients with RequiredRSASize 2048: RHEL 9, Amazon Linux 2023 and Fedora under their DEFAULT crypto policy"
                .to_owned(),
            certain: false,
            accepted: false,
            fix,
        }),
        _ => None,
    }
}

/// The message for an address that serves `served` under a name whose
/// key of that type is `known` (CheckHostIP).
pub fn check_host_ip(key_type: &str, name: &str, address: &str, client: ClientVersion) -> ClientMessage {
    ClientMessage {
        code: MessageCode::CheckHostIp,
        text: format!(
            "Warning: the {key_type} host key for '{name}' differs from the key for the IP address '{address}'"
        ),
        clients: "OpenSSH before 8.5, and later ones with CheckHostIP yes".to_owned(),
        certain: client < ClientVersion(8, 5),
        accepted: false,
        fix: format!(
            "make {address} serve the set (hostkeyctl audit --endpoint {address}), or take it out of the name's records"
        ),
    }
}

/// What brings a post-quantum exchange to the server of `hello`: its own
/// configuration (OpenSSH 8.5 and later hold one), or an upgrade.
fn post_quantum_fix(hello: &Hello) -> String {
    match hello.openssh() {
        Some(v) if v >= (8, 5) => {
            "its sshd has one that its configuration leaves out: hostkeyctl install adds it, unless the node runs in FIPS mode, its list forbids X25519 or sets KexAlgorithms first (install's kex says which; docs/clients.md, \"Messages clients print\")"
                .to_owned()
        }
        _ => format!("upgrade sshd: {}", upgrade(&hello.banner)),
    }
}

/// The release that brings a post-quantum key exchange to a server that
/// has none, from its banner (or an OS release's `ID` and `VERSION_ID`
/// given as `ID VERSION_ID`).
pub fn upgrade(banner: &str) -> String {
    let b = banner.to_ascii_lowercase();
    let named = if ["deb9", "deb10", "deb11", "debian 11"].iter().any(|d| b.contains(d)) {
        Some("Debian 12 (OpenSSH 9.2)")
    } else if b.contains("ubuntu") && (b.contains("_8.2") || b.contains("ubuntu 20.04")) {
        Some("Ubuntu 22.04 (OpenSSH 8.9)")
    } else if b.contains("_7.4") || b.contains("amzn 2") {
        Some("Amazon Linux 2023 (OpenSSH 8.7, then hostkeyctl install for its crypto policy)")
    } else if b.contains("_8.0") || b.contains("rhel 8") || b.contains("rocky 8") {
        Some("RHEL 9 (OpenSSH 8.7, then hostkeyctl install for its crypto policy)")
    } else {
        None
    };
    match named {
        Some(release) => format!("{release}, or any OpenSSH 9.9 or later (ML-KEM)"),
        None => "OpenSSH 8.5 or later (9.9 or later for ML-KEM)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(banner: &str, kex: &str, host_keys: &str) -> Hello {
        let list = |s: &str| s.split(',').filter(|a| !a.is_empty()).map(str::to_owned).collect();
        Hello {
            banner: banner.to_owned(),
            host_key_algorithms: list(host_keys),
            kex_algorithms: list(kex),
        }
    }

    #[test]
    fn no_post_quantum_exchange_warns_from_10_1_with_the_fix_its_release_allows() {
        let policy = hello(
            "SSH-2.0-OpenSSH_8.7",
            "curve25519-sha256,ecdh-sha2-nistp256",
            "ssh-ed25519",
        );
        let found = from_hello(&policy, ClientVersion::NEWEST);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].code, MessageCode::NoPostQuantumKex);
        assert!(found[0].certain);
        assert!(found[0].fix.contains("hostkeyctl install adds it"), "{}", found[0].fix);
        assert!(!from_hello(&policy, ClientVersion(10, 0))[0].certain);
        let old = hello(
            "SSH-2.0-OpenSSH_8.4p1 Debian-5+deb11u3",
            "curve25519-sha256",
            "ssh-ed25519",
        );
        assert!(from_hello(&old, ClientVersion::NEWEST)[0].fix.contains("Debian 12"));
        for kex in POST_QUANTUM_KEX {
            let pq = hello(
                "SSH-2.0-OpenSSH_9.2p1",
                &format!("curve25519-sha256,{kex}"),
                "ssh-ed25519",
            );
            assert!(from_hello(&pq, ClientVersion::NEWEST).is_empty(), "{kex}");
        }
    }

    #[test]
    fn dsa_only_and_sha1_only_servers_are_refused_and_others_are_not() {
        let dsa = hello("SSH-2.0-OpenSSH_9.2p1", "sntrup761x25519-sha512@openssh.com", "ssh-dss");
        assert_eq!(from_hello(&dsa, ClientVersion::NEWEST)[0].code, MessageCode::DsaOnly);
        let sha1 = hello(
            "SSH-2.0-OpenSSH_9.2p1",
            "sntrup761x25519-sha512@openssh.com",
            "ssh-rsa,ssh-dss",
        );
        let found = from_hello(&sha1, ClientVersion::NEWEST);
        assert_eq!(found[0].code, MessageCode::Sha1Only);
        assert!(found[0].certain);
        assert!(!from_hello(&sha1, ClientVersion(8, 7))[0].certain);
        let fine = hello(
            "SSH-2.0-OpenSSH_9.2p1",
            "sntrup761x25519-sha512@openssh.com",
            "ssh-rsa,rsa-sha2-512",
        );
        assert!(from_hello(&fine, ClientVersion::NEWEST).is_empty());
    }

    #[test]
    fn rsa_keys_under_1024_bits_are_refused_and_under_2048_by_strict_policies() {
        assert!(from_rsa_bits(768, ClientVersion::NEWEST).is_some_and(|m| m.certain));
        assert!(from_rsa_bits(1024, ClientVersion::NEWEST).is_some_and(|m| !m.certain));
        assert!(from_rsa_bits(2048, ClientVersion::NEWEST).is_none());
        assert!(from_rsa_bits(3072, ClientVersion::NEWEST).is_none());
    }

    #[test]
    fn client_versions_parse_strictly() {
        assert_eq!("10.1".parse(), Ok(ClientVersion(10, 1)));
        assert_eq!("9.6p1".parse(), Ok(ClientVersion(9, 6)));
        for bad in ["10", "x.1", "0.9", "10.", ""] {
            assert!(bad.parse::<ClientVersion>().is_err(), "{bad}");
        }
        assert!(check_host_ip("ED25519", "lb", "10.0.0.1", ClientVersion(8, 4)).certain);
        assert!(!check_host_ip("ED25519", "lb", "10.0.0.1", ClientVersion::NEWEST).certain);
    }
}
