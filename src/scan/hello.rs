//! What an SSH server says before the key exchange, read from the bytes it
//! sent: the lines before its version (OpenSSH's `Not allowed at this
//! time` when PerSourcePenalties refuses the source), its version banner,
//! and the host key algorithms of its first KEXINIT, which sshd limits to
//! the types it holds keys (or certificates) for (RFC 4253 §4.2 and §7.1).

use std::collections::BTreeSet;

use super::ScanAlgorithm;

/// The most of a server's first bytes that is kept: its lines and first
/// KEXINIT are far shorter (OpenSSH's KEXINIT is about 1.1 KiB).
pub const CAPTURE_LIMIT: usize = 64 * 1024;

/// sshd's words when PerSourcePenalties refuses a source (`sshd.c`).
pub const PENALTY_REFUSAL: &str = "Not allowed at this time";

/// A server's version banner and the host key algorithms it offered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    /// The identification line, e.g. `SSH-2.0-OpenSSH_10.0p2 Debian-7`.
    pub banner: String,
    /// `server_host_key_algorithms` of its first KEXINIT, as listed.
    pub host_key_algorithms: Vec<String>,
    /// `kex_algorithms` of its first KEXINIT, as listed (without the
    /// `ext-info-s` and `kex-strict-s-v00@openssh.com` markers).
    pub kex_algorithms: Vec<String>,
}

impl Hello {
    /// The plain key types the server holds (RSA once, whatever
    /// signature algorithms it lists for it).
    pub fn key_types(&self) -> BTreeSet<ScanAlgorithm> {
        self.host_key_algorithms.iter().filter_map(|a| key_type(a)).collect()
    }

    /// The key types it holds a certificate for.
    pub fn certificate_types(&self) -> BTreeSet<ScanAlgorithm> {
        self.host_key_algorithms
            .iter()
            .filter_map(|a| a.strip_suffix("-cert-v01@openssh.com").and_then(key_type))
            .collect()
    }

    /// OpenSSH's release, `(major, minor)`, from the banner; `None` for
    /// other servers.
    pub fn openssh(&self) -> Option<(u32, u32)> {
        let software = self.banner.splitn(3, '-').nth(2)?;
        let version = software.split_whitespace().next()?.strip_prefix("OpenSSH_")?;
        let mut parts = version.split(|c: char| !c.is_ascii_digit());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next().and_then(|m| m.parse().ok()).unwrap_or(0);
        Some((major, minor))
    }

    /// The extra host key set the server's sshd loaded, as the word
    /// install adds to its banner ([`crate::keyset::KeySet::next_marker`]);
    /// `None` when it shows none.
    pub fn next_marker(&self) -> Option<&str> {
        self.banner
            .split_whitespace()
            .find(|w| w.starts_with(crate::keyset::NEXT_MARKER_PREFIX))
    }

    /// Whether the server may penalize unauthenticated connections:
    /// OpenSSH 9.8 and later, where PerSourcePenalties is on by default.
    pub fn may_penalize(&self) -> bool {
        self.openssh().is_some_and(|v| v >= (9, 8))
    }
}

/// What a server's first bytes were.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Greeting {
    /// Its banner and first KEXINIT.
    Hello(Hello),
    /// Lines and no banner, then the end: a refusal, in its words.
    Refused(String),
    /// Not (yet) a whole banner and KEXINIT.
    Incomplete,
}

/// Reads a server's first bytes. `closed`: the server ended the
/// connection after them (a refusal needs the end: sshd may send other
/// lines before its banner).
pub fn parse(bytes: &[u8], closed: bool) -> Greeting {
    let mut rest = bytes;
    let mut before = Vec::new();
    loop {
        let Some(end) = rest.iter().position(|b| *b == b'\n') else {
            if closed && !before.is_empty() {
                return Greeting::Refused(before.join(" "));
            }
            return Greeting::Incomplete;
        };
        let line = String::from_utf8_lossy(&rest[..end]).trim_end_matches('\r').to_owned();
        rest = &rest[end + 1..];
        if line.starts_with("SSH-") {
            return match kexinit_lists(rest) {
                Some((kex_algorithms, host_key_algorithms)) => Greeting::Hello(Hello {
                    banner: line,
                    host_key_algorithms,
                    kex_algorithms,
                }),
                None => Greeting::Incomplete,
            };
        }
        before.push(printable(&line));
        if before.len() > 64 {
            return Greeting::Refused(before.join(" "));
        }
    }
}

/// The text of a line a server sent, with anything unprintable replaced.
fn printable(line: &str) -> String {
    line.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(200)
        .collect()
}

/// `kex_algorithms` and `server_host_key_algorithms` of the first binary
/// packet, if it is a whole KEXINIT (before NEWKEYS packets are neither
/// encrypted nor MACed).
fn kexinit_lists(bytes: &[u8]) -> Option<(Vec<String>, Vec<String>)> {
    const KEXINIT: u8 = 20;
    let length = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let packet = bytes.get(4..4 + length)?;
    let padding = usize::from(*packet.first()?);
    let payload = packet.get(1..length.checked_sub(padding)?)?;
    if *payload.first()? != KEXINIT {
        return None;
    }
    // 16 bytes of cookie, then kex_algorithms and the host key algorithms.
    let mut at = 17;
    let mut lists = Vec::new();
    for _ in 0..2 {
        let len = u32::from_be_bytes(payload.get(at..at + 4)?.try_into().ok()?) as usize;
        let list = payload.get(at + 4..at + 4 + len)?;
        lists.push(std::str::from_utf8(list).ok()?.to_owned());
        at += 4 + len;
    }
    let names = |list: &str, keep: &dyn Fn(&str) -> bool| -> Vec<String> {
        list.split(',')
            .filter(|a| !a.is_empty() && keep(a))
            .map(str::to_owned)
            .collect()
    };
    let host_keys = names(&lists[1], &|_| true);
    // RFC 8308 §2.1 and OpenSSH's PROTOCOL (strict kex): markers, not
    // methods.
    let kex = names(&lists[0], &|a| {
        !a.starts_with("ext-info-") && !a.starts_with("kex-strict-")
    });
    Some((kex, host_keys))
}

/// The scan type of a plain host key algorithm name.
fn key_type(name: &str) -> Option<ScanAlgorithm> {
    Some(match name {
        "ssh-ed25519" => ScanAlgorithm::Ed25519,
        "ecdsa-sha2-nistp256" => ScanAlgorithm::EcdsaP256,
        "ecdsa-sha2-nistp384" => ScanAlgorithm::EcdsaP384,
        "ecdsa-sha2-nistp521" => ScanAlgorithm::EcdsaP521,
        "rsa-sha2-512" | "rsa-sha2-256" | "ssh-rsa" => ScanAlgorithm::Rsa,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's first bytes: banner, then one KEXINIT listing `host_keys`.
    pub fn server_bytes(before: &[&str], banner: &str, host_keys: &str) -> Vec<u8> {
        let mut payload = vec![20u8];
        payload.extend([7u8; 16]);
        for list in [
            "curve25519-sha256,mlkem768x25519-sha256,kex-strict-s-v00@openssh.com",
            host_keys,
            "aes128-ctr",
        ] {
            payload.extend((list.len() as u32).to_be_bytes());
            payload.extend(list.as_bytes());
        }
        let padding = 8 - (payload.len() + 5) % 8 + 4;
        let length = (1 + payload.len() + padding) as u32;
        let mut out = Vec::new();
        for line in before {
            out.extend(format!("{line}\r\n").as_bytes());
        }
        out.extend(format!("{banner}\r\n").as_bytes());
        out.extend(length.to_be_bytes());
        out.push(padding as u8);
        out.extend(payload);
        out.extend(vec![0u8; padding]);
        out
    }

    #[test]
    fn the_banner_and_the_held_key_types_come_from_the_first_kexinit() {
        let bytes = server_bytes(
            &["a line first"],
            "SSH-2.0-OpenSSH_10.0p2 Debian-7+deb13u4",
            "rsa-sha2-512,rsa-sha2-256,ecdsa-sha2-nistp256,ssh-ed25519,ssh-ed25519-cert-v01@openssh.com",
        );
        let Greeting::Hello(hello) = parse(&bytes, false) else {
            panic!("{:?}", parse(&bytes, false));
        };
        assert_eq!(hello.banner, "SSH-2.0-OpenSSH_10.0p2 Debian-7+deb13u4");
        assert_eq!(
            hello.key_types().into_iter().collect::<Vec<_>>(),
            [ScanAlgorithm::Ed25519, ScanAlgorithm::EcdsaP256, ScanAlgorithm::Rsa]
        );
        assert_eq!(
            hello.certificate_types().into_iter().collect::<Vec<_>>(),
            [ScanAlgorithm::Ed25519]
        );
        assert_eq!(hello.openssh(), Some((10, 0)));
        assert!(hello.may_penalize());
        assert_eq!(hello.kex_algorithms, ["curve25519-sha256", "mlkem768x25519-sha256"]);
        // Cut anywhere before the KEXINIT's end: not yet a hello.
        for cut in [10, 40, bytes.len() - 1] {
            assert_eq!(parse(&bytes[..cut], false), Greeting::Incomplete, "cut at {cut}");
        }
    }

    #[test]
    fn releases_before_9_8_and_other_servers_do_not_penalize() {
        for (banner, version, penalizes) in [
            ("SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u3", Some((9, 2)), false),
            ("SSH-2.0-OpenSSH_8.4p1 Debian-5+deb11u3", Some((8, 4)), false),
            ("SSH-2.0-OpenSSH_9.8", Some((9, 8)), true),
            ("SSH-2.0-OpenSSH_9.9p2 Ubuntu-1", Some((9, 9)), true),
            ("SSH-2.0-OpenSSH_10.2", Some((10, 2)), true),
            ("SSH-2.0-dropbear_2022.83", None, false),
            ("SSH-2.0-", None, false),
        ] {
            let hello = Hello {
                banner: banner.to_owned(),
                host_key_algorithms: vec![],
                kex_algorithms: vec![],
            };
            assert_eq!(
                (hello.openssh(), hello.may_penalize()),
                (version, penalizes),
                "{banner}"
            );
        }
    }

    #[test]
    fn lines_and_no_banner_then_the_end_is_a_refusal_in_the_servers_words() {
        assert_eq!(
            parse(b"Not allowed at this time\r\n", true),
            Greeting::Refused(PENALTY_REFUSAL.to_owned())
        );
        assert_eq!(parse(b"Not allowed at this time\r\n", false), Greeting::Incomplete);
        assert_eq!(parse(b"", true), Greeting::Incomplete);
        assert_eq!(
            parse(b"\x1b[31mred\r\n", true),
            Greeting::Refused("?[31mred".to_owned())
        );
        // Not a KEXINIT after the banner.
        let mut bytes = b"SSH-2.0-OpenSSH_9.2\r\n".to_vec();
        bytes.extend([0, 0, 0, 12, 4, 21, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(parse(&bytes, true), Greeting::Incomplete);
    }
}
