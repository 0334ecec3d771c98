//! The prober's seam ([`Prober`]) and what a handshake answers: the
//! algorithms asked for, what the server served, and why a probe failed.

use super::*;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::client::{self, Handler};
use russh::keys::PublicKeyOrCertificate;
use russh::{Preferred, kex};
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, PublicKey};

/// A host key algorithm the scanner can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum ScanAlgorithm {
    /// `ssh-ed25519`.
    #[serde(rename = "ssh-ed25519")]
    Ed25519,
    /// `ecdsa-sha2-nistp256`.
    #[serde(rename = "ecdsa-sha2-nistp256")]
    EcdsaP256,
    /// `ecdsa-sha2-nistp384`.
    #[serde(rename = "ecdsa-sha2-nistp384")]
    EcdsaP384,
    /// `ecdsa-sha2-nistp521`.
    #[serde(rename = "ecdsa-sha2-nistp521")]
    EcdsaP521,
    /// RSA keys, asked for as `rsa-sha2-512`/`rsa-sha2-256`.
    #[serde(rename = "ssh-rsa")]
    Rsa,
}

impl ScanAlgorithm {
    /// Every algorithm, so that a server serving an unexpected type is seen.
    pub const ALL: [ScanAlgorithm; 5] = [
        ScanAlgorithm::Ed25519,
        ScanAlgorithm::EcdsaP256,
        ScanAlgorithm::EcdsaP384,
        ScanAlgorithm::EcdsaP521,
        ScanAlgorithm::Rsa,
    ];

    /// The key type name, as in known_hosts.
    pub fn key_type(self) -> &'static str {
        match self {
            ScanAlgorithm::Ed25519 => "ssh-ed25519",
            ScanAlgorithm::EcdsaP256 => "ecdsa-sha2-nistp256",
            ScanAlgorithm::EcdsaP384 => "ecdsa-sha2-nistp384",
            ScanAlgorithm::EcdsaP521 => "ecdsa-sha2-nistp521",
            ScanAlgorithm::Rsa => "ssh-rsa",
        }
    }

    /// The scan algorithm for a managed key algorithm.
    pub fn for_managed(a: crate::keyset::KeyAlgorithm) -> Self {
        match a {
            crate::keyset::KeyAlgorithm::Ed25519 => ScanAlgorithm::Ed25519,
            crate::keyset::KeyAlgorithm::Ecdsa => ScanAlgorithm::EcdsaP256,
            crate::keyset::KeyAlgorithm::Rsa => ScanAlgorithm::Rsa,
        }
    }

    fn offered(self) -> Vec<Algorithm> {
        match self {
            ScanAlgorithm::Ed25519 => vec![Algorithm::Ed25519],
            ScanAlgorithm::EcdsaP256 => vec![Algorithm::Ecdsa {
                curve: EcdsaCurve::NistP256,
            }],
            ScanAlgorithm::EcdsaP384 => vec![Algorithm::Ecdsa {
                curve: EcdsaCurve::NistP384,
            }],
            ScanAlgorithm::EcdsaP521 => vec![Algorithm::Ecdsa {
                curve: EcdsaCurve::NistP521,
            }],
            ScanAlgorithm::Rsa => vec![
                Algorithm::Rsa {
                    hash: Some(HashAlg::Sha512),
                },
                Algorithm::Rsa {
                    hash: Some(HashAlg::Sha256),
                },
            ],
        }
    }
}

impl fmt::Display for ScanAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key_type())
    }
}

/// Why no key was seen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum ScanError {
    /// The server does not offer a host key of this type.
    #[error("the server offers no {0} host key")]
    NotOffered(String),
    /// TCP connection refused.
    #[error("connection refused")]
    Refused,
    /// No answer within the timeout.
    #[error("timed out after {0} ms")]
    Timeout(u64),
    /// The connection ended before the server showed its key (e.g. sshd's
    /// MaxStartups dropping it).
    #[error("connection dropped before the host key: {0}")]
    Dropped(String),
    /// The server refused the source before its banner: OpenSSH's
    /// PerSourcePenalties (9.8 and later) saying `Not allowed at this
    /// time`. Asking again only prolongs it.
    #[error(
        "refused by the server's PerSourcePenalties ({0:?}): put this host's (and the load balancer's) addresses in sshd's PerSourcePenaltyExemptList, or set `PerSourcePenalties noauth:0s`, or wait for the penalty to lapse (at most 600 s by default)"
    )]
    Penalized(String),
    /// Anything else (not SSH, protocol error, unreachable network).
    #[error("{0}")]
    Other(String),
}

impl ScanError {
    /// Whether retrying may help (drops and timeouts under load).
    pub fn is_transient(&self) -> bool {
        matches!(self, ScanError::Dropped(_) | ScanError::Timeout(_))
    }
}

/// What a server showed when asked for a certificate: the certificate, or
/// (a server with none for the type) the plain key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// A plain host key.
    Key(PublicKey),
    /// A certificate.
    Certificate(Box<ssh_key::Certificate>),
}

impl Served {
    /// The host key, certified or not.
    pub fn key(&self) -> PublicKey {
        match self {
            Served::Key(k) => k.clone(),
            Served::Certificate(c) => PublicKey::from(c.public_key().clone()),
        }
    }

    /// The certificate, if one was served.
    pub fn certificate(&self) -> Option<&ssh_key::Certificate> {
        match self {
            Served::Key(_) => None,
            Served::Certificate(c) => Some(c),
        }
    }
}

struct Capture {
    key: Arc<Mutex<Option<Served>>>,
}

impl Handler for Capture {
    type Error = russh::Error;

    async fn check_server_key(&mut self, server_key: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        let key = match server_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => Served::Key(key.clone()),
            PublicKeyOrCertificate::Certificate(cert) => Served::Certificate(Box::new(cert.clone())),
        };
        if let Ok(mut slot) = self.key.lock() {
            *slot = Some(key);
        }
        // Refusing the key ends the handshake: nothing more is needed.
        Ok(false)
    }
}

const CHEAP_KEX: &[kex::Name] = &[
    kex::CURVE25519,
    kex::CURVE25519_PRE_RFC_8731,
    kex::ECDH_SHA2_NISTP256,
    kex::DH_G14_SHA256,
    kex::DH_G16_SHA512,
    kex::EXTENSION_SUPPORT_AS_CLIENT,
    kex::EXTENSION_OPENSSH_STRICT_KEX_AS_CLIENT,
];

/// One handshake: what the server served for the type asked, and what it
/// said before the key exchange.
#[derive(Clone, Debug)]
pub struct Answer {
    /// The key or certificate served, or why none was seen.
    pub served: Result<Served, ScanError>,
    /// The server's banner and the host key algorithms it offered, when it
    /// got that far (also when it holds no key of the type asked).
    pub hello: Option<Hello>,
    /// Whether a TCP connection was made: what the server saw (and, from
    /// OpenSSH 9.8, what its PerSourcePenalties count).
    pub connected: bool,
}

impl Answer {
    /// No connection was made (or none is known: a scan task that
    /// failed): `error` says why.
    pub fn unreached(error: ScanError) -> Self {
        Answer {
            served: Err(error),
            hello: None,
            connected: false,
        }
    }
}

/// One handshake to make: with whom, for which type, for how long.
#[derive(Clone, Copy, Debug)]
pub struct Handshake<'a> {
    /// The server's host name or address.
    pub host: &'a str,
    /// Its port.
    pub port: u16,
    /// The host key type asked for.
    pub algorithm: ScanAlgorithm,
    /// How long the connection and the handshake may take.
    pub timeout: Duration,
    /// Ask for a certificate of the type first (`*-cert-v01@openssh.com`,
    /// never the SHA-1 `ssh-rsa-cert-v01`), and the plain key if the
    /// server has none.
    pub certificates: bool,
}

impl<'a> Handshake<'a> {
    /// A handshake for the plain key of `algorithm` at `host:port`.
    pub fn new(host: &'a str, port: u16, algorithm: ScanAlgorithm, timeout: Duration) -> Self {
        Handshake {
            host,
            port,
            algorithm,
            timeout,
            certificates: false,
        }
    }
}

/// One handshake scan: the host key an SSH server serves for an algorithm.
/// The real prober is [`SshProber`]; tests use doubles that answer from
/// in-memory nodes (feature `testing`).
pub trait Prober: Send + Sync + 'static {
    /// The handshake `to` asks for: what the server served and said.
    fn handshake(&self, to: Handshake<'_>) -> impl std::future::Future<Output = Answer> + Send;

    /// [`Prober::handshake`] asking for a certificate first: what was served.
    fn probe_certificate(
        &self,
        to: Handshake<'_>,
    ) -> impl std::future::Future<Output = Result<Served, ScanError>> + Send {
        async move {
            let to = Handshake {
                certificates: true,
                ..to
            };
            self.handshake(to).await.served
        }
    }

    /// Says that `host:port` spreads its connections over `backends`
    /// servers (a load balancer), for a prober that paces ([`pacing`]).
    fn spread(&self, _host: &str, _port: u16, _backends: usize) {}

    /// What `host:port` is owed, for a prober that paces and knows it to
    /// penalize.
    fn budget(&self, _host: &str, _port: u16) -> Option<pacing::Budget> {
        None
    }
}

impl<P: Prober> Prober for std::sync::Arc<P> {
    fn handshake(&self, to: Handshake<'_>) -> impl std::future::Future<Output = Answer> + Send {
        P::handshake(self, to)
    }

    fn spread(&self, host: &str, port: u16, backends: usize) {
        P::spread(self, host, port, backends);
    }

    fn budget(&self, host: &str, port: u16) -> Option<pacing::Budget> {
        P::budget(self, host, port)
    }
}

/// The real prober: an SSH handshake with russh, over a stream that keeps
/// the server's first bytes ([`hello`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct SshProber;

impl Prober for SshProber {
    async fn handshake(&self, to: Handshake<'_>) -> Answer {
        handshake(to).await
    }
}

/// Every type of `algorithms` asked of one server in as few connections
/// as it takes. sshd signs with one host key per connection before
/// authentication, so each type costs a connection; but its first KEXINIT
/// lists the types it holds. The first handshake (for `algorithms[0]`)
/// reads that list; only the types on it are asked for next, one after
/// another, and the others are [`ScanError::NotOffered`] without a
/// connection. A server that could not be asked at all (refused, timed
/// out, penalized) gives that answer for every type. `ask` makes one
/// handshake, with whatever retries and limits the caller keeps.
pub async fn scan_held<F, Fut>(
    algorithms: &[ScanAlgorithm],
    ask: F,
) -> BTreeMap<ScanAlgorithm, Result<Served, ScanError>>
where
    F: Fn(ScanAlgorithm) -> Fut,
    Fut: std::future::Future<Output = Answer>,
{
    let mut out = BTreeMap::new();
    let Some((&first, rest)) = algorithms.split_first() else {
        return out;
    };
    let answer = ask(first).await;
    let held = answer.hello.as_ref().map(Hello::key_types);
    match (held, &answer.served) {
        // Nothing learnt and nothing served: the server was not asked.
        (None, Err(e)) => {
            for &a in algorithms {
                out.insert(a, Err(e.clone()));
            }
            return out;
        }
        (Some(held), _) => {
            out.insert(first, answer.served);
            for &a in rest {
                let served = if held.contains(&a) {
                    ask(a).await.served
                } else {
                    Err(ScanError::NotOffered(a.key_type().to_owned()))
                };
                out.insert(a, served);
            }
        }
        // A key but no readable KEXINIT (not OpenSSH's framing): ask for
        // every type, as without the list.
        (None, Ok(_)) => {
            out.insert(first, answer.served);
            for &a in rest {
                out.insert(a, ask(a).await.served);
            }
        }
    }
    out
}

async fn handshake(to: Handshake<'_>) -> Answer {
    let Handshake {
        host,
        port,
        algorithm,
        timeout,
        certificates,
    } = to;
    let (stream, heard) = match connect(host, port, timeout).await {
        Ok(s) => record::Recording::new(s),
        Err(e) => return Answer::unreached(e),
    };
    let served = exchange(stream, algorithm, timeout, certificates).await;
    let greeting = heard.greeting();
    let hello = match &greeting {
        Greeting::Hello(h) => Some(h.clone()),
        _ => None,
    };
    let served = match (served, greeting) {
        (Err(_), Greeting::Refused(words)) if words.contains(hello::PENALTY_REFUSAL) => {
            Err(ScanError::Penalized(words))
        }
        (Err(_), Greeting::Refused(words)) => Err(ScanError::Other(format!(
            "the server said {words:?} and closed, before its SSH banner"
        ))),
        (served, _) => served,
    };
    Answer {
        served,
        hello,
        connected: true,
    }
}

/// A TCP connection to `host:port`, or why none.
async fn connect(host: &str, port: u16, timeout: Duration) -> Result<tokio::net::TcpStream, ScanError> {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let connect = tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port))).await;
    let stream = match connect {
        Err(_) => return Err(ScanError::Timeout(timeout_ms)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Err(ScanError::Refused),
        // A listener closing (sshd re-executing on SIGHUP) resets the
        // connections in its backlog.
        Ok(Err(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
            ) =>
        {
            return Err(ScanError::Dropped(format!("while connecting: {e}")));
        }
        Ok(Err(e)) => return Err(ScanError::Other(format!("cannot connect: {e}"))),
        Ok(Ok(s)) => s,
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// The key exchange up to the server's host key, over `stream`.
async fn exchange(
    stream: record::Recording<tokio::net::TcpStream>,
    algorithm: ScanAlgorithm,
    timeout: Duration,
    certificates: bool,
) -> Result<Served, ScanError> {
    let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let config = client::Config {
        preferred: Preferred {
            kex: Cow::Borrowed(CHEAP_KEX),
            key: Cow::Owned(algorithm.offered()),
            host_key_certificates: if certificates {
                Cow::Owned(algorithm.offered())
            } else {
                Cow::Borrowed(&[])
            },
            ..Preferred::DEFAULT
        },
        inactivity_timeout: Some(timeout),
        ..client::Config::default()
    };
    let slot = Arc::new(Mutex::new(None));
    let handler = Capture { key: slot.clone() };
    let outcome = tokio::time::timeout(timeout, client::connect_stream(Arc::new(config), stream, handler)).await;
    if let Some(key) = slot.lock().ok().and_then(|mut s| s.take()) {
        return Ok(key);
    }
    match outcome {
        Err(_) => Err(ScanError::Timeout(timeout_ms)),
        Ok(Ok(_)) => Err(ScanError::Other(
            "the server accepted the session without showing a key".to_owned(),
        )),
        Ok(Err(e)) => Err(classify(e, algorithm)),
    }
}

fn classify(e: russh::Error, algorithm: ScanAlgorithm) -> ScanError {
    match e {
        russh::Error::NoCommonAlgo {
            kind: russh::AlgorithmKind::Key,
            ..
        } => ScanError::NotOffered(algorithm.key_type().to_owned()),
        russh::Error::HUP | russh::Error::Disconnect => ScanError::Dropped("closed by the server".to_owned()),
        russh::Error::IO(io) => match io.kind() {
            std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionAborted => ScanError::Dropped(io.to_string()),
            _ => ScanError::Other(io.to_string()),
        },
        russh::Error::ConnectionTimeout | russh::Error::InactivityTimeout => ScanError::Timeout(0),
        other => ScanError::Other(other.to_string()),
    }
}
