//! `HOST[:PORT]` addresses as users and configs write them: `host`,
//! `host:2222`, `10.0.0.5`, `[::1]:22`, and a bare IPv6 address (`::1`,
//! `fe80::1`), which has no port because its colons are its own.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::str::FromStr;

/// The SSH port, when an address names none.
pub const DEFAULT_PORT: u16 = 22;

/// A host (name or IP address) and a port.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostPort {
    host: String,
    port: u16,
}

/// Why a text is not `HOST[:PORT]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{shown} is not HOST[:PORT] ({why}); e.g. login.example.internal, 10.0.0.5:2222, [::1]:22 or ::1")]
pub struct HostPortError {
    shown: String,
    why: &'static str,
}

impl HostPort {
    /// An address from its parts.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        HostPort {
            host: host.into(),
            port,
        }
    }

    /// Parses `HOST[:PORT]`, with `DEFAULT_PORT` when no port is given.
    pub fn parse(text: &str) -> Result<Self, HostPortError> {
        let fail = |why| HostPortError {
            shown: crate::escape::quoted_prefix(text, 80),
            why,
        };
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or_else(|| fail("a [ without its ]"))?;
            inside
                .parse::<Ipv6Addr>()
                .map_err(|_| fail("the part in brackets is not an IPv6 address"))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| fail("text after ] that is not :PORT"))?,
                ),
            };
            (inside, port)
        } else if text.matches(':').count() >= 2 {
            text.parse::<Ipv6Addr>()
                .map_err(|_| fail("several colons but not an IPv6 address (write [ADDRESS]:PORT)"))?;
            (text, None)
        } else {
            match text.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (text, None),
            }
        };
        let port = match port {
            None => DEFAULT_PORT,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 && p.chars().all(|c| c.is_ascii_digit()) => n,
                _ => return Err(fail("the port is not a number from 1 to 65535")),
            },
        };
        let name_ok = !host.is_empty()
            && host.len() <= 253
            && !host.starts_with(['-', '.'])
            && host.chars().all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
        if host.parse::<IpAddr>().is_err() && !name_ok {
            return Err(fail("the host is neither an IP address nor a DNS name"));
        }
        Ok(HostPort {
            host: host.to_owned(),
            port,
        })
    }

    /// The host name or address, without brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for HostPort {
    type Err = HostPortError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        HostPort::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::HostPort;

    fn parts(text: &str) -> (String, u16) {
        let hp = HostPort::parse(text).unwrap();
        (hp.host().to_owned(), hp.port())
    }

    #[test]
    fn every_written_form_parses() {
        assert_eq!(parts("127.0.0.11:22"), ("127.0.0.11".into(), 22));
        assert_eq!(parts("login"), ("login".into(), 22));
        assert_eq!(
            parts("login.example.internal:2222"),
            ("login.example.internal".into(), 2222)
        );
        assert_eq!(parts("[::1]:2222"), ("::1".into(), 2222));
        assert_eq!(parts("[::1]"), ("::1".into(), 22));
        // Regression: a bare IPv6 address was split at its last colon
        // (fe80::1 became host "fe80:" and port 1).
        assert_eq!(parts("fe80::1"), ("fe80::1".into(), 22));
        assert_eq!(parts("::1"), ("::1".into(), 22));
    }

    #[test]
    fn display_brackets_ipv6() {
        assert_eq!(HostPort::parse("::1").unwrap().to_string(), "[::1]:22");
        assert_eq!(HostPort::parse("a:5").unwrap().to_string(), "a:5");
    }

    #[test]
    fn bad_addresses_are_refused_with_the_reason() {
        for bad in [
            "", "a:", "a:0", "a:99999", "a:-1", "[::1", "[::1]x", "[zz]:22", "a b", "1:2:3", "-x", "a;b:22", "a:+22",
        ] {
            let err = HostPort::parse(bad).unwrap_err().to_string();
            assert!(err.contains("is not HOST[:PORT]"), "{bad:?}: {err}");
        }
    }
}
