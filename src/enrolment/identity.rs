//! Which EC2 instance a node is, as AWS signed it: the instance identity
//! document (IID) from IMDS (`/latest/dynamic/instance-identity/document`)
//! and its RSA-SHA256 signature (`.../signature`, base64), verified with
//! AWS's public key for the document's Region (EC2 User Guide, "Verify the
//! instance identity document"; the keys are those of "AWS public
//! certificates by Region", regions-certs.html).
//!
//! The certificates' dates do not matter: AWS re-issues them around the
//! same key (17 commercial Regions share one), so the table holds public
//! keys, and a Region it does not list is refused rather than guessed.

use std::collections::BTreeMap;
use std::net::IpAddr;

use base64ct::Encoding;
use rsa::pkcs8::DecodePublicKey;
use sha2::Digest;

/// AWS's key for the plain RSA-SHA256 signature of the Regions that share
/// it (the us-east-1 certificate of regions-certs.html, valid 2024-04-29
/// to 2029-04-28, SHA-256 65:02:D1:18:...:EA:A5:9F; the same key in each
/// of these Regions' certificates, as SPIRE's table shows).
const SHARED_KEY: &str = "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQCHvRjf/0kStpJ248khtIaN8qkDN3tkw4VjvA9nvPl2anJO+eIBUqPfQG09kZlwpWpmyO8bGB2RWqWxCwuB/dcnIob6w420k9WY5C0IIGtDRNauN3kuvGXkw3HEnF0EjYr0pcyWUvByWY4KswZV42X7Y7XSS13hOIcL6NLA+H94/QIDAQAB";

/// The Regions whose certificates carry [`SHARED_KEY`].
const SHARED_KEY_REGIONS: [&str; 17] = [
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "ca-central-1",
    "sa-east-1",
    "eu-central-1",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-north-1",
    "ap-south-1",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-northeast-3",
    "ap-southeast-1",
    "ap-southeast-2",
];

/// Where a Region's key comes from: what the signer logs for each
/// document it believes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// AWS's, built in.
    Aws,
    /// Configured for a Region the table lacks.
    Added,
    /// Configured in place of AWS's, explicitly (a test bed's signer).
    Replaced,
}

impl std::fmt::Display for KeySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeySource::Aws => "AWS's key, built in",
            KeySource::Added => "a configured key (HOSTKEYCTL_ENROL_IID_KEYS)",
            KeySource::Replaced => "a configured key IN PLACE OF AWS's (HOSTKEYCTL_ENROL_IID_KEYS_REPLACE)",
        })
    }
}

/// The public keys that sign identity documents, by Region, with where
/// each comes from.
#[derive(Clone, Debug, Default)]
pub struct IidKeys(BTreeMap<String, (rsa::RsaPublicKey, KeySource)>);

impl IidKeys {
    /// AWS's keys (module documentation).
    pub fn aws() -> Self {
        let key = parse_spki("us-east-1", SHARED_KEY).expect("the shared key parses");
        IidKeys(
            SHARED_KEY_REGIONS
                .iter()
                .map(|r| ((*r).to_owned(), (key.clone(), KeySource::Aws)))
                .collect(),
        )
    }

    /// Trusts `spki_base64` (a SubjectPublicKeyInfo) for `region`, a
    /// Region with no key yet. A Region AWS's table holds is refused:
    /// whoever may change the signer's configuration must not make it
    /// believe documents AWS did not sign ([`IidKeys::replace`] says so
    /// explicitly).
    pub fn add(&mut self, region: &str, spki_base64: &str) -> Result<(), IdentityError> {
        if let Some((_, source)) = self.0.get(region) {
            return Err(IdentityError::Known {
                region: crate::escape::escape(region),
                by: *source,
            });
        }
        let key = parse_spki(region, spki_base64)?;
        self.0.insert(region.to_owned(), (key, KeySource::Added));
        Ok(())
    }

    /// Trusts `spki_base64` for `region` in place of any key it had: a
    /// test bed's own signer, never AWS's Regions in production.
    pub fn replace(&mut self, region: &str, spki_base64: &str) -> Result<(), IdentityError> {
        let key = parse_spki(region, spki_base64)?;
        self.0.insert(region.to_owned(), (key, KeySource::Replaced));
        Ok(())
    }

    /// Each Region whose key is not AWS's built-in one, with its source.
    pub fn configured(&self) -> Vec<(String, KeySource)> {
        self.0
            .iter()
            .filter(|(_, (_, s))| *s != KeySource::Aws)
            .map(|(r, (_, s))| (r.clone(), *s))
            .collect()
    }
}

fn parse_spki(region: &str, spki_base64: &str) -> Result<rsa::RsaPublicKey, IdentityError> {
    let der = base64ct::Base64::decode_vec(spki_base64.trim())
        .map_err(|_| IdentityError::Key(crate::escape::escape(region)))?;
    rsa::RsaPublicKey::from_public_key_der(&der).map_err(|_| IdentityError::Key(crate::escape::escape(region)))
}

/// What a verified identity document says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `instanceId`.
    pub instance_id: String,
    /// `accountId` (HyperPod's instances live in a service account).
    pub account_id: String,
    /// `region`.
    pub region: String,
    /// `privateIp`.
    pub private_ip: IpAddr,
    /// `pendingTime`: when the instance started (Unix seconds).
    pub pending_time: i64,
    /// Which key verified the document.
    pub verified_by: KeySource,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawIdentity {
    instance_id: String,
    account_id: String,
    region: String,
    private_ip: String,
    pending_time: String,
}

/// Why an identity document is not believed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// Not an identity document.
    #[error("the instance identity document is not one: {0}")]
    Shape(String),
    /// No key for its Region.
    #[error("no AWS identity key is known for Region {0}: hostkeyctl refuses what it cannot verify")]
    UnknownRegion(String),
    /// A configured key does not parse.
    #[error("the identity key configured for Region {0} is not an RSA SubjectPublicKeyInfo in base64")]
    Key(String),
    /// A configured key for a Region that has AWS's.
    #[error(
        "Region {region} already has {by}: a configured key may only add a Region hostkeyctl does not know. Remove it from HOSTKEYCTL_ENROL_IID_KEYS: a key in place of AWS's would make the signer believe documents AWS never signed"
    )]
    Known {
        /// The Region.
        region: String,
        /// Where its key comes from.
        by: KeySource,
    },
    /// The signature is not AWS's over these bytes.
    #[error("the instance identity document's signature does not verify with AWS's key for its Region")]
    Signature,
}

/// The identity `document` proves, if `signature_base64` is AWS's
/// signature of exactly these bytes.
pub fn verify(document: &str, signature_base64: &str, keys: &IidKeys) -> Result<Identity, IdentityError> {
    // The Region picks the key; nothing else is read before the signature holds.
    let raw: RawIdentity = serde_json::from_str(document).map_err(|e| IdentityError::Shape(e.to_string()))?;
    let (key, source) = keys
        .0
        .get(&raw.region)
        .ok_or_else(|| IdentityError::UnknownRegion(crate::escape::escape(&raw.region)))?;
    let compact: String = signature_base64.chars().filter(|c| !c.is_whitespace()).collect();
    let signature = base64ct::Base64::decode_vec(&compact).map_err(|_| IdentityError::Signature)?;
    let digest = sha2::Sha256::digest(document.as_bytes());
    key.verify(rsa::Pkcs1v15Sign::new::<sha2::Sha256>(), &digest, &signature)
        .map_err(|_| IdentityError::Signature)?;
    let private_ip = raw
        .private_ip
        .parse()
        .map_err(|_| IdentityError::Shape(format!("privateIp {}", crate::escape::escape(&raw.private_ip))))?;
    let pending_time = time::OffsetDateTime::parse(&raw.pending_time, &time::format_description::well_known::Rfc3339)
        .map_err(|_| IdentityError::Shape(format!("pendingTime {}", crate::escape::escape(&raw.pending_time))))?
        .unix_timestamp();
    Ok(Identity {
        instance_id: raw.instance_id,
        account_id: raw.account_id,
        region: raw.region,
        private_ip,
        pending_time,
        verified_by: *source,
    })
}

#[cfg(test)]
mod tests {
    use super::{IdentityError, IidKeys, KeySource, verify};
    use base64ct::Encoding;
    use rsa::pkcs8::EncodePublicKey;
    use sha2::Digest;

    const DOCUMENT: &str = r#"{
  "accountId" : "111122223333",
  "architecture" : "x86_64",
  "availabilityZone" : "us-east-1a",
  "imageId" : "ami-0abcdef1234567890",
  "instanceId" : "i-0123456789abcdef0",
  "instanceType" : "ml.c5.xlarge",
  "pendingTime" : "2026-12-04T01:00:00Z",
  "privateIp" : "10.1.0.5",
  "region" : "us-east-1",
  "version" : "2017-09-30"
}"#;

    fn signer() -> (rsa::RsaPrivateKey, IidKeys) {
        let key = rsa::RsaPrivateKey::new(&mut rand::rng(), 2048).unwrap();
        let spki = key.to_public_key().to_public_key_der().unwrap();
        let mut keys = IidKeys::default();
        keys.add("us-east-1", &base64ct::Base64::encode_string(spki.as_bytes()))
            .unwrap();
        (key, keys)
    }

    fn sign(key: &rsa::RsaPrivateKey, document: &str) -> String {
        let digest = sha2::Sha256::digest(document.as_bytes());
        let sig = key.sign(rsa::Pkcs1v15Sign::new::<sha2::Sha256>(), &digest).unwrap();
        base64ct::Base64::encode_string(&sig)
    }

    /// Whoever may change the signer's configuration must not make it
    /// believe documents AWS never signed: a configured key only adds a
    /// Region AWS's table lacks; one in place of AWS's is the explicit
    /// `replace`, and every document says which key verified it.
    #[test]
    fn a_configured_key_only_adds_a_region_and_a_replacement_is_explicit_and_named() {
        let (key, test_keys) = signer();
        let spki = {
            use rsa::pkcs8::EncodePublicKey;
            base64ct::Base64::encode_string(key.to_public_key().to_public_key_der().unwrap().as_bytes())
        };
        let mut keys = IidKeys::aws();
        let refused = keys.add("us-east-1", &spki).unwrap_err();
        assert!(
            matches!(refused, IdentityError::Known { ref region, by: KeySource::Aws } if region == "us-east-1"),
            "{refused}"
        );
        assert!(refused.to_string().contains("may only add a Region"), "{refused}");
        // Still AWS's key: the test key's signature is not believed.
        assert_eq!(
            verify(DOCUMENT, &sign(&key, DOCUMENT), &keys),
            Err(IdentityError::Signature)
        );
        keys.add("mars-1", &spki).unwrap();
        assert_eq!(keys.configured(), [("mars-1".to_owned(), KeySource::Added)]);
        keys.replace("us-east-1", &spki).unwrap();
        let identity = verify(DOCUMENT, &sign(&key, DOCUMENT), &keys).unwrap();
        assert_eq!(identity.verified_by, KeySource::Replaced);
        assert_eq!(
            verify(DOCUMENT, &sign(&key, DOCUMENT), &test_keys).unwrap().verified_by,
            KeySource::Added
        );
    }

    #[test]
    fn a_document_signed_by_the_regions_key_is_believed_and_nothing_else() {
        let (key, keys) = signer();
        let identity = verify(DOCUMENT, &sign(&key, DOCUMENT), &keys).unwrap();
        assert_eq!(identity.instance_id, "i-0123456789abcdef0");
        assert_eq!(identity.private_ip.to_string(), "10.1.0.5");
        // One byte changed: another instance claimed with this signature.
        let forged = DOCUMENT.replace("i-0123456789abcdef0", "i-0123456789abcdef1");
        assert_eq!(
            verify(&forged, &sign(&key, DOCUMENT), &keys),
            Err(IdentityError::Signature)
        );
        // AWS's real key does not sign what the test key signed.
        assert_eq!(
            verify(DOCUMENT, &sign(&key, DOCUMENT), &IidKeys::aws()),
            Err(IdentityError::Signature)
        );
        let elsewhere = DOCUMENT.replace("\"us-east-1\"", "\"mars-1\"");
        assert!(matches!(
            verify(&elsewhere, &sign(&key, &elsewhere), &keys),
            Err(IdentityError::UnknownRegion(_))
        ));
    }
}
