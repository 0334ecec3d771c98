//! The signer's decision, with AWS's identity key played by a test key and
//! the cluster and bindings as src/testing's doubles (the memory tier;
//! these were src/enrolment/tests.rs).

use base64ct::Encoding;
use rsa::pkcs8::EncodePublicKey;
use sha2::Digest;

use hostkeyctl::certificate::{CaKey, Principal};
use hostkeyctl::enrolment::identity::IidKeys;
use hostkeyctl::enrolment::proof::{EnrolRequest, request};
use hostkeyctl::enrolment::{EnrolError, Enrolled, Member, Policy, SetKeys, enrol};
use hostkeyctl::keyset::{HostKey, KeyAlgorithm, KeySet};
use hostkeyctl::testing::{Faults, MemBindings, MemCluster, MemImds, MemSigner};

pub(super) const NOW: i64 = 1_800_000_000;
pub(super) const AUDIENCE: &str = "arn:aws:lambda:us-east-1:111122223333:function:hostkeyctl-enrolment";

pub(super) struct Aws {
    key: rsa::RsaPrivateKey,
    keys: IidKeys,
}

impl Aws {
    pub(super) fn new() -> Self {
        let key = rsa::RsaPrivateKey::new(&mut rand::rng(), 2048).unwrap();
        let spki = key.to_public_key().to_public_key_der().unwrap();
        let mut keys = IidKeys::default();
        keys.add("us-east-1", &base64ct::Base64::encode_string(spki.as_bytes()))
            .unwrap();
        Aws { key, keys }
    }

    /// The document and signature IMDS serves instance `id` at `ip`.
    pub(super) fn imds(&self, id: &str, ip: &str, started: i64) -> (String, String) {
        let pending = time::OffsetDateTime::from_unix_timestamp(started)
            .unwrap()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap();
        let document = format!(
            "{{\n  \"accountId\" : \"111122223333\",\n  \"instanceId\" : \"{id}\",\n  \"pendingTime\" : \"{pending}\",\n  \"privateIp\" : \"{ip}\",\n  \"region\" : \"us-east-1\"\n}}"
        );
        let digest = sha2::Sha256::digest(document.as_bytes());
        let sig = self
            .key
            .sign(rsa::Pkcs1v15Sign::new::<sha2::Sha256>(), &digest)
            .unwrap();
        (document, base64ct::Base64::encode_string(&sig))
    }

    pub(super) fn policy(&self) -> Policy {
        Policy {
            keys: self.keys.clone(),
            region: "us-east-1".to_owned(),
            audience: AUDIENCE.to_owned(),
            validity: 86_400,
            skew: 300,
            first_within: 3_600,
            renew_every: 600,
        }
    }
}

fn names(list: &[&str]) -> Vec<Principal> {
    list.iter().map(|n| Principal::parse(n).unwrap()).collect()
}

pub(super) fn compute_1() -> Member {
    Member {
        instance_id: "i-0000000000000c001".to_owned(),
        private_ip: "10.1.0.11".parse().unwrap(),
        names: names(&["ip-10-1-0-11.ec2.internal", "10.1.0.11", "compute-1"]),
        image_id: None,
        software_updated_at: None,
    }
}

pub(super) fn node_keys() -> Vec<ssh_key::PrivateKey> {
    let set = KeySet::generate(&[KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa], 0).unwrap();
    set.keys()
        .map(|k| ssh_key::PrivateKey::from_openssh(k.reveal_private_openssh().as_bytes()).unwrap())
        .collect()
}

/// `member`'s request made at `at` (Unix seconds; the request carries
/// milliseconds).
pub(super) fn ask(aws: &Aws, member: &Member, keys: &[ssh_key::PrivateKey], at: i64) -> EnrolRequest {
    let (document, signature) = aws.imds(&member.instance_id, &member.private_ip.to_string(), NOW - 60);
    request(&document, &signature, keys, at * 1000, AUDIENCE).unwrap()
}

/// A signer as these tests set it: AWS's identity key, a CA, the cluster
/// (compute-1 alone), its bindings and the policy.
pub(super) struct Desk {
    pub(super) aws: Aws,
    pub(super) ca: CaKey,
    pub(super) cluster: MemCluster,
    pub(super) bound: MemBindings,
    pub(super) policy: Policy,
}

impl Desk {
    pub(super) fn new() -> Self {
        let aws = Aws::new();
        let policy = aws.policy();
        Desk {
            aws,
            ca: CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap()),
            cluster: MemCluster::new(vec![compute_1()]),
            bound: MemBindings::default(),
            policy,
        }
    }

    /// compute-1's metadata service, its document made a minute ago.
    pub(super) fn imds(&self) -> MemImds {
        let (document, signature) = self.aws.imds(&compute_1().instance_id, "10.1.0.11", NOW - 60);
        MemImds::new(document, signature)
    }

    /// The signer as a node calls it: this desk's cluster, bindings and CA.
    pub(super) fn signer(&self) -> MemSigner<'_> {
        signer(&self.aws, &self.cluster, &self.bound, &self.ca)
    }

    /// A login node's `claim` of `request` at `now`.
    pub(super) async fn claim(
        &self,
        request: &EnrolRequest,
        now: i64,
    ) -> Result<hostkeyctl::enrolment::Trusted, EnrolError> {
        hostkeyctl::enrolment::claim(request, &self.cluster, &self.bound, &self.policy, now).await
    }

    /// The admin revokes `member`'s binding.
    pub(super) fn revoke(&self, member: &Member) {
        self.bound
            .all
            .lock()
            .unwrap()
            .get_mut(&member.instance_id)
            .unwrap()
            .revoked = true;
    }

    /// `member`'s request with `keys`, made at `at`.
    pub(super) fn ask(&self, member: &Member, keys: &[ssh_key::PrivateKey], at: i64) -> EnrolRequest {
        ask(&self.aws, member, keys, at)
    }

    /// `enrol` of `request` at `now`, asking for `asked` names, `set` the
    /// canonical set's keys.
    pub(super) async fn enrol_with(
        &self,
        request: &EnrolRequest,
        asked: &[Principal],
        set: &impl SetKeys,
        now: i64,
    ) -> Result<Enrolled, EnrolError> {
        enrol(
            request,
            asked,
            &self.cluster,
            &self.bound,
            set,
            &self.ca,
            &self.policy,
            now,
        )
        .await
    }

    /// `enrol` of `request` at `now`, asking for no names, with no set.
    pub(super) async fn enrol(&self, request: &EnrolRequest, now: i64) -> Result<Enrolled, EnrolError> {
        self.enrol_with(request, &[], &(), now).await
    }
}

#[tokio::test]
async fn a_member_gets_certificates_for_its_own_keys_and_awss_names_and_every_forgery_nothing() {
    let desk = Desk::new();
    let keys = node_keys();
    let first = desk.ask(&compute_1(), &keys, NOW);
    let enrolled = desk.enrol_with(&first, &names(&["compute-1"]), &(), NOW).await.unwrap();
    assert_eq!(enrolled.certificates.len(), 2);
    let trusted = desk.ca.public_key().fingerprint(ssh_key::HashAlg::Sha256);
    for cert in &enrolled.certificates {
        cert.validate_at(u64::try_from(NOW).unwrap(), [&trusted]).unwrap();
        assert_eq!(
            cert.valid_principals(),
            ["ip-10-1-0-11.ec2.internal", "10.1.0.11", "compute-1"]
        );
    }
    assert_forgeries_refused(&desk, &keys, &first).await;
    // A renewal: the same keys, later.
    let renewed = desk.enrol(&desk.ask(&compute_1(), &keys, NOW + 600), NOW + 600).await;
    assert!(renewed.is_ok(), "{renewed:?}");
    // Another renewal in the same second (the step's enroll, then its
    // timer's first run) is later by milliseconds: not a replay.
    let (document, signature) = desk.aws.imds(&compute_1().instance_id, "10.1.0.11", NOW - 60);
    let soon = request(&document, &signature, &keys, (NOW + 600) * 1000 + 1, AUDIENCE).unwrap();
    let again = desk.enrol(&soon, NOW + 600).await;
    assert!(again.is_ok(), "{again:?}");
}

pub(super) fn refused(e: Result<hostkeyctl::enrolment::Enrolled, EnrolError>) -> String {
    match e {
        // Only what was signed, never its Debug: a refusal was expected.
        Ok(enrolled) => panic!(
            "signed for {} instead of refusing",
            enrolled
                .principals
                .iter()
                .map(Principal::as_str)
                .collect::<Vec<_>>()
                .join(",")
        ),
        Err(e) => e.to_string(),
    }
}

/// Each forgery a stranger can make is refused, and binds nothing; then a
/// renewal of the same keys, later, is signed.
async fn assert_forgeries_refused(desk: &Desk, keys: &[ssh_key::PrivateKey], first: &EnrolRequest) {
    let after_first = desk.bound.all.lock().unwrap().clone();

    // The same request again (a retry whose answer was lost): the same
    // answer, nothing new signed; an earlier one: a replay.
    let again = desk.enrol(first, NOW + 1).await.unwrap();
    assert!(!again.signed);
    let earlier = desk.ask(&compute_1(), keys, NOW - 1);
    let said = refused(desk.enrol(&earlier, NOW + 1).await);
    assert!(said.contains("a replay"), "{said}");
    // Another instance claimed with this instance's signature.
    let mut forged = desk.ask(&compute_1(), keys, NOW + 2);
    forged.document = forged.document.replace("c001", "c002");
    let forged = request(&forged.document, &forged.signature, keys, (NOW + 2) * 1000, AUDIENCE).unwrap();
    let said = refused(desk.enrol(&forged, NOW + 2).await);
    assert!(said.contains("signature does not verify"), "{said}");
    // An instance AWS signed, but no node of the cluster.
    let stranger = Member {
        instance_id: "i-00000000000000bad".to_owned(),
        ..compute_1()
    };
    let said = refused(desk.enrol(&desk.ask(&stranger, keys, NOW + 3), NOW + 3).await);
    assert!(said.contains("no node of this cluster"), "{said}");
    // Names the node does not have.
    let said = refused(
        desk.enrol_with(
            &desk.ask(&compute_1(), keys, NOW + 4),
            &names(&["login.cluster"]),
            &(),
            NOW + 4,
        )
        .await,
    );
    assert!(
        said.contains("login.cluster") && said.contains("not its names"),
        "{said}"
    );
    assert_key_and_time_forgeries_refused(desk, keys).await;
    // Nothing was bound by any refusal.
    assert_eq!(*desk.bound.all.lock().unwrap(), after_first);
}

/// A thief's keys, another address, an old request: refused.
async fn assert_key_and_time_forgeries_refused(desk: &Desk, keys: &[ssh_key::PrivateKey]) {
    // A thief with the document and its own keys: bound to the node's.
    let said = refused(
        desk.enrol(&desk.ask(&compute_1(), &node_keys(), NOW + 5), NOW + 5)
            .await,
    );
    assert!(said.contains("enrolled other host keys"), "{said}");
    // Another address in the document than the cluster's.
    let moved = Member {
        private_ip: "10.1.0.99".parse().unwrap(),
        ..compute_1()
    };
    let said = refused(desk.enrol(&desk.ask(&moved, keys, NOW + 6), NOW + 6).await);
    assert!(said.contains("reports address 10.1.0.99"), "{said}");
    // A request from yesterday.
    let said = refused(desk.enrol(&desk.ask(&compute_1(), keys, NOW - 86_400), NOW + 7).await);
    assert!(said.contains("more than 300 s apart"), "{said}");
}

#[tokio::test]
async fn a_first_enrolment_long_after_the_instance_started_is_refused() {
    let desk = Desk::new();
    let late = NOW + 2 * 3_600;
    let said = desk
        .enrol(&desk.ask(&compute_1(), &node_keys(), late), late)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        said.contains("never enrolled") && said.contains("within 3600 s"),
        "{said}"
    );
    assert!(desk.bound.all.lock().unwrap().is_empty());
}

/// The signer in process over `cluster`, `bound` and `ca`, with `aws`'s
/// policy.
pub(super) fn signer<'a>(aws: &Aws, cluster: &'a MemCluster, bound: &'a MemBindings, ca: &'a CaKey) -> MemSigner<'a> {
    MemSigner {
        audience: AUDIENCE.to_owned(),
        policy: aws.policy(),
        cluster,
        bindings: bound,
        ca,
        swap_in: None,
        faults: Faults::new(),
    }
}

pub(super) fn key_dir(keys: &[ssh_key::PrivateKey]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (key, name) in keys.iter().zip(["ssh_host_ed25519_key", "ssh_host_ecdsa_key"]) {
        std::fs::write(
            dir.path().join(name),
            key.to_openssh(ssh_key::LineEnding::LF).unwrap().as_bytes(),
        )
        .unwrap();
    }
    dir
}

#[tokio::test]
async fn a_node_writes_a_certificate_beside_each_key_and_nothing_from_a_wrong_answer() {
    let desk = Desk::new();
    let imds = desk.imds();
    let keys = node_keys();
    let dir = key_dir(&keys);
    let signer = desk.signer();
    let written = hostkeyctl::enrolment::node::enrol_node(dir.path(), &[], &imds, &signer, NOW * 1000)
        .await
        .unwrap();
    assert_eq!(written.files.len(), 2);
    for (file, key) in written.files.iter().zip(&keys) {
        let cert = ssh_key::Certificate::read_file(file).unwrap();
        assert_eq!(cert.public_key(), key.public_key().key_data());
    }
    // Another node's certificates in the answer: nothing is written.
    let other = node_keys();
    let before: Vec<String> = written
        .files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    let foreign = hostkeyctl::certificate::sign_keys(
        &desk.ca,
        &other.iter().map(|k| k.public_key().clone()).collect::<Vec<_>>(),
        &hostkeyctl::certificate::SignRequest {
            principals: compute_1().names,
            valid_after: 0,
            valid_before: u64::MAX,
            serial: 1,
            key_id: "x".to_owned(),
        },
    )
    .unwrap()
    .iter()
    .map(|(_, c)| hostkeyctl::certificate::certificate_line(c))
    .collect();
    let wrong = MemSigner {
        swap_in: Some(foreign),
        ..signer
    };
    let err = hostkeyctl::enrolment::node::enrol_node(dir.path(), &[], &imds, &wrong, (NOW + 10) * 1000)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no key of this node"), "{err}");
    let after: Vec<String> = written
        .files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    assert_eq!(before, after, "a certificate was replaced by a wrong answer");
}
