//! AWS KMS: the host CA whose private key never leaves it
//! ([`crate::certificate::kms`]). `CreateKey` and `GetPublicKey` for
//! `ca init`, `Sign` for every certificate.

use std::sync::Arc;
use std::time::Duration;

use aws_config::timeout::TimeoutConfig;

use aws_sdk_kms::primitives::Blob;
use aws_sdk_kms::types::{KeySpec, KeyUsageType, MessageType, SigningAlgorithmSpec, Tag};

use crate::aws::{AwsError, Call};
pub use crate::certificate::kms::KmsCaError;
use crate::certificate::kms::{CA_TAG, CaKeys, KmsAlgorithm, KmsCa, KmsSign};

/// The KMS API.
#[derive(Clone, Debug)]
pub struct Kms {
    client: aws_sdk_kms::Client,
}

/// How long one `kms:Sign` may take, retries included: the certificate
/// builder blocks a worker thread on it, which the rotation function's
/// step budget cannot cut short (KMS signs in well under a second).
const SIGN_TIMEOUT: Duration = Duration::from_secs(10);

/// How often `ca init --kms` reads a key it just created that KMS does not
/// show yet (CreateKey is eventually consistent: the KMS Developer Guide,
/// "Eventual consistency"), one second apart.
const NEW_KEY_READS: u32 = 5;

impl Kms {
    /// A client for `config`'s region and credentials.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        Kms {
            client: aws_sdk_kms::Client::new(config),
        }
    }

    /// Creates an asymmetric signing key for `algorithm`, tagged
    /// [`CA_TAG`] (the only tag: the shipped admin policy may set no
    /// other on a key); its ARN.
    pub async fn create_ca_key(&self, algorithm: KmsAlgorithm, description: &str) -> Result<String, KmsCaError> {
        let call = Call::new("kms:CreateKey", format!("a {} signing key", algorithm.key_spec()));
        let tag = Tag::builder()
            .tag_key(CA_TAG.0)
            .tag_value(CA_TAG.1)
            .build()
            .map_err(|e| KmsCaError::Unusable {
                key: "(new)".to_owned(),
                reason: format!("the tag: {e}"),
            })?;
        let out = self
            .client
            .create_key()
            .key_spec(KeySpec::from(algorithm.key_spec()))
            .key_usage(KeyUsageType::SignVerify)
            .description(description)
            .tags(tag)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        out.key_metadata()
            .map(|m| m.arn().unwrap_or(m.key_id()).to_owned())
            .ok_or_else(|| KmsCaError::Unusable {
                key: "(new)".to_owned(),
                reason: "CreateKey answered no key metadata".to_owned(),
            })
    }

    /// [`Kms::ca`] of a key CreateKey just made: read again, a second
    /// apart, while KMS does not show it yet (not found, or its tag not
    /// yet granting access).
    pub async fn new_ca(&self, key: &str) -> Result<KmsCa, KmsCaError> {
        let mut attempt = 1;
        loop {
            match self.ca(key).await {
                Err(KmsCaError::Aws(AwsError::AccessDenied { .. } | AwsError::NotFound { .. }))
                | Err(KmsCaError::Unusable { .. })
                    if attempt < NEW_KEY_READS =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                other => return other,
            }
        }
    }

    /// The CA for the KMS key `key` (an id, ARN, alias name or alias ARN):
    /// its ARN, key spec and public key from GetPublicKey, checked to be a
    /// signing key SSH can use, bound to this client.
    pub async fn ca(&self, key: &str) -> Result<KmsCa, KmsCaError> {
        let call = Call::new("kms:GetPublicKey", format!("key {key}"));
        let out = self.client.get_public_key().key_id(key).send().await.map_err(|e| {
            let code = aws_sdk_kms::error::ProvideErrorMetadata::code(&e).map(str::to_owned);
            match explain(code.as_deref(), key) {
                Some((reason, true)) => KmsCaError::Unavailable {
                    key: key.to_owned(),
                    reason,
                },
                Some((reason, false)) => KmsCaError::Unusable {
                    key: key.to_owned(),
                    reason,
                },
                None => KmsCaError::Aws(AwsError::from_sdk(e, &call)),
            }
        })?;
        let unusable = |reason: String| KmsCaError::Unusable {
            key: key.to_owned(),
            reason,
        };
        if out.key_usage() != Some(&KeyUsageType::SignVerify) {
            return Err(unusable(format!(
                "its key usage is {}, and a CA signs: create it with --key-usage SIGN_VERIFY",
                out.key_usage().map_or("unknown", |u| u.as_str())
            )));
        }
        // Real KMS answers KeySpec; CustomerMasterKeySpec is its deprecated
        // twin (same value), read when KeySpec is missing.
        #[allow(deprecated)]
        let spec = out
            .key_spec()
            .map(|s| s.as_str().to_owned())
            .or_else(|| out.customer_master_key_spec().map(|s| s.as_str().to_owned()))
            .ok_or_else(|| unusable("GetPublicKey answered no key spec".to_owned()))?;
        let algorithm = KmsAlgorithm::for_key_spec(&spec).map_err(unusable)?;
        let offered = out.signing_algorithms();
        if !offered.iter().any(|a| a.as_str() == algorithm.signing_algorithm()) {
            return Err(unusable(format!(
                "it does not offer {}, the signing algorithm SSH needs of a {spec} key",
                algorithm.signing_algorithm()
            )));
        }
        let der = out
            .public_key()
            .ok_or_else(|| unusable("GetPublicKey answered no public key".to_owned()))?;
        let public = algorithm.public_key(der.as_ref()).map_err(unusable)?;
        let arn = out.key_id().unwrap_or(key).to_owned();
        let ca = KmsCa::new(arn, spec, &public).map_err(unusable)?;
        Ok(ca.bind(self.signer()))
    }

    /// What signs for a KMS CA read from its secret.
    pub fn signer(&self) -> Arc<dyn KmsSign> {
        Arc::new(self.clone())
    }
}

impl KmsSign for Kms {
    /// `kms:Sign` with `MessageType` RAW. ssh-key's builder signs
    /// synchronously, so the call blocks this worker thread
    /// (`block_in_place`) on the multi-thread runtime hostkeyctl and its
    /// Lambda function run on; a current-thread runtime gets an error,
    /// never a panic.
    fn sign(&self, key_arn: &str, algorithm: KmsAlgorithm, message: &[u8]) -> Result<Vec<u8>, String> {
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|_| "kms:Sign needs the tokio runtime hostkeyctl runs in".to_owned())?;
        if handle.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return Err(
                "kms:Sign from a current-thread runtime would block it; run on the multi-thread runtime".to_owned(),
            );
        }
        let call = Call::new("kms:Sign", format!("key {key_arn}"));
        let request = self
            .client
            .sign()
            .key_id(key_arn)
            .message(Blob::new(message))
            .message_type(MessageType::Raw)
            .signing_algorithm(SigningAlgorithmSpec::from(algorithm.signing_algorithm()))
            .customize()
            .config_override(
                aws_sdk_kms::config::Builder::default()
                    .timeout_config(TimeoutConfig::builder().operation_timeout(SIGN_TIMEOUT).build()),
            )
            .send();
        let out = tokio::task::block_in_place(|| handle.block_on(request).map_err(Box::new)).map_err(|e| {
            let code = aws_sdk_kms::error::ProvideErrorMetadata::code(&*e).map(str::to_owned);
            explain(code.as_deref(), key_arn).map_or_else(|| AwsError::from_sdk(*e, &call).to_string(), |(m, _)| m)
        })?;
        if out.key_id().is_some_and(|id| id != key_arn) {
            return Err(format!(
                "kms:Sign answered for key {}, not {key_arn}",
                out.key_id().unwrap_or_default()
            ));
        }
        out.signature()
            .map(|b| b.as_ref().to_vec())
            .ok_or_else(|| "kms:Sign answered no signature".to_owned())
    }
}

/// What KMS's refusal of a CA key means, what to do, and whether it is
/// passing (KMS API Reference, Sign and GetPublicKey errors); `None` for
/// the errors every call shares (access denied, throttling, network),
/// which [`AwsError`] explains.
fn explain(code: Option<&str>, key: &str) -> Option<(String, bool)> {
    // The command an admin pastes names the key through the one quoting function.
    let quoted = crate::shell::quote(key).unwrap_or_default();
    let key = crate::escape::escape(key);
    Some(match code? {
        "DisabledException" => (
            format!(
                "KMS key {key} is disabled: enable it (`aws kms enable-key --key-id {quoted}`), or sign with another CA"
            ),
            false,
        ),
        "KMSInvalidStateException" => (
            format!(
                "KMS key {key} cannot sign in its state (pending deletion?): cancel the deletion (`aws kms cancel-key-deletion`) and enable it, or move to another CA (docs/certificates.md, \"Rotating the CA\")"
            ),
            false,
        ),
        "NotFoundException" => (
            format!("KMS key {key} does not exist in this account and Region: check the key id and --region"),
            false,
        ),
        "InvalidKeyUsageException" => (
            format!(
                "KMS key {key} does not sign with this algorithm (a CA needs KeyUsage SIGN_VERIFY and the key spec the CA secret names)"
            ),
            false,
        ),
        "UnsupportedOperationException" => (
            format!("KMS key {key} is not an asymmetric signing key (a symmetric or HMAC key has no public key)"),
            false,
        ),
        "KeyUnavailableException" | "DependencyTimeoutException" | "KMSInternalException" => {
            (format!("KMS could not use key {key} now ({}); try again", code?), true)
        }
        _ => return None,
    })
}

impl CaKeys for Kms {
    async fn create(&self, algorithm: KmsAlgorithm, description: &str) -> Result<String, KmsCaError> {
        self.create_ca_key(algorithm, description).await
    }

    async fn ca(&self, key: &str, new: bool) -> Result<KmsCa, KmsCaError> {
        if new {
            self.new_ca(key).await
        } else {
            Kms::ca(self, key).await
        }
    }
}
