//! Enrolment's outside systems in memory: the cluster's record
//! ([`crate::enrolment::ClusterNodes`]), the bindings table
//! ([`crate::enrolment::Bindings`], [`crate::enrolment::admin::BindingsAdmin`],
//! with DynamoDB's conditional write), the set's fingerprint tags
//! ([`crate::enrolment::SetKeys`]), a node's IMDS
//! ([`crate::enrolment::node::Imds`]), the signer as the node reaches it
//! ([`crate::enrolment::node::Signer`], the decision run in process) and
//! KMS as a CA ([`crate::certificate::kms::KmsSign`], a local P-256 key). Each
//! has [`Faults`].

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::faults::Faults;
use super::fleet::lock;
use crate::aws_error::AwsError;
use crate::certificate::kms::{CaKeys, KmsAlgorithm, KmsCa, KmsCaError, KmsSign};
use crate::certificate::{CaKey, Principal};
use crate::enrolment::admin::BindingsAdmin;
use crate::enrolment::node::{Answer, Imds, Signer, Trust, TrustAsk};
use crate::enrolment::proof::EnrolRequest;
use crate::enrolment::{Binding, Bindings, ClusterNodes, Member, Policy, SetKeys};

/// A cluster's nodes, as its record lists them.
#[derive(Debug, Default)]
pub struct MemCluster {
    /// Its members.
    pub members: Mutex<Vec<Member>>,
    /// Faults (`sagemaker:DescribeClusterNode`).
    pub faults: Faults,
}

impl MemCluster {
    /// A cluster of `members`.
    pub fn new(members: Vec<Member>) -> Self {
        MemCluster {
            members: Mutex::new(members),
            faults: Faults::new(),
        }
    }
}

impl ClusterNodes for MemCluster {
    fn membership(&self) -> String {
        "the test's members".to_owned()
    }

    async fn member(&self, instance_id: &str) -> Result<Option<Member>, AwsError> {
        self.faults.enter("sagemaker:DescribeClusterNode")?;
        Ok(lock(&self.members)
            .iter()
            .find(|m| m.instance_id == instance_id)
            .cloned())
    }
}

/// The bindings table, with DynamoDB's conditional write.
#[derive(Debug, Default)]
pub struct MemBindings {
    /// Every binding, by instance id.
    pub all: Mutex<BTreeMap<String, Binding>>,
    /// Faults (`dynamodb:GetItem`, `dynamodb:PutItem`, `dynamodb:Scan`,
    /// `dynamodb:UpdateItem`).
    pub faults: Faults,
}

impl MemBindings {
    /// The binding of `instance_id`, as stored.
    pub fn of(&self, instance_id: &str) -> Option<Binding> {
        lock(&self.all).get(instance_id).cloned()
    }
}

impl Bindings for MemBindings {
    async fn get(&self, instance_id: &str) -> Result<Option<Binding>, String> {
        self.faults.enter("dynamodb:GetItem")?;
        Ok(self.of(instance_id))
    }

    async fn put(&self, instance_id: &str, binding: &Binding, previous: Option<&Binding>) -> Result<bool, String> {
        self.faults.enter("dynamodb:PutItem")?;
        let mut all = lock(&self.all);
        if all.get(instance_id) != previous {
            return Ok(false);
        }
        all.insert(instance_id.to_owned(), binding.clone());
        Ok(true)
    }

    async fn revoked_keys(&self) -> Result<Vec<Vec<String>>, String> {
        self.faults.enter("dynamodb:Scan")?;
        Ok(lock(&self.all)
            .values()
            .filter(|b| b.revoked)
            .map(|b| b.host_keys.clone())
            .collect())
    }
}

impl BindingsAdmin for MemBindings {
    async fn list(&self) -> Result<Vec<(String, Binding)>, AwsError> {
        self.faults.enter("dynamodb:Scan")?;
        Ok(lock(&self.all).iter().map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    async fn revoke(&self, instance_id: &str) -> Result<bool, AwsError> {
        self.faults.enter("dynamodb:UpdateItem")?;
        Ok(lock(&self.all).get_mut(instance_id).map(|b| b.revoked = true).is_some())
    }
}

/// The set's fingerprints, as its secret's tags hold them.
#[derive(Debug, Default)]
pub struct MemSetKeys {
    /// SHA-256 fingerprints.
    pub fingerprints: Vec<String>,
    /// Faults (`secretsmanager:DescribeSecret`).
    pub faults: Faults,
}

impl MemSetKeys {
    /// The set of these `keys`.
    pub fn of(keys: &[ssh_key::PrivateKey]) -> Self {
        MemSetKeys {
            fingerprints: keys
                .iter()
                .map(|k| k.public_key().fingerprint(ssh_key::HashAlg::Sha256).to_string())
                .collect(),
            faults: Faults::new(),
        }
    }
}

impl MemSetKeys {
    /// The set of these fingerprints.
    pub fn with(fingerprints: Vec<String>) -> Self {
        MemSetKeys {
            fingerprints,
            faults: Faults::new(),
        }
    }
}

impl SetKeys for MemSetKeys {
    async fn fingerprints(&self) -> Result<Vec<String>, String> {
        self.faults.enter("secretsmanager:DescribeSecret")?;
        Ok(self.fingerprints.clone())
    }
}

/// A node's instance metadata: its identity document and signature.
#[derive(Debug, Default)]
pub struct MemImds {
    /// The document.
    pub document: String,
    /// Its base64 signature.
    pub signature: String,
    /// Faults (`imds:GetInstanceIdentityDocument`).
    pub faults: Faults,
}

impl MemImds {
    /// IMDS serving `document` signed `signature`.
    pub fn new(document: String, signature: String) -> Self {
        MemImds {
            document,
            signature,
            faults: Faults::new(),
        }
    }
}

impl Imds for MemImds {
    async fn identity(&self) -> Result<(String, String), String> {
        self.faults.enter("imds:GetInstanceIdentityDocument")?;
        Ok((self.document.clone(), self.signature.clone()))
    }
}

/// The signer run in process over a cluster, a bindings table and a CA,
/// as a node reaches it (`lambda:InvokeFunction`); `swap_in` answers
/// other certificates than it signed (a signer that lies).
pub struct MemSigner<'a> {
    /// Its ARN: the audience every proof names.
    pub audience: String,
    /// The decision's policy.
    pub policy: Policy,
    /// The cluster.
    pub cluster: &'a MemCluster,
    /// The bindings.
    pub bindings: &'a MemBindings,
    /// The CA.
    pub ca: &'a CaKey,
    /// Certificates to answer in place of those signed.
    pub swap_in: Option<Vec<String>>,
    /// Faults (`lambda:InvokeFunction`).
    pub faults: Faults,
}

impl Signer for MemSigner<'_> {
    fn audience(&self) -> &str {
        &self.audience
    }

    async fn enrol(&self, request: &EnrolRequest, asked: &[Principal]) -> Result<Answer, String> {
        self.faults.enter("lambda:InvokeFunction")?;
        let now = request.issued_at_ms / 1000;
        let enrolled = crate::enrolment::enrol(
            request,
            asked,
            self.cluster,
            self.bindings,
            &(),
            self.ca,
            &self.policy,
            now,
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(Answer {
            instance_id: enrolled.instance_id,
            principals: enrolled.principals.iter().map(|p| p.as_str().to_owned()).collect(),
            certificates: self.swap_in.clone().unwrap_or_else(|| {
                enrolled
                    .certificates
                    .iter()
                    .map(crate::certificate::certificate_line)
                    .collect()
            }),
            revoked: Vec::new(),
        })
    }

    async fn trust(&self, request: &EnrolRequest, ask: TrustAsk) -> Result<Trust, String> {
        self.faults.enter("lambda:InvokeFunction")?;
        let now = request.issued_at_ms / 1000;
        match ask {
            TrustAsk::Claim => crate::enrolment::claim(request, self.cluster, self.bindings, &self.policy, now).await,
            TrustAsk::Trust => crate::enrolment::trust(request, self.cluster, self.bindings, &self.policy, now).await,
        }
        .map_err(|e| e.to_string())?;
        Ok(Trust {
            ca: self.ca.public_line(),
            revoked: Vec::new(),
        })
    }
}

/// The key id a [`MemKms`] answers for from the start.
pub const MEM_KMS_KEY: &str = "arn:aws:kms:us-east-1:111122223333:key/0000000a-0000-0000-0000-000000000000";

/// KMS played by a local P-256 key: DER signatures, as KMS answers. Every
/// key it knows ([`MEM_KMS_KEY`], and each it created) is that one key.
pub struct MemKms {
    key: p256::ecdsa::SigningKey,
    /// Signatures made.
    pub signed: AtomicUsize,
    /// The keys CreateKey made, in order.
    pub created: Mutex<Vec<String>>,
    /// Faults (`kms:Sign`, `kms:CreateKey`, `kms:GetPublicKey`).
    pub faults: Faults,
}

impl MemKms {
    /// KMS with the P-256 key whose scalar is 32 bytes of `seed`.
    pub fn p256(seed: u8) -> Self {
        MemKms {
            key: p256::ecdsa::SigningKey::from_slice(&[seed; 32]).expect("a valid P-256 scalar"),
            signed: AtomicUsize::new(0),
            created: Mutex::new(Vec::new()),
            faults: Faults::new(),
        }
    }

    /// Its public key, as KMS's GetPublicKey answers it (DER).
    pub fn public_der(&self) -> Vec<u8> {
        use p256::pkcs8::EncodePublicKey;
        self.key
            .verifying_key()
            .to_public_key_der()
            .expect("a P-256 key encodes")
            .as_bytes()
            .to_vec()
    }
}

impl KmsSign for MemKms {
    fn sign(&self, _key_arn: &str, algorithm: KmsAlgorithm, message: &[u8]) -> Result<Vec<u8>, String> {
        use p256::ecdsa::signature::Signer as _;
        self.faults.enter("kms:Sign")?;
        if algorithm != KmsAlgorithm::P256 {
            return Err(format!(
                "ValidationException: {algorithm:?} is not this key's signing algorithm"
            ));
        }
        self.signed.fetch_add(1, Ordering::SeqCst);
        let sig: p256::ecdsa::Signature = self.key.sign(message);
        Ok(sig.to_der().as_bytes().to_vec())
    }
}

impl CaKeys for MemKms {
    async fn create(&self, algorithm: KmsAlgorithm, _description: &str) -> Result<String, KmsCaError> {
        self.faults.enter("kms:CreateKey").map_err(AwsError::from)?;
        if algorithm != KmsAlgorithm::P256 {
            return Err(KmsCaError::Unusable {
                key: "(new)".to_owned(),
                reason: format!("this double holds one P-256 key, not {}", algorithm.key_spec()),
            });
        }
        let mut created = lock(&self.created);
        let arn = format!("arn:aws:kms:us-east-1:111122223333:key/mem-{}", created.len() + 1);
        created.push(arn.clone());
        Ok(arn)
    }

    async fn ca(&self, key: &str, _new: bool) -> Result<KmsCa, KmsCaError> {
        self.faults.enter("kms:GetPublicKey").map_err(AwsError::from)?;
        if key != MEM_KMS_KEY && !lock(&self.created).iter().any(|k| k == key) {
            return Err(KmsCaError::Aws(AwsError::NotFound {
                action: "kms:GetPublicKey",
                resource: format!("key {key}"),
                message: "NotFoundException".to_owned(),
            }));
        }
        let unusable = |reason: String| KmsCaError::Unusable {
            key: key.to_owned(),
            reason,
        };
        let public = KmsAlgorithm::P256.public_key(&self.public_der()).map_err(unusable)?;
        KmsCa::new(key.to_owned(), "ECC_NIST_P256".to_owned(), &public).map_err(unusable)
    }
}
