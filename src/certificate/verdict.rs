//! The audit's certificate verdicts: what a node served, judged against
//! the trusted CAs, the names users type and the warning window.

use serde::Serialize;
use ssh_key::Certificate;
use ssh_key::certificate::CertType;

use super::{Principal, ca_fingerprint, rfc3339};
use crate::fingerprint::Fingerprint;

/// A certificate verdict of the audit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CertVerdict {
    /// A valid host certificate from a trusted CA listing every name.
    Ok,
    /// As OK, but it expires within the warning window.
    Expiring,
    /// Expired (or not valid yet).
    Expired,
    /// Signed by a CA that is not trusted.
    WrongCa,
    /// A required name is not listed.
    PrincipalMissing,
    /// A user certificate served as a host's.
    NotHostCert,
    /// No certificate served: the key alone.
    CertMissing,
}

impl CertVerdict {
    /// Whether the audit fails (exit 1).
    pub fn is_drift(self) -> bool {
        !matches!(self, CertVerdict::Ok | CertVerdict::Expiring)
    }
}

/// What the audit expects of certificates.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CertPolicy {
    /// Trusted CA fingerprints.
    pub ca_fingerprints: Vec<Fingerprint>,
    /// Names every certificate must list.
    pub principals: Vec<Principal>,
    /// EXPIRING when fewer days are left.
    pub warn_days: u64,
}

/// The certificate part of an audit finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CertFinding {
    /// The verdict.
    pub status: CertVerdict,
    /// Its key id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// Its serial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<u64>,
    /// Its principals.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub principals: Vec<String>,
    /// Signing CA.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_fingerprint: Option<Fingerprint>,
    /// End of validity, RFC 3339.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_before: Option<String>,
    /// What is wrong, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Judges what a node served for one type when asked for a certificate:
/// `None` when it answered with a plain key. Checked in order of severity:
/// a user certificate, an untrusted CA (or a signature that does not
/// verify), expiry, missing names, then the warning window.
pub fn judge(served: Option<&Certificate>, policy: &CertPolicy, now: u64) -> CertFinding {
    let Some(cert) = served else {
        return CertFinding {
            status: CertVerdict::CertMissing,
            key_id: None,
            serial: None,
            principals: Vec::new(),
            ca_fingerprint: None,
            valid_before: None,
            detail: Some("the node serves the key without a certificate".to_owned()),
        };
    };
    let ca = ca_fingerprint(cert);
    let listed = cert.valid_principals();
    let missing: Vec<&str> = policy
        .principals
        .iter()
        .map(Principal::as_str)
        .filter(|p| !listed.iter().any(|l| l == p))
        .collect();
    let left_days = cert.valid_before().saturating_sub(now) / 86_400;
    let (status, detail) = if cert.cert_type() != CertType::Host {
        (CertVerdict::NotHostCert, Some("a user certificate".to_owned()))
    } else if !policy.ca_fingerprints.contains(&ca) {
        (
            CertVerdict::WrongCa,
            Some(format!("signed by {ca}, which is not a trusted CA")),
        )
    } else if cert.verify_signature().is_err() {
        (
            CertVerdict::WrongCa,
            Some("the CA signature does not verify".to_owned()),
        )
    } else if now >= cert.valid_before() {
        (
            CertVerdict::Expired,
            Some(format!("expired at {}", rfc3339(cert.valid_before()))),
        )
    } else if now < cert.valid_after() {
        (
            CertVerdict::Expired,
            Some(format!("not valid before {}", rfc3339(cert.valid_after()))),
        )
    } else if !missing.is_empty() {
        (
            CertVerdict::PrincipalMissing,
            Some(format!("does not list {}", missing.join(", "))),
        )
    } else if left_days < policy.warn_days {
        (
            CertVerdict::Expiring,
            Some(format!(
                "expires in {left_days} days, at {}",
                rfc3339(cert.valid_before())
            )),
        )
    } else {
        (CertVerdict::Ok, None)
    };
    CertFinding {
        status,
        key_id: Some(cert.key_id().to_owned()),
        serial: Some(cert.serial()),
        principals: listed.to_vec(),
        ca_fingerprint: Some(ca),
        valid_before: Some(rfc3339(cert.valid_before())),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use ssh_key::Certificate;
    use ssh_key::certificate::{Builder, CertType};

    use super::{CertPolicy, CertVerdict, judge};
    use crate::certificate::Principal;
    use crate::certificate::now_unix;
    use crate::certificate::signer::tests::{request, signed};
    use crate::keyset::{HostKey, KeyAlgorithm, KeySet};

    #[test]
    fn the_audit_gives_every_verdict() {
        let ca = crate::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
        let keys = KeySet::generate(&[KeyAlgorithm::Ed25519], 0).unwrap();
        let now = now_unix();
        let policy = CertPolicy {
            ca_fingerprints: vec![ca.fingerprint().clone()],
            principals: vec![Principal::parse("login").unwrap()],
            warn_days: 7,
        };
        let verdict = |cert: Option<&Certificate>| judge(cert, &policy, now).status;
        let day = 86_400;
        let ok = signed(&ca, &keys, &request(&["login"], now - 60, now + 30 * day));
        assert_eq!(verdict(Some(&ok)), CertVerdict::Ok);
        let soon = signed(&ca, &keys, &request(&["login"], now - 60, now + 2 * day));
        assert_eq!(verdict(Some(&soon)), CertVerdict::Expiring);
        let old = signed(&ca, &keys, &request(&["login"], now - 2 * day, now - day));
        assert_eq!(verdict(Some(&old)), CertVerdict::Expired);
        let rogue = crate::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
        let wrong = signed(&rogue, &keys, &request(&["login"], now - 60, now + 30 * day));
        assert_eq!(verdict(Some(&wrong)), CertVerdict::WrongCa);
        let named = signed(&ca, &keys, &request(&["elsewhere"], now - 60, now + 30 * day));
        assert_eq!(verdict(Some(&named)), CertVerdict::PrincipalMissing);
        let key = keys.get(KeyAlgorithm::Ed25519).unwrap();
        let mut builder = Builder::new(
            vec![0; 32],
            key.public_key().key_data().clone(),
            now - 60,
            now + 30 * day,
        )
        .unwrap();
        builder.cert_type(CertType::User).unwrap();
        builder.valid_principal("login").unwrap();
        let user = builder.sign(&ca).unwrap();
        assert_eq!(verdict(Some(&user)), CertVerdict::NotHostCert);
        assert_eq!(verdict(None), CertVerdict::CertMissing);
        assert!(!CertVerdict::Expiring.is_drift() && CertVerdict::CertMissing.is_drift());
    }
}
