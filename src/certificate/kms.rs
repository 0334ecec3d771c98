//! A host CA whose private key never leaves AWS KMS (docs/certificates.md,
//! "A CA in KMS"): what KMS's answers mean in SSH terms.
//!
//! KMS signs the certificate's to-be-signed bytes (`MessageType` RAW, so
//! KMS hashes them itself) and answers in its own encodings (KMS API
//! Reference, Sign): ECDSA as a DER `SEQUENCE { r, s }` (X9.62, RFC 3279),
//! which SSH encodes as two mpints (RFC 5656); RSA PKCS #1 v1.5 as the raw
//! signature, which SSH takes as is (`rsa-sha2-256`/`-512`, RFC 8332);
//! Ed25519 (`ED25519_SHA_512`, pure Ed25519, RAW only) as the 64 bytes
//! `ssh-ed25519` carries (RFC 8709). GetPublicKey answers a
//! SubjectPublicKeyInfo (RFC 5280).
//!
//! The AWS call itself is behind [`KmsSign`] (`crate::aws::kms`), so this
//! module is pure and its conversions are tested with local keys.

use std::sync::{Arc, Mutex};

use ssh_key::public::{EcdsaPublicKey, Ed25519PublicKey, KeyData, RsaPublicKey};
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, PublicKey};

/// The largest message KMS signs raw (Sign: "Messages can be 0-4096
/// bytes"). A certificate body is about 400 bytes for an Ed25519 key with
/// five names; Ed25519 has no digest mode, so a larger body is refused.
pub const MAX_KMS_MESSAGE: usize = 4096;

/// The tag that makes a KMS key a host CA the shipped roles may use
/// (`kms:Sign` and `kms:GetPublicKey` are granted on keys carrying it:
/// docs/iam.md). `ca init --kms` sets it; an existing key needs it.
pub const CA_TAG: (&str, &str) = ("hostkeyctl:purpose", "ssh-host-ca");

/// Why a KMS key cannot be the CA.
#[derive(Debug, thiserror::Error)]
pub enum KmsCaError {
    /// KMS refused or could not be reached.
    #[error(transparent)]
    Aws(#[from] crate::aws_error::AwsError),
    /// The key is no signing key SSH can use.
    #[error("KMS key {key}: {reason}")]
    Unusable {
        /// The key as given.
        key: String,
        /// Why.
        reason: String,
    },
    /// KMS could not use the key now (unavailable, internal error).
    #[error("KMS key {key}: {reason}")]
    Unavailable {
        /// The key as given.
        key: String,
        /// Why.
        reason: String,
    },
}

impl crate::exit::ExitStatus for KmsCaError {
    /// AWS's status; a key that cannot be a CA is a usage error (2).
    fn status(&self) -> crate::exit::Status {
        match self {
            KmsCaError::Aws(e) => e.status(),
            KmsCaError::Unavailable { .. } => crate::exit::Status::Aws,
            KmsCaError::Unusable { .. } => crate::exit::Status::Usage,
        }
    }
}

/// KMS's keys as `ca init` uses them: create a signing key for a new CA,
/// or read one (its ARN, spec and public key) to be the CA.
pub trait CaKeys: Sync {
    /// Creates an asymmetric signing key for `algorithm`, tagged
    /// [`CA_TAG`]; its ARN.
    fn create(
        &self,
        algorithm: KmsAlgorithm,
        description: &str,
    ) -> impl std::future::Future<Output = Result<String, KmsCaError>> + Send;
    /// The CA for the key `key`, checked to be a signing key SSH can use;
    /// `new`: a key just created, read again while KMS does not show it
    /// yet (CreateKey is eventually consistent).
    fn ca(&self, key: &str, new: bool) -> impl std::future::Future<Output = Result<KmsCa, KmsCaError>> + Send;
}

/// A KMS key spec hostkeyctl can use as a host CA, and how it signs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KmsAlgorithm {
    /// `ECC_NIST_P256`, `ECDSA_SHA_256`: `ecdsa-sha2-nistp256`.
    P256,
    /// `ECC_NIST_P384`, `ECDSA_SHA_384`: `ecdsa-sha2-nistp384`.
    P384,
    /// `RSA_2048`/`3072`/`4096`, `RSASSA_PKCS1_V1_5_SHA_512`: `rsa-sha2-512`.
    Rsa,
    /// `ECC_NIST_EDWARDS25519`, `ED25519_SHA_512`: `ssh-ed25519`.
    Ed25519,
}

impl KmsAlgorithm {
    /// The algorithm for a KMS key spec, or why it cannot be a host CA.
    pub fn for_key_spec(spec: &str) -> Result<Self, String> {
        match spec {
            "ECC_NIST_P256" => Ok(KmsAlgorithm::P256),
            "ECC_NIST_P384" => Ok(KmsAlgorithm::P384),
            "RSA_2048" | "RSA_3072" | "RSA_4096" => Ok(KmsAlgorithm::Rsa),
            "ECC_NIST_EDWARDS25519" => Ok(KmsAlgorithm::Ed25519),
            other => Err(format!(
                "a KMS key of spec {other} cannot be an SSH host CA: use ECC_NIST_P256, ECC_NIST_P384, ECC_NIST_EDWARDS25519 or RSA_2048/3072/4096 (ECC_NIST_P521 and ECC_SECG_P256K1 have no OpenSSH certificate signature in every client, SM2 and ML-DSA none)"
            )),
        }
    }

    /// The key spec `ca init --kms` creates for this algorithm.
    pub fn key_spec(self) -> &'static str {
        match self {
            KmsAlgorithm::P256 => "ECC_NIST_P256",
            KmsAlgorithm::P384 => "ECC_NIST_P384",
            KmsAlgorithm::Rsa => "RSA_3072",
            KmsAlgorithm::Ed25519 => "ECC_NIST_EDWARDS25519",
        }
    }

    /// KMS's `SigningAlgorithm`.
    pub fn signing_algorithm(self) -> &'static str {
        match self {
            KmsAlgorithm::P256 => "ECDSA_SHA_256",
            KmsAlgorithm::P384 => "ECDSA_SHA_384",
            KmsAlgorithm::Rsa => "RSASSA_PKCS1_V1_5_SHA_512",
            KmsAlgorithm::Ed25519 => "ED25519_SHA_512",
        }
    }

    /// The SSH signature algorithm of the certificates.
    pub fn ssh_algorithm(self) -> Algorithm {
        match self {
            KmsAlgorithm::P256 => Algorithm::Ecdsa {
                curve: EcdsaCurve::NistP256,
            },
            KmsAlgorithm::P384 => Algorithm::Ecdsa {
                curve: EcdsaCurve::NistP384,
            },
            KmsAlgorithm::Rsa => Algorithm::Rsa {
                hash: Some(HashAlg::Sha512),
            },
            KmsAlgorithm::Ed25519 => Algorithm::Ed25519,
        }
    }

    /// The SSH public key in GetPublicKey's SubjectPublicKeyInfo, checked
    /// against the key spec (a secp256k1 point is 65 bytes too).
    pub fn public_key(self, spki_der: &[u8]) -> Result<PublicKey, String> {
        use spki::der::Decode;
        const EC: spki::ObjectIdentifier = spki::ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
        const P256: spki::ObjectIdentifier = spki::ObjectIdentifier::new_unwrap("1.2.840.10045.3.1.7");
        const P384: spki::ObjectIdentifier = spki::ObjectIdentifier::new_unwrap("1.3.132.0.34");
        const RSA: spki::ObjectIdentifier = spki::ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
        const ED25519: spki::ObjectIdentifier = spki::ObjectIdentifier::new_unwrap("1.3.101.112");
        let info = spki::SubjectPublicKeyInfoRef::from_der(spki_der)
            .map_err(|e| format!("KMS's public key is not a SubjectPublicKeyInfo: {e}"))?;
        let oid = info.algorithm.oid;
        let curve = info.algorithm.parameters_oid().ok();
        let bits = info
            .subject_public_key
            .as_bytes()
            .ok_or_else(|| "KMS's public key has a partial byte".to_owned())?;
        let wrong = || format!("KMS's public key (algorithm {oid}) is not the {self:?} key its key spec says");
        let data = match self {
            KmsAlgorithm::P256 | KmsAlgorithm::P384 => {
                let want = if self == KmsAlgorithm::P256 { P256 } else { P384 };
                if oid != EC || curve != Some(want) {
                    return Err(wrong());
                }
                KeyData::Ecdsa(EcdsaPublicKey::from_sec1_bytes(bits).map_err(|e| format!("{}: {e}", wrong()))?)
            }
            KmsAlgorithm::Rsa => {
                if oid != RSA {
                    return Err(wrong());
                }
                let key = <rsa::RsaPublicKey as rsa::pkcs8::DecodePublicKey>::from_public_key_der(spki_der)
                    .map_err(|e| format!("{}: {e}", wrong()))?;
                KeyData::Rsa(RsaPublicKey::try_from(&key).map_err(|e| format!("{}: {e}", wrong()))?)
            }
            KmsAlgorithm::Ed25519 => {
                if oid != ED25519 {
                    return Err(wrong());
                }
                KeyData::Ed25519(Ed25519PublicKey::try_from(bits).map_err(|e| format!("{}: {e}", wrong()))?)
            }
        };
        Ok(PublicKey::new(data, ""))
    }

    /// The SSH signature for KMS's answer to Sign.
    pub fn ssh_signature(self, kms: &[u8]) -> Result<ssh_key::Signature, String> {
        let bad = |e: &dyn std::fmt::Display| format!("KMS answered a {self:?} signature SSH cannot use: {e}");
        match self {
            KmsAlgorithm::P256 => p256::ecdsa::Signature::from_der(kms)
                .map_err(|e| bad(&e))
                .and_then(|s| ssh_key::Signature::try_from(&s).map_err(|e| bad(&e))),
            KmsAlgorithm::P384 => p384::ecdsa::Signature::from_der(kms)
                .map_err(|e| bad(&e))
                .and_then(|s| ssh_key::Signature::try_from(&s).map_err(|e| bad(&e))),
            KmsAlgorithm::Rsa | KmsAlgorithm::Ed25519 => {
                ssh_key::Signature::new(self.ssh_algorithm(), kms.to_vec()).map_err(|e| bad(&e))
            }
        }
    }
}

/// The one AWS call: `kms:Sign` of a raw message, answering KMS's bytes.
/// Blocking: ssh-key's certificate builder signs synchronously.
pub trait KmsSign: Send + Sync {
    /// Signs `message` with `key_arn` and KMS's `algorithm`.
    fn sign(&self, key_arn: &str, algorithm: KmsAlgorithm, message: &[u8]) -> Result<Vec<u8>, String>;
}

/// A CA key in KMS: its ARN, its public key and how it signs, and (once
/// the store bound it) the client that signs with it.
pub struct KmsCa {
    /// The key's ARN.
    pub key_arn: String,
    /// Its KMS key spec (`ECC_NIST_P256`, `RSA_3072`, ...).
    pub key_spec: String,
    /// The CA's public key (from GetPublicKey, when `ca init` ran).
    pub public: PublicKey,
    /// How it signs.
    pub algorithm: KmsAlgorithm,
    signer: Option<Arc<dyn KmsSign>>,
    /// Why the last signature failed (ssh-key keeps only "signature
    /// error"), and whether KMS refused or failed (else hostkeyctl did).
    last_error: Mutex<Option<(String, bool)>>,
}

impl std::fmt::Debug for KmsCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KmsCa")
            .field("key_arn", &self.key_arn)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

impl KmsCa {
    /// A KMS CA that cannot sign yet ([`KmsCa::bind`] gives it a client),
    /// or why `public` cannot be the public key of a `key_spec` key.
    pub fn new(key_arn: String, key_spec: String, public: &PublicKey) -> Result<Self, String> {
        // GetPublicKey's KeyId is the key ARN; Sign answers it too, and
        // hostkeyctl checks that it is the same key.
        let parts: Vec<&str> = key_arn.splitn(6, ':').collect();
        let is_key_arn = parts.len() == 6
            && parts[0] == "arn"
            && parts[1].starts_with("aws")
            && parts[2] == "kms"
            && parts[5]
                .strip_prefix("key/")
                .is_some_and(|id| !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        if !is_key_arn {
            return Err(format!(
                "{} is not a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)",
                crate::escape::escape(&key_arn)
            ));
        }
        let algorithm = KmsAlgorithm::for_key_spec(&key_spec)?;
        let matches = match algorithm {
            KmsAlgorithm::Rsa => public.algorithm().is_rsa(),
            other => public.algorithm() == other.ssh_algorithm(),
        };
        if !matches {
            return Err(format!(
                "a {key_spec} key cannot have the public key {}",
                public.algorithm()
            ));
        }
        Ok(KmsCa {
            key_arn,
            key_spec,
            public: PublicKey::new(public.key_data().clone(), ""),
            algorithm,
            signer: None,
            last_error: Mutex::new(None),
        })
    }

    /// A copy that cannot sign yet.
    pub fn clone_unbound(&self) -> Self {
        KmsCa {
            key_arn: self.key_arn.clone(),
            key_spec: self.key_spec.clone(),
            public: self.public.clone(),
            algorithm: self.algorithm,
            signer: None,
            last_error: Mutex::new(None),
        }
    }

    /// The same CA, signing through `signer`.
    pub fn bind(self, signer: Arc<dyn KmsSign>) -> Self {
        KmsCa {
            signer: Some(signer),
            ..self
        }
    }

    /// Why the last signature failed, and whether KMS refused or failed
    /// (an AWS failure, exit 4), taken.
    pub fn take_error(&self) -> Option<(String, bool)> {
        self.last_error.lock().ok().and_then(|mut e| e.take())
    }

    /// A certificate body signed by KMS, as an SSH signature; or why not,
    /// and whether KMS refused or failed.
    pub fn sign_tbs(&self, tbs: &[u8]) -> Result<ssh_key::Signature, (String, bool)> {
        let signer = self.signer.as_ref().ok_or_else(|| {
            (
                format!(
                    "the CA is KMS key {} and this build cannot call KMS: sign with the admin build",
                    self.key_arn
                ),
                false,
            )
        })?;
        if tbs.len() > MAX_KMS_MESSAGE {
            return Err((
                format!(
                    "the certificate body is {} bytes and KMS signs at most {MAX_KMS_MESSAGE}: certify fewer principals",
                    tbs.len()
                ),
                false,
            ));
        }
        let raw = signer.sign(&self.key_arn, self.algorithm, tbs).map_err(|e| (e, true))?;
        self.algorithm.ssh_signature(&raw).map_err(|e| (e, false))
    }
}

impl signature::Signer<ssh_key::Signature> for KmsCa {
    fn try_sign(&self, tbs: &[u8]) -> Result<ssh_key::Signature, signature::Error> {
        self.sign_tbs(tbs).map_err(|e| {
            if let Ok(mut slot) = self.last_error.lock() {
                *slot = Some(e);
            }
            signature::Error::new()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::KmsAlgorithm;
    use crate::testing::MemKms;

    #[test]
    fn spki_of_each_curve_is_read_and_a_wrong_curve_refused() {
        use p256::pkcs8::EncodePublicKey;
        let secret = p256::SecretKey::from_slice(&[7u8; 32]).unwrap();
        let der = secret.public_key().to_public_key_der().unwrap();
        let key = KmsAlgorithm::P256.public_key(der.as_bytes()).unwrap();
        assert_eq!(key.algorithm().as_str(), "ecdsa-sha2-nistp256");
        let err = KmsAlgorithm::P384.public_key(der.as_bytes()).unwrap_err();
        assert!(err.contains("is not the P384 key"), "{err}");
        assert!(KmsAlgorithm::Ed25519.public_key(der.as_bytes()).is_err());
    }

    #[test]
    fn a_der_ecdsa_signature_becomes_two_mpints_that_verify() {
        use p256::ecdsa::signature::Signer as _;
        use p256::pkcs8::EncodePublicKey;
        let signing = p256::ecdsa::SigningKey::from_slice(&[9u8; 32]).unwrap();
        let der = signing.verifying_key().to_public_key_der().unwrap();
        let public = KmsAlgorithm::P256.public_key(der.as_bytes()).unwrap();
        let message = b"certificate body";
        let sig: p256::ecdsa::Signature = signing.sign(message);
        let ssh = KmsAlgorithm::P256.ssh_signature(sig.to_der().as_bytes()).unwrap();
        assert_eq!(ssh.algorithm().as_str(), "ecdsa-sha2-nistp256");
        signature::Verifier::verify(public.key_data(), message, &ssh).unwrap();
        assert!(signature::Verifier::verify(public.key_data(), b"another body", &ssh).is_err());
        assert!(KmsAlgorithm::P256.ssh_signature(b"\x30\x03junk").is_err());
    }

    /// A CA in KMS whose public key is `public_from`'s, signed for by
    /// KMS played by `signs_with`'s local P-256 key ([`MemKms`]).
    fn kms_ca(public_from: u8, signs_with: u8) -> (crate::certificate::CaKey, std::sync::Arc<MemKms>) {
        let public = KmsAlgorithm::P256
            .public_key(&MemKms::p256(public_from).public_der())
            .unwrap();
        let ca = super::KmsCa::new(
            "arn:aws:kms:us-east-1:111122223333:key/k".to_owned(),
            "ECC_NIST_P256".to_owned(),
            &public,
        )
        .unwrap();
        let local = std::sync::Arc::new(MemKms::p256(signs_with));
        let ca = ca.bind(local.clone());
        (crate::certificate::CaKey::Kms(std::sync::Arc::new(ca)), local)
    }

    fn request(names: usize) -> crate::certificate::SignRequest {
        crate::certificate::SignRequest {
            principals: (0..names)
                .map(|i| crate::certificate::Principal::parse(&format!("node-{i}.cluster.internal")).unwrap())
                .collect(),
            valid_after: 1_000,
            valid_before: 2_000,
            serial: 1,
            key_id: "test".to_owned(),
        }
    }

    #[test]
    fn a_kms_ca_signs_certificates_that_verify_and_refuses_another_keys_signature() {
        use crate::keyset::{KeyAlgorithm, KeySet};
        let keys = KeySet::generate(&[KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa], 0).unwrap();
        let (ca, _) = kms_ca(3, 3);
        let certs = crate::certificate::sign_set(&ca, &keys, &request(3)).unwrap();
        let trusted = ca.public_key().fingerprint(ssh_key::HashAlg::Sha256);
        for (_, cert) in &certs {
            cert.validate_at(1_500, [&trusted]).unwrap();
        }
        // KMS answering with another key's signature is never stored.
        let err = crate::certificate::sign_set(&kms_ca(3, 4).0, &keys, &request(3)).unwrap_err();
        assert!(err.to_string().contains("KMS key arn:aws:kms"), "{err}");
    }

    #[test]
    fn a_body_over_kms_limit_is_refused_before_kms_is_called() {
        use crate::keyset::{KeyAlgorithm, KeySet};
        let keys = KeySet::generate(&[KeyAlgorithm::Ed25519], 0).unwrap();
        // About 30 bytes a name: 200 names make a body over 4,096 bytes.
        let (ca, local) = kms_ca(3, 3);
        let err = crate::certificate::sign_set(&ca, &keys, &request(200)).unwrap_err();
        assert!(err.to_string().contains("KMS signs at most 4096"), "{err}");
        assert_eq!(local.faults.count("kms:Sign"), 0, "KMS was called");
    }

    /// kms:Sign failing (throttled past the SDK's retries, refused): the
    /// set gets no certificate, and the error says KMS failed and why.
    #[test]
    fn a_failing_sign_gives_no_certificate_and_names_kms() {
        use crate::keyset::{KeyAlgorithm, KeySet};
        let keys = KeySet::generate(&[KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa], 0).unwrap();
        let (ca, local) = kms_ca(3, 3);
        local.faults.fail_nth("kms:Sign", 2);
        let err = crate::certificate::sign_set(&ca, &keys, &request(3))
            .unwrap_err()
            .to_string();
        assert!(err.contains("kms:Sign") && err.contains("injected failure"), "{err}");
        assert_eq!(local.signed.load(std::sync::atomic::Ordering::SeqCst), 1);
        // The next attempt signs both.
        assert_eq!(crate::certificate::sign_set(&ca, &keys, &request(3)).unwrap().len(), 2);
    }

    #[test]
    fn key_specs_without_an_ssh_ca_signature_are_refused_by_name() {
        for spec in ["ECC_SECG_P256K1", "ECC_NIST_P521", "SYMMETRIC_DEFAULT", "SM2"] {
            let err = KmsAlgorithm::for_key_spec(spec).unwrap_err();
            assert!(err.contains(spec), "{err}");
        }
        assert_eq!(KmsAlgorithm::for_key_spec("RSA_4096"), Ok(KmsAlgorithm::Rsa));
    }
}
