//! A node HyperPod patched (`UpdateClusterSoftware`: its root volume
//! replaced, so its host keys are new, under the same instance id) binds
//! its new keys once, without an admin step, when the cluster's record
//! shows it on a new image, updated within the first-enrolment window.
//! Nobody else gains anything: not a node's user holding its identity
//! document when the node was not patched, not one holding another
//! instance's, not after the window; and a flood of other keys costs one
//! lookup of the cluster's record a minute.

use hostkeyctl::certificate::CaKey;
use hostkeyctl::enrolment::{Member, enrol};
use hostkeyctl::keyset::{HostKey, KeyAlgorithm};
use hostkeyctl::testing::{MemBindings, MemCluster};

use super::enrolment::{Aws, NOW, ask, compute_1, node_keys, refused};

const LOOKUP: &str = "sagemaker:DescribeClusterNode";

/// Compute node 1 on `image`, its software updated at `updated`.
fn on_image(image: &str, updated: i64) -> Member {
    Member {
        image_id: Some(image.to_owned()),
        software_updated_at: Some(updated),
        ..compute_1()
    }
}

/// HyperPod patches node `i`: a new image, updated at `at`.
fn patch(cluster: &MemCluster, i: usize, image: &str, at: i64) {
    let mut members = cluster.members.lock().unwrap();
    members[i].image_id = Some(image.to_owned());
    members[i].software_updated_at = Some(at);
}

#[tokio::test]
async fn a_patched_node_binds_its_new_keys_once_and_nobody_else_does() {
    let aws = Aws::new();
    let ca = CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let cluster = MemCluster::new(vec![on_image("ami-1", NOW - 86_400)]);
    let bound = MemBindings::default();
    let policy = aws.policy();
    let id = compute_1().instance_id;
    let first_keys = node_keys();
    let go = |keys: &[ssh_key::PrivateKey], at: i64| {
        let request = ask(&aws, &compute_1(), keys, at);
        let (cluster, bound, ca, policy) = (&cluster, &bound, &ca, &policy);
        async move { enrol(&request, &[], cluster, bound, &(), ca, policy, at).await }
    };
    assert!(go(&first_keys, NOW).await.unwrap().signed);
    assert_eq!(bound.of(&id).unwrap().image_id.as_deref(), Some("ami-1"));
    // A user of the node with its document and keys of their own: one
    // lookup shows no patch; the flood that follows costs none.
    let thief = node_keys();
    for at in 1..5 {
        let said = refused(go(&thief, NOW + at).await);
        assert!(said.contains("enrolled other host keys"), "{said}");
    }
    assert_eq!(
        cluster.faults.count(LOOKUP),
        2,
        "the first enrolment's and one for the flood"
    );
    // HyperPod patches the node: a new image, new keys at its lifecycle
    // step. Its first request with them binds them and is signed.
    let patched_at = NOW + 300;
    patch(&cluster, 0, "ami-2", patched_at);
    let new_keys = node_keys();
    let enrolled = go(&new_keys, patched_at + 120).await.unwrap();
    assert!(enrolled.signed);
    let binding = bound.of(&id).unwrap();
    assert_eq!(binding.image_id.as_deref(), Some("ami-2"));
    assert_eq!(binding.host_keys.len(), new_keys.len());
    assert!(binding.certificates.iter().all(|c| {
        enrolled
            .certificates
            .iter()
            .any(|e| hostkeyctl::certificate::certificate_line(e) == *c)
    }));
    // Once: neither the old keys nor anyone's others bind again, though
    // the window is still open.
    for keys in [&first_keys, &thief] {
        let said = refused(go(keys, patched_at + 300).await);
        assert!(said.contains("enrolled other host keys"), "{said}");
    }
    // Its renewal with the new keys goes on.
    assert!(go(&new_keys, patched_at + 400).await.is_ok());
}

/// The signer's world: AWS's identity key, a CA, the cluster, bindings.
struct World {
    aws: Aws,
    ca: CaKey,
    cluster: MemCluster,
    bound: MemBindings,
}

impl World {
    /// `member`'s request with `keys` at `at`, to the signer.
    async fn enrol(
        &self,
        member: &Member,
        keys: &[ssh_key::PrivateKey],
        at: i64,
    ) -> Result<hostkeyctl::enrolment::Enrolled, hostkeyctl::enrolment::EnrolError> {
        let request = ask(&self.aws, member, keys, at);
        let policy = self.aws.policy();
        enrol(&request, &[], &self.cluster, &self.bound, &(), &self.ca, &policy, at).await
    }
}

#[tokio::test]
async fn no_patch_path_for_another_instances_document_a_late_request_or_an_old_binding() {
    let compute_2 = Member {
        instance_id: "i-0000000000000c002".to_owned(),
        private_ip: "10.1.0.12".parse().unwrap(),
        ..on_image("ami-1", NOW - 86_400)
    };
    let w = World {
        aws: Aws::new(),
        ca: CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap()),
        cluster: MemCluster::new(vec![on_image("ami-1", NOW - 86_400), compute_2.clone()]),
        bound: MemBindings::default(),
    };
    let policy = w.aws.policy();
    let keys = node_keys();
    assert!(w.enrol(&compute_1(), &keys, NOW).await.is_ok());
    assert!(w.enrol(&compute_2, &node_keys(), NOW).await.is_ok());
    // Node 2 is patched; a user of node 1 (its document, keys of their
    // own) gets nothing from it.
    patch(&w.cluster, 1, "ami-2", NOW + 100);
    let said = refused(w.enrol(&compute_1(), &node_keys(), NOW + 200).await);
    assert!(said.contains("enrolled other host keys"), "{said}");
    // Node 1 patched too, but its new keys come after the window.
    patch(&w.cluster, 0, "ami-2", NOW + 100);
    let late = NOW + 100 + policy.first_within + 1;
    let said = refused(w.enrol(&compute_1(), &node_keys(), late).await);
    assert!(said.contains("enrolled other host keys"), "{said}");
    // A binding from before images were kept re-keys nothing, with no
    // lookup: its next signed renewal records the image.
    let id = compute_1().instance_id;
    w.bound.all.lock().unwrap().get_mut(&id).unwrap().image_id = None;
    let looked = w.cluster.faults.count(LOOKUP);
    let said = refused(w.enrol(&compute_1(), &node_keys(), late + 120).await);
    assert!(said.contains("enrolled other host keys"), "{said}");
    assert_eq!(w.cluster.faults.count(LOOKUP), looked);
    let renewal = late + 120 + policy.renew_every;
    assert!(w.enrol(&compute_1(), &keys, renewal).await.unwrap().signed);
    assert_eq!(w.bound.of(&id).unwrap().image_id.as_deref(), Some("ami-2"));
}
