//! A login node's enrolment on the signer's side ([`super::login`]): the
//! set's keys certified for its own names; the binding moves through a
//! rotation's overlap and never to keys the request cannot carry over;
//! before its install, the trust alone, nothing bound.

use ssh_key::HashAlg;

use super::login::{enrol_login, trust};
use super::tests::{Aws, Bound, Cluster, NOW, ask, compute_1, node_keys, refused};
use super::{Binding, Bindings};
use crate::certificate::CaKey;
use crate::keyset::{HostKey, KeyAlgorithm};

fn fingerprint(key: &ssh_key::PrivateKey) -> String {
    key.public_key().fingerprint(HashAlg::Sha256).to_string()
}

#[tokio::test]
async fn a_login_node_is_certified_on_the_set_through_a_rotation_and_a_thief_never() {
    let aws = Aws::new();
    let ca = CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let cluster = Cluster(vec![compute_1()]);
    let bound = Bound::default();
    let policy = aws.policy();
    let set = node_keys();
    // The set's keys, the ed25519 one certified (the set certifies the other).
    let first = ask(&aws, &compute_1(), &set, NOW);
    let enrolled = enrol_login(&first, &[fingerprint(&set[0])], &cluster, &bound, &ca, &policy, NOW)
        .await
        .unwrap();
    assert_eq!(enrolled.certificates.len(), 1);
    let cert = &enrolled.certificates[0];
    assert_eq!(cert.public_key(), set[0].public_key().key_data());
    assert_eq!(
        cert.valid_principals(),
        ["ip-10-1-0-11.ec2.internal", "10.1.0.11", "compute-1"]
    );
    let trusted = ca.public_key().fingerprint(HashAlg::Sha256);
    cert.validate_at(u64::try_from(NOW).unwrap(), [&trusted]).unwrap();
    // The same request again: a replay.
    let said = refused(enrol_login(&first, &[], &cluster, &bound, &ca, &policy, NOW).await);
    assert!(said.contains("replay"), "{said}");
    // A key the request does not prove is never certified.
    let stranger = node_keys();
    let later = ask(&aws, &compute_1(), &set, NOW + 1);
    let said = refused(
        enrol_login(
            &later,
            &[fingerprint(&stranger[0])],
            &cluster,
            &bound,
            &ca,
            &policy,
            NOW + 1,
        )
        .await,
    );
    assert!(said.contains("does not prove"), "{said}");
    // Whoever reads the document (a user, through IMDS) holds none of the
    // bound keys: refused, the binding untouched.
    let before = bound.0.lock().unwrap().clone();
    let thief = ask(&aws, &compute_1(), &stranger, NOW + 2);
    let said = refused(
        enrol_login(
            &thief,
            &[fingerprint(&stranger[0])],
            &cluster,
            &bound,
            &ca,
            &policy,
            NOW + 2,
        )
        .await,
    );
    assert!(said.contains("proves none of"), "{said}");
    assert_eq!(*bound.0.lock().unwrap(), before);
    // The overlap: the set and the next set, both certified.
    let next = node_keys();
    let both: Vec<ssh_key::PrivateKey> = set.iter().chain(next.iter()).cloned().collect();
    let overlap = ask(&aws, &compute_1(), &both, NOW + 3);
    let all: Vec<String> = both.iter().map(fingerprint).collect();
    let enrolled = enrol_login(&overlap, &all, &cluster, &bound, &ca, &policy, NOW + 3)
        .await
        .unwrap();
    assert_eq!(enrolled.certificates.len(), 4);
    // The next set promoted: it carries the binding on.
    let promoted = ask(&aws, &compute_1(), &next, NOW + 4);
    let enrolled = enrol_login(
        &promoted,
        &[fingerprint(&next[0])],
        &cluster,
        &bound,
        &ca,
        &policy,
        NOW + 4,
    )
    .await
    .unwrap();
    assert_eq!(enrolled.certificates.len(), 1);
    let binding: Binding = bound.get(&compute_1().instance_id).await.unwrap().unwrap();
    let mut want: Vec<String> = next.iter().map(fingerprint).collect();
    want.sort();
    assert_eq!(binding.fingerprints, want);
    // The old set no longer carries it.
    let old = ask(&aws, &compute_1(), &set, NOW + 5);
    let said = refused(enrol_login(&old, &[], &cluster, &bound, &ca, &policy, NOW + 5).await);
    assert!(said.contains("proves none of"), "{said}");
}

#[tokio::test]
async fn a_login_node_before_its_install_takes_the_trust_and_binds_nothing_unless_revoked() {
    let aws = Aws::new();
    let cluster = Cluster(vec![compute_1()]);
    let bound = Bound::default();
    let policy = aws.policy();
    let own = node_keys();
    let request = ask(&aws, &compute_1(), &own, NOW);
    assert_eq!(
        trust(&request, &cluster, &bound, &policy, NOW).await.unwrap(),
        compute_1().instance_id
    );
    assert!(bound.0.lock().unwrap().is_empty(), "the trust bound the instance");
    // Not a node of the cluster: refused.
    let empty = Cluster(Vec::new());
    assert!(trust(&request, &empty, &bound, &policy, NOW).await.is_err());
    // Revoked: refused.
    bound.0.lock().unwrap().insert(
        compute_1().instance_id,
        Binding {
            fingerprints: Vec::new(),
            last_issued_at_ms: 0,
            host_keys: Vec::new(),
            revoked: true,
        },
    );
    let said = trust(&request, &cluster, &bound, &policy, NOW)
        .await
        .unwrap_err()
        .to_string();
    assert!(said.contains("revoked"), "{said}");
}
