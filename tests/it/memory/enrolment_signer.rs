//! The signer's boundaries against a node's own users (issue 55's
//! findings): a login node's claim certifies no key, the canonical set's
//! keys are never certified, a renewal within the period costs no
//! signature, and a refusal no lookup; with the test doubles of
//! [`hostkeyctl::enrolment::tests`].

use super::enrolment::{Desk, NOW, compute_1, node_keys, refused};
use hostkeyctl::enrolment::Binding;
use hostkeyctl::testing::MemSetKeys;

#[tokio::test]
async fn a_login_nodes_claim_takes_its_instance_for_no_key_so_the_sets_holders_get_nothing() {
    let desk = Desk::new();
    let set = node_keys();
    let claimed = desk.claim(&desk.ask(&compute_1(), &set, NOW), NOW).await;
    assert_eq!(claimed.unwrap().instance_id, compute_1().instance_id);
    let after_claim = desk.bound.all.lock().unwrap().clone();
    let binding = &after_claim[&compute_1().instance_id];
    assert!(binding.claim && binding.host_keys.is_empty(), "{binding:?}");
    // Whoever else holds the document enrols nothing for its names: not
    // with keys of their own, not with the set's (L1: any login node's
    // role reads the set; a leaked or retired set is the same).
    for keys in [node_keys(), set.clone()] {
        let thief = desk.ask(&compute_1(), &keys, NOW + 1);
        let said = refused(desk.enrol(&thief, NOW + 1).await);
        assert!(said.contains("took the cluster's trust alone"), "{said}");
    }
    // The set rotates: the node's next claim is accepted, the binding kept.
    let rotated = desk.ask(&compute_1(), &node_keys(), NOW + 2);
    assert!(desk.claim(&rotated, NOW + 2).await.is_ok());
    assert_eq!(*desk.bound.all.lock().unwrap(), after_claim);
    // Revoking it revokes no key (L2: never the set every login node serves).
    desk.revoke(&compute_1());
    assert!(
        hostkeyctl::enrolment::revoked(&desk.bound, &())
            .await
            .unwrap()
            .is_empty()
    );
}

fn fingerprints_of(keys: &[ssh_key::PrivateKey]) -> Vec<String> {
    keys.iter()
        .map(|k| k.public_key().fingerprint(ssh_key::HashAlg::Sha256).to_string())
        .collect()
}

#[tokio::test]
async fn the_sets_keys_are_never_certified_and_a_binding_to_them_from_before_becomes_a_claim() {
    let desk = Desk::new();
    let set = node_keys();
    let the_set = MemSetKeys::with(fingerprints_of(&set));
    // A fresh instance asked certificates for the set's keys: refused,
    // nothing bound.
    let said = refused(
        desk.enrol_with(&desk.ask(&compute_1(), &set, NOW), &[], &the_set, NOW)
            .await,
    );
    assert!(said.contains("keys of the canonical set"), "{said}");
    assert!(desk.bound.all.lock().unwrap().is_empty());
    // A binding to the set made by a claim of an older signer (it bound the
    // keys and certified them on request): still refused by name, and the
    // login node's next claim makes it a claim.
    let host_keys: Vec<String> = set
        .iter()
        .map(|k| {
            ssh_key::PublicKey::from(k.public_key().key_data().clone())
                .to_openssh()
                .unwrap()
        })
        .collect();
    let mut fps = fingerprints_of(&set);
    fps.sort();
    let old = Binding {
        fingerprints: fps,
        last_issued_at_ms: (NOW - 900) * 1000,
        host_keys: host_keys.clone(),
        ..Binding::default()
    };
    desk.bound
        .all
        .lock()
        .unwrap()
        .insert(compute_1().instance_id, old.clone());
    let said = refused(
        desk.enrol_with(&desk.ask(&compute_1(), &set, NOW), &[], &the_set, NOW)
            .await,
    );
    assert!(said.contains("keys of the canonical set"), "{said}");
    // Revoked as it stands, it lists no key of the set (L2).
    desk.revoke(&compute_1());
    assert!(
        hostkeyctl::enrolment::revoked(&desk.bound, &the_set)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        hostkeyctl::enrolment::revoked(&desk.bound, &()).await.unwrap().len(),
        host_keys.len()
    );
    desk.bound.all.lock().unwrap().insert(compute_1().instance_id, old);
    desk.claim(&desk.ask(&compute_1(), &set, NOW + 1), NOW + 1)
        .await
        .unwrap();
    let now = desk.bound.all.lock().unwrap()[&compute_1().instance_id].clone();
    assert!(now.claim && now.host_keys.is_empty(), "{now:?}");
}

/// A claim over a binding to other keys than its own (an old claim for a
/// set rotated since, or someone else's enrolment) is refused loudly.
#[tokio::test]
async fn a_claim_over_a_binding_to_other_keys_is_refused_loudly() {
    let desk = Desk::new();
    let set = node_keys();
    desk.enrol(&desk.ask(&compute_1(), &node_keys(), NOW), NOW)
        .await
        .unwrap();
    let said = desk
        .claim(&desk.ask(&compute_1(), &set, NOW + 1), NOW + 1)
        .await
        .unwrap_err()
        .to_string();
    assert!(said.contains("not this login node's"), "{said}");
}

#[tokio::test]
async fn a_renewal_within_the_period_costs_no_signature_and_a_refusal_no_lookup_or_scan() {
    let desk = Desk::new();
    let lookups = || desk.cluster.faults.count("sagemaker:DescribeClusterNode");
    let keys = node_keys();
    let first = desk.enrol(&desk.ask(&compute_1(), &keys, NOW), NOW).await.unwrap();
    assert!(first.signed);
    assert_eq!(lookups(), 1);
    // Root on the node renews in a loop (D1): every answer within the
    // period is the first signing's, with no lookup and no signature.
    for at in 1..5 {
        let again = desk
            .enrol(&desk.ask(&compute_1(), &keys, NOW + at), NOW + at)
            .await
            .unwrap();
        assert!(!again.signed);
        assert_eq!(again.certificates, first.certificates, "a new signature");
        assert_eq!(again.principals, first.principals);
    }
    assert_eq!(lookups(), 1);
    // After the period, a renewal is signed again.
    let later = NOW + desk.policy.renew_every;
    let renewed = desk.enrol(&desk.ask(&compute_1(), &keys, later), later).await.unwrap();
    assert!(renewed.signed && renewed.certificates != first.certificates);
    // A flood of refusals (D2): another's keys with the node's document,
    // a replay, a claim over its binding: no lookup of the cluster.
    let before = lookups();
    for at in 1..4 {
        let thief = desk.ask(&compute_1(), &node_keys(), later + at);
        assert!(desk.enrol(&thief, later + at).await.is_err());
    }
    let replay = desk.ask(&compute_1(), &keys, later - 1);
    assert!(desk.enrol(&replay, later + 5).await.is_err());
    assert_eq!(lookups(), before, "a refusal looked the cluster up");
}

#[test]
fn a_cached_value_is_read_again_only_after_its_age() {
    let cache: hostkeyctl::enrolment::Cache<u32> = hostkeyctl::enrolment::Cache::new(60);
    let reads = std::sync::atomic::AtomicU32::new(0);
    let read = || async { Ok::<_, String>(reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1) };
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    runtime.block_on(async {
        assert_eq!(cache.get(1_000, read).await.unwrap(), 1);
        assert_eq!(cache.get(1_059, read).await.unwrap(), 1);
        assert_eq!(cache.get(1_060, read).await.unwrap(), 2);
        // A clock that went back reads again rather than trust an old value.
        assert_eq!(cache.get(900, read).await.unwrap(), 3);
        let failed: Result<u32, String> = cache.get(5_000, || async { Err("no".to_owned()) }).await;
        assert!(failed.is_err());
        assert_eq!(cache.get(5_001, read).await.unwrap(), 4);
    });
}

/// D1, overlapping requests: while a signing of the instance is under way
/// (its binding written, its certificates not yet), another request is
/// refused, not signed; a minute later (a signing that failed) it goes on.
#[tokio::test]
async fn one_signing_at_a_time_per_instance() {
    let desk = Desk::new();
    let keys = node_keys();
    desk.enrol(&desk.ask(&compute_1(), &keys, NOW), NOW).await.unwrap();
    // A signing started after the period, and not finished.
    let later = NOW + desk.policy.renew_every + 5;
    desk.bound
        .all
        .lock()
        .unwrap()
        .get_mut(&compute_1().instance_id)
        .unwrap()
        .signing_at = later - 1;
    let overlapping = desk.ask(&compute_1(), &keys, later);
    let said = refused(desk.enrol(&overlapping, later).await);
    assert!(said.contains("at the same time"), "{said}");
    let after = later + 60;
    let retried = desk.enrol(&desk.ask(&compute_1(), &keys, after), after).await;
    assert!(retried.unwrap().signed);
}
