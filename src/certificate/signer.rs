//! Signing and checking host certificates: principals, the signer and its
//! serials, and what install checks before a node serves one.

use super::*;

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use ssh_key::certificate::{Builder, CertType};
use ssh_key::{Certificate, PublicKey};

use crate::fingerprint::Fingerprint;
use crate::keyset::{HostKey, KeyAlgorithm, KeySet, fingerprint_of};

/// Longest principal accepted (DNS names are at most 253 characters).
pub const MAX_PRINCIPAL_LEN: usize = 255;

/// A name a certificate is valid for: the load balancer's DNS name, an
/// alias, a node name. What users type, so no wildcards: OpenSSH 9.2
/// compares principals literally ("name is not a listed principal").
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Principal(String);

impl Principal {
    /// Parses a principal.
    pub fn parse(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("a principal cannot be empty".to_owned());
        }
        if s.len() > MAX_PRINCIPAL_LEN {
            return Err(format!(
                "principal of {} bytes is longer than {MAX_PRINCIPAL_LEN}",
                s.len()
            ));
        }
        if s.contains(['*', '?']) {
            return Err(format!(
                "principal {s:?} has a wildcard; OpenSSH compares host principals literally, so list every name users type"
            ));
        }
        if let Some(c) = s.chars().find(|c| c.is_whitespace() || c.is_control() || *c == ',') {
            return Err(format!("principal {s:?} contains {c:?}; a principal is one host name"));
        }
        Ok(Principal(s.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for Principal {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Principal::parse(s.trim())
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Seconds since the Unix epoch, now.
pub fn now_unix() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `sign`'s default validity, in days: a week, renewed daily
/// (docs/certificates.md), so that a retired key's certificate dies soon.
pub const DEFAULT_VALIDITY_DAYS: u64 = 7;

/// Above this many days of validity `sign` warns: a retired key stays
/// accepted by clients that trust the CA for as long, unless revoked.
pub const WARN_VALIDITY_DAYS: u64 = 30;

/// How the key id of every certificate hostkeyctl signs begins (then the
/// version and the signer).
pub const KEY_ID_PREFIX: &str = "hostkeyctl version=";

/// What to sign.
#[derive(Clone, Debug)]
pub struct SignRequest {
    /// Every name the certificates are valid for (at least one).
    pub principals: Vec<Principal>,
    /// Start of validity (Unix seconds).
    pub valid_after: u64,
    /// End of validity (Unix seconds).
    pub valid_before: u64,
    /// The serial.
    pub serial: u64,
    /// The key id (records the version and the signer).
    pub key_id: String,
}

/// Why signing failed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// No principal.
    #[error("a host certificate needs at least one principal: pass --principal NAME for every name users type")]
    NoPrincipals,
    /// ssh-key refused a field or the signature failed.
    #[error("signing the {algorithm} certificate failed: {source}")]
    Sign {
        /// The key's algorithm.
        algorithm: KeyAlgorithm,
        /// Why.
        source: ssh_key::Error,
    },
    /// A key of a type hostkeyctl does not manage.
    #[error("a {0} key cannot be certified: hostkeyctl certifies ssh-ed25519, ecdsa-sha2-nistp256 and RSA keys")]
    Unmanaged(String),
    /// The CA in KMS did not sign, or signed with another key.
    #[error("signing the {algorithm} certificate with {location} failed: {reason}")]
    Kms {
        /// The key's algorithm.
        algorithm: KeyAlgorithm,
        /// The KMS key.
        location: String,
        /// Why (KMS's error, or the check that failed).
        reason: String,
        /// KMS refused or failed (an AWS failure), rather than a check.
        by_kms: bool,
    },
}

/// Signs a host certificate for every key of `keys` with `ca`.
pub fn sign_set(
    ca: &CaKey,
    keys: &KeySet,
    request: &SignRequest,
) -> Result<Vec<(KeyAlgorithm, Certificate)>, SignError> {
    let public: Vec<PublicKey> = keys.keys().map(|k| k.public_key().clone()).collect();
    sign_keys(ca, &public, request)
}

/// Signs a host certificate for each public key of a managed type (a
/// node's own keys, which never leave it) with `ca`.
pub fn sign_keys(
    ca: &CaKey,
    keys: &[PublicKey],
    request: &SignRequest,
) -> Result<Vec<(KeyAlgorithm, Certificate)>, SignError> {
    if request.principals.is_empty() {
        return Err(SignError::NoPrincipals);
    }
    let mut out = Vec::new();
    for key in keys {
        let algorithm =
            KeyAlgorithm::of(&key.algorithm()).ok_or_else(|| SignError::Unmanaged(key.algorithm().to_string()))?;
        let err = |source| SignError::Sign { algorithm, source };
        let nonce: [u8; 32] = rand::random();
        let mut builder = Builder::new(
            nonce.to_vec(),
            key.key_data().clone(),
            request.valid_after,
            request.valid_before,
        )
        .map_err(err)?;
        builder.cert_type(CertType::Host).map_err(err)?;
        builder.serial(request.serial).map_err(err)?;
        builder.key_id(request.key_id.clone()).map_err(err)?;
        for p in &request.principals {
            builder.valid_principal(p.as_str()).map_err(err)?;
        }
        builder.comment("hostkeyctl").map_err(err)?;
        // ssh-key verifies what it signed in debug builds only; a KMS CA's
        // signature is checked in every build: KMS answered for the key
        // the secret names, which must be the key whose public half it holds.
        let mismatch = |e: ssh_key::Error| SignError::Kms {
            algorithm,
            location: ca.location(),
            reason: format!(
                "the signature does not verify with the CA's public key ({e}): does the CA secret's kms_key_arn name the key whose public key it holds?"
            ),
            by_kms: false,
        };
        let cert = builder.sign(ca).map_err(|source| match (ca.take_error(), ca) {
            (Some((reason, by_kms)), _) => SignError::Kms {
                algorithm,
                location: ca.location(),
                reason,
                by_kms,
            },
            (None, CaKey::Kms(_)) => mismatch(source),
            (None, CaKey::Held(_)) => SignError::Sign { algorithm, source },
        })?;
        if let CaKey::Kms(_) = ca {
            let trusted = ca.public_key().fingerprint(ssh_key::HashAlg::Sha256);
            cert.validate_at(request.valid_after, [&trusted]).map_err(mismatch)?;
        }
        out.push((algorithm, cert));
    }
    Ok(out)
}

/// Signs key sets the same way each time: a rotation's new set gets
/// certificates like the current set's.
pub struct Signer {
    /// The CA.
    pub ca: CaKey,
    /// Every name.
    pub principals: Vec<Principal>,
    /// Validity from signing, in seconds.
    pub validity: u64,
    /// Serial of the next certificates.
    pub serial: u64,
    /// Who signs (the key id records it).
    pub signer: String,
}

/// Certificates are back-dated this much, for clocks a little behind.
pub const BACKDATE_SECS: u64 = 300;

impl Signer {
    /// Certificates for every key of `keys`, stored as `version`.
    pub fn sign(
        &self,
        keys: &KeySet,
        version: &crate::ids::VersionId,
    ) -> Result<std::collections::BTreeMap<KeyAlgorithm, Certificate>, SignError> {
        let now = now_unix();
        let request = SignRequest {
            // Each name once, in the order given (`--principal a,a`).
            principals: self.principals.iter().fold(Vec::new(), |mut out, p| {
                if !out.contains(p) {
                    out.push(p.clone());
                }
                out
            }),
            valid_after: now.saturating_sub(BACKDATE_SECS),
            valid_before: now.saturating_add(self.validity),
            serial: self.serial,
            key_id: format!("{KEY_ID_PREFIX}{version} signer={}", self.signer),
        };
        Ok(sign_set(&self.ca, keys, &request)?.into_iter().collect())
    }

    /// A signer that renews `current` certificates: same names, same
    /// validity length, the next serial. `None` when there are none.
    pub fn like(
        ca: CaKey,
        current: &std::collections::BTreeMap<KeyAlgorithm, Certificate>,
        signer: String,
    ) -> Option<Signer> {
        let first = current.values().next()?;
        let principals = first
            .valid_principals()
            .iter()
            .filter_map(|p| Principal::parse(p).ok())
            .collect();
        Some(Signer {
            ca,
            principals,
            validity: first
                .valid_before()
                .saturating_sub(first.valid_after())
                .saturating_sub(BACKDATE_SECS)
                .max(3600),
            serial: next_serial(current),
            signer,
        })
    }
}

/// One more than the highest serial of `current` (1 when there are none).
pub fn next_serial(current: &std::collections::BTreeMap<KeyAlgorithm, Certificate>) -> u64 {
    current
        .values()
        .map(Certificate::serial)
        .max()
        .map_or(1, |s| s.saturating_add(1))
}

/// Who is signing, for the key id: `$SUDO_USER` or `$USER`, at this host.
/// Only printable characters without spaces are kept.
pub fn default_signer() -> String {
    let user = std::env::var("SUDO_USER")
        .or_else(|_| std::env::var("USER"))
        .unwrap_or_else(|_| "unknown".to_owned());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let clean = |s: &str| -> String { s.chars().filter(|c| c.is_ascii_graphic()).take(64).collect() };
    format!("{}@{}", clean(&user), clean(host.trim()))
}

/// The fingerprint of the CA key that signed `cert`.
pub fn ca_fingerprint(cert: &Certificate) -> Fingerprint {
    fingerprint_of(&PublicKey::from(cert.signature_key().clone()))
}

/// The fingerprint of the key `cert` certifies.
pub fn subject_fingerprint(cert: &Certificate) -> Fingerprint {
    fingerprint_of(&PublicKey::from(cert.public_key().clone()))
}

/// The certificate line, as in `ssh_host_<alg>_key-cert.pub`.
pub fn certificate_line(cert: &Certificate) -> String {
    cert.to_openssh().unwrap_or_default()
}

/// Why a node must not serve a certificate. Each names the fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CertProblem {
    /// The certificate certifies another key.
    #[error(
        "the {algorithm} certificate certifies key {certified}, not the set's key {key}; sign the set again (`hostkeyctl sign`)"
    )]
    OtherKey {
        /// The slot.
        algorithm: KeyAlgorithm,
        /// What it certifies.
        certified: Fingerprint,
        /// The set's key.
        key: Fingerprint,
    },
    /// A user certificate.
    #[error("the {algorithm} certificate is a user certificate, not a host certificate; clients refuse it as a host's")]
    NotHost {
        /// The slot.
        algorithm: KeyAlgorithm,
    },
    /// Expired.
    #[error("the {algorithm} certificate expired at {at} (serial {serial}); renew it (`hostkeyctl sign`)")]
    Expired {
        /// The slot.
        algorithm: KeyAlgorithm,
        /// When (RFC 3339).
        at: String,
        /// Its serial.
        serial: u64,
    },
    /// Not valid yet.
    #[error("the {algorithm} certificate is not valid before {at}; check the signer's clock")]
    NotYetValid {
        /// The slot.
        algorithm: KeyAlgorithm,
        /// When (RFC 3339).
        at: String,
    },
    /// A required principal is missing.
    #[error(
        "the {algorithm} certificate does not list principal {missing:?} (it lists {listed:?}); sign again with --principal {missing}"
    )]
    PrincipalMissing {
        /// The slot.
        algorithm: KeyAlgorithm,
        /// The name not listed.
        missing: String,
        /// What it lists.
        listed: Vec<String>,
    },
    /// The CA's signature does not verify.
    #[error("the {algorithm} certificate's signature does not verify")]
    BadSignature {
        /// The slot.
        algorithm: KeyAlgorithm,
    },
}

/// RFC 3339 for a Unix time (`forever` for OpenSSH's "no end").
pub fn rfc3339(unix: u64) -> String {
    if unix == u64::MAX {
        return "forever".to_owned();
    }
    i64::try_from(unix)
        .ok()
        .and_then(|s| time::OffsetDateTime::from_unix_timestamp(s).ok())
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| unix.to_string())
}

/// Checks a certificate before a node serves it: it certifies `key`, is a
/// host certificate, is valid at `now`, lists every `required` name and its
/// signature verifies.
pub fn check_for_install(
    cert: &Certificate,
    key: &HostKey,
    now: u64,
    required: &[Principal],
) -> Result<(), CertProblem> {
    let algorithm = key.algorithm();
    if cert.public_key() != key.public_key().key_data() {
        return Err(CertProblem::OtherKey {
            algorithm,
            certified: subject_fingerprint(cert),
            key: key.fingerprint().clone(),
        });
    }
    if cert.cert_type() != CertType::Host {
        return Err(CertProblem::NotHost { algorithm });
    }
    if cert.verify_signature().is_err() {
        return Err(CertProblem::BadSignature { algorithm });
    }
    if now >= cert.valid_before() {
        return Err(CertProblem::Expired {
            algorithm,
            at: rfc3339(cert.valid_before()),
            serial: cert.serial(),
        });
    }
    if now < cert.valid_after() {
        return Err(CertProblem::NotYetValid {
            algorithm,
            at: rfc3339(cert.valid_after()),
        });
    }
    let listed = cert.valid_principals();
    if let Some(missing) = required.iter().find(|p| !listed.iter().any(|l| l == p.as_str())) {
        return Err(CertProblem::PrincipalMissing {
            algorithm,
            missing: missing.to_string(),
            listed: listed.to_vec(),
        });
    }
    Ok(())
}

/// A certificate's public facts, for reports.
#[derive(Debug, serde::Serialize)]
pub struct CertRow {
    /// Key type.
    pub algorithm: String,
    /// Serial.
    pub serial: u64,
    /// Key id (escaped).
    pub key_id: String,
    /// Principals (escaped).
    pub principals: Vec<String>,
    /// End of validity (RFC 3339).
    pub valid_before: String,
    /// Signing CA.
    pub ca_fingerprint: String,
}

/// Public facts of every certificate of a set.
pub fn cert_rows(certs: &std::collections::BTreeMap<KeyAlgorithm, ssh_key::Certificate>) -> Vec<CertRow> {
    certs
        .iter()
        .map(|(a, c)| CertRow {
            algorithm: a.key_type().to_owned(),
            serial: c.serial(),
            key_id: crate::escape::escape(c.key_id()),
            principals: c.valid_principals().iter().map(|p| crate::escape::escape(p)).collect(),
            valid_before: rfc3339(c.valid_before()),
            ca_fingerprint: ca_fingerprint(c).to_string(),
        })
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::keyset::KeyAlgorithm;

    pub(in crate::certificate) fn request(principals: &[&str], after: u64, before: u64) -> SignRequest {
        SignRequest {
            principals: principals.iter().map(|p| Principal::parse(p).unwrap()).collect(),
            valid_after: after,
            valid_before: before,
            serial: 7,
            key_id: "hostkeyctl test".to_owned(),
        }
    }

    pub(in crate::certificate) fn signed(ca: &CaKey, keys: &KeySet, req: &SignRequest) -> Certificate {
        sign_set(ca, keys, req).unwrap().remove(0).1
    }

    #[test]
    fn a_signer_lists_each_name_once() {
        let keys = KeySet::generate(&[KeyAlgorithm::Ed25519], 0).unwrap();
        let signer = Signer {
            ca: CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap()),
            principals: ["a", "b", "a"].iter().map(|p| Principal::parse(p).unwrap()).collect(),
            validity: 3600,
            serial: 1,
            signer: "test".to_owned(),
        };
        let certs = signer.sign(&keys, &crate::ids::VersionId::random()).unwrap();
        assert_eq!(certs[&KeyAlgorithm::Ed25519].valid_principals(), ["a", "b"]);
    }

    #[test]
    fn principals_are_literal_host_names() {
        assert!(Principal::parse("login.example.internal").is_ok());
        for bad in ["", "*.example", "a b", "a,b", "x\n"] {
            assert!(Principal::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn install_refuses_each_bad_certificate() {
        let ca = CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
        let keys = KeySet::generate(&[KeyAlgorithm::Ed25519], 0).unwrap();
        let key = keys.get(KeyAlgorithm::Ed25519).unwrap();
        let now = now_unix();
        let good = signed(&ca, &keys, &request(&["login"], now - 60, now + 3600));
        let login = [Principal::parse("login").unwrap()];
        assert_eq!(check_for_install(&good, key, now, &login), Ok(()));
        assert_eq!(good.cert_type(), CertType::Host);

        let other = KeySet::generate(&[KeyAlgorithm::Ed25519], 0).unwrap();
        let foreign = signed(&ca, &other, &request(&["login"], now - 60, now + 3600));
        assert!(matches!(
            check_for_install(&foreign, key, now, &[]),
            Err(CertProblem::OtherKey { .. })
        ));

        let expired = signed(&ca, &keys, &request(&["login"], now - 7200, now - 3600));
        assert!(matches!(
            check_for_install(&expired, key, now, &[]),
            Err(CertProblem::Expired { .. })
        ));

        let missing = check_for_install(&good, key, now, &[Principal::parse("other").unwrap()]);
        assert!(matches!(missing, Err(CertProblem::PrincipalMissing { ref missing, .. }) if missing == "other"));

        let mut builder = Builder::new(vec![0; 32], key.public_key().key_data().clone(), now - 60, now + 60).unwrap();
        builder.cert_type(CertType::User).unwrap();
        builder.valid_principal("login").unwrap();
        let user = builder.sign(&ca).unwrap();
        assert!(matches!(
            check_for_install(&user, key, now, &[]),
            Err(CertProblem::NotHost { .. })
        ));
    }
}
