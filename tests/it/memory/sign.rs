//! Signing in memory ([`hostkeyctl::certificate::signing`] over the store
//! double): the signed set becomes current with the same keys, a renewal
//! that is not due stores nothing, a CA the nodes could read is never read,
//! and a sign racing a rotation never undoes it.

use std::sync::Arc;

use hostkeyctl::certificate::Principal;
use hostkeyctl::document::{CaDocument, KeySetPrefix};
use hostkeyctl::ids::SecretId;
use hostkeyctl::keyset::{HostKey, KeyAlgorithm};
use hostkeyctl::rotation::{Outcome, Request};
use hostkeyctl::signing::{SigningError, SigningRequest, sign_key_set};
use hostkeyctl::store::claim::CLAIM_PREFIX;
use hostkeyctl::store::{CaCreateRequest, STAGE_CURRENT, STAGE_PENDING, SecretStore};
use hostkeyctl::testing::{Action, Hooked, MemoryStore, Op};

use super::{current, rotate, secret, world};

fn ca_id() -> SecretId {
    SecretId::parse("hostkeyctl-ca/ca").unwrap()
}

async fn with_ca(store: &MemoryStore) {
    let ca = CaDocument {
        created: "2026-12-01T00:00:00Z".to_owned(),
        key: hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap()),
    };
    store
        .create_ca(&CaCreateRequest {
            name: &ca_id(),
            ca: &ca,
            description: "test CA",
            tags: &[],
            kms_key_id: None,
        })
        .await
        .unwrap();
}

fn principals() -> Vec<Principal> {
    vec![Principal::parse("login.test").unwrap()]
}

fn request<'a>(
    secret: &'a SecretId,
    ca: &'a SecretId,
    principals: &'a [Principal],
    prefix: &'a KeySetPrefix,
    renew_before_days: Option<u64>,
) -> SigningRequest<'a> {
    SigningRequest {
        secret,
        ca_secret: ca,
        principals,
        validity: 7 * 86_400,
        serial: None,
        renew_before_days,
        key_set_prefix: prefix,
        now: hostkeyctl::certificate::now_unix(),
    }
}

fn claims(store: &MemoryStore) -> usize {
    store
        .stages(&secret())
        .into_iter()
        .flat_map(|(_, labels)| labels)
        .filter(|l| l.starts_with(CLAIM_PREFIX))
        .count()
}

/// `req`, a renewal the certificates just signed do not need yet: it
/// signs nothing and stores no version. What it answered.
async fn renewal_not_due(store: &MemoryStore, req: &SigningRequest<'_>) -> hostkeyctl::signing::Signed {
    let versions = store.version_count(req.secret);
    let again = sign_key_set(store, req).await.unwrap();
    assert!(!again.signed);
    assert_eq!(
        store.version_count(req.secret),
        versions,
        "a renewal not due stored a version"
    );
    again
}

#[tokio::test(flavor = "multi_thread")]
async fn the_signed_set_becomes_current_and_a_renewal_not_due_stores_nothing() {
    let (store, _fleet, before) = world(0).await;
    with_ca(&store).await;
    let (s, ca, p) = (secret(), ca_id(), principals());
    let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
    let signed = sign_key_set(&store, &request(&s, &ca, &p, &prefix, None))
        .await
        .unwrap();
    assert!(signed.signed);
    assert_ne!(signed.version_id, before);
    let now = current(&store).await;
    assert_eq!(now.version_id, signed.version_id);
    assert_eq!(now.document.certificates.len(), now.document.keys.keys().count());
    assert_eq!(claims(&store), 0, "a claim label was left");
    let again = renewal_not_due(&store, &request(&s, &ca, &p, &prefix, Some(3))).await;
    assert_eq!(again.version_id, signed.version_id);
}

/// The CA's name is refused before anything is read when it is under the
/// prefix every login node's role may read.
#[tokio::test(flavor = "multi_thread")]
async fn a_ca_the_nodes_could_read_is_never_read() {
    let (store, _fleet, _) = world(0).await;
    let counting = Hooked::counting(&store);
    let (s, p) = (secret(), principals());
    let under = SecretId::parse("hk-cas/ca").unwrap();
    let prefix = KeySetPrefix::parse("hk").unwrap();
    let refused = sign_key_set(&counting, &request(&s, &under, &p, &prefix, None)).await;
    assert!(matches!(refused, Err(SigningError::CaPlacement(_))), "{refused:?}");
    assert!(counting.log().is_empty(), "the store was called: {:?}", counting.log());
}

/// A rotation that finishes between sign's read and its stage move is never
/// undone: the move is a compare and swap from the version sign read, so
/// it is refused, sign says so, and no claim label is left.
#[tokio::test(flavor = "multi_thread")]
async fn a_sign_racing_a_rotation_never_undoes_it() {
    let (store, fleet, original) = world(2).await;
    with_ca(&store).await;
    let (read, swap) = (tokio::sync::Barrier::new(2), tokio::sync::Barrier::new(2));
    let hooked = Hooked::new(&store, |call| match (call.op, call.nth) {
        // Sign has read the stages and stored its version: hold it there
        // while the rotation runs, then let it try its swap.
        (Op::PutVersion, 1) => Action::WaitAfter(&read),
        (Op::MoveStage, 1) => Action::Wait(&swap),
        _ => Action::Pass,
    });
    let (s, ca, p) = (secret(), ca_id(), principals());
    let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
    let req = request(&s, &ca, &p, &prefix, None);
    let rotation = async {
        read.wait().await;
        let outcome = rotate(&store, &Arc::clone(&fleet), &store, Request::default()).await;
        swap.wait().await;
        outcome
    };
    let (signed, rotated) = tokio::join!(sign_key_set(&hooked, &req), rotation);
    assert_eq!(rotated.unwrap(), Outcome::Rotated);
    let rotated_to = store.holder(&s, STAGE_CURRENT).unwrap();
    assert_ne!(rotated_to, original);
    assert!(matches!(&signed, Err(SigningError::Moved { .. })), "{signed:?}");
    assert_eq!(
        store.holder(&s, STAGE_CURRENT),
        Some(rotated_to.clone()),
        "sign undid the rotation"
    );
    assert_eq!(claims(&store), 0, "a claim label was left");
}

async fn document(store: &MemoryStore, id: &hostkeyctl::ids::VersionId) -> hostkeyctl::document::SecretDocument {
    let selector = hostkeyctl::store::VersionSelector::VersionId(id.clone());
    store.get(&secret(), &selector).await.unwrap().document
}

/// The version holding `label`, and its certificates' serials.
async fn serials(store: &MemoryStore, label: &str) -> (hostkeyctl::ids::VersionId, Vec<u64>) {
    let id = store.holder(&secret(), label).unwrap();
    let doc = document(store, &id).await;
    (
        id,
        doc.certificates.values().map(ssh_key::Certificate::serial).collect(),
    )
}

fn keys_of(doc: &hostkeyctl::document::SecretDocument) -> Vec<hostkeyctl::fingerprint::Fingerprint> {
    doc.keys.keys().map(|k| k.fingerprint().clone()).collect()
}

/// The current set signed, then a pull rotation's set announced (signed
/// like it): the state of a week-long overlap. Returns the CA's key.
async fn signed_and_announced(
    store: &MemoryStore,
    fleet: &Arc<hostkeyctl::testing::MemFleet>,
) -> hostkeyctl::certificate::CaKey {
    with_ca(store).await;
    let (s, ca, p) = (secret(), ca_id(), principals());
    let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
    sign_key_set(store, &request(&s, &ca, &p, &prefix, None)).await.unwrap();
    let key = store.get_ca(&ca).await.unwrap().key;
    let announce = Request {
        phase: hostkeyctl::rotation::Phase::Overlap { resume: false },
        pull: Some(std::time::Duration::ZERO),
        ..Request::default()
    };
    let outcome = super::rotate_with_ca(store, fleet, store, announce, Some(&key)).await;
    assert_eq!(outcome.unwrap(), Outcome::Announced);
    // The nodes' timers serve the announced set (what a promotion checks).
    assert!(super::timer(fleet, store).await.iter().all(|c| *c == Some(0)));
    key
}

/// A pull rotation's overlap can outlast a certificate (issue 27): sign
/// renews the announced set with the current one, each under its own
/// stage, with the same keys; a renewal not due for either stores nothing.
#[tokio::test(flavor = "multi_thread")]
async fn sign_during_an_overlap_renews_the_current_and_the_announced_set() {
    let (store, fleet, _) = world(1).await;
    signed_and_announced(&store, &fleet).await;
    let (s, ca, p) = (secret(), ca_id(), principals());
    let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
    let (old_pending, _) = serials(&store, STAGE_PENDING).await;
    let pending_keys = keys_of(&document(&store, &old_pending).await);

    let signed = sign_key_set(&store, &request(&s, &ca, &p, &prefix, None))
        .await
        .unwrap();
    assert!(signed.signed);
    let (pending_id, _) = signed.pending.clone().expect("the announced set was signed");
    let (current_id, current_serials) = serials(&store, STAGE_CURRENT).await;
    assert_eq!(current_id, signed.version_id);
    let (held, pending_serials) = serials(&store, STAGE_PENDING).await;
    assert_eq!(held, pending_id);
    assert_ne!(pending_id, old_pending);
    assert_eq!(
        keys_of(&document(&store, &pending_id).await),
        pending_keys,
        "the keys changed"
    );
    assert!(
        current_serials.iter().chain(&pending_serials).all(|s| *s == 3),
        "{current_serials:?} {pending_serials:?}"
    );
    assert_eq!(claims(&store), 0, "a claim label was left");
    renewal_not_due(&store, &request(&s, &ca, &p, &prefix, Some(3))).await;
}

/// A finish that reads the stages before sign swaps the announced set and
/// moves AWSCURRENT between sign's two swaps promoted the set sign had just
/// replaced. sign completes that promotion with its signed copy: the
/// rotation's outcome stands (the new keys AWSCURRENT, nothing pending),
/// with the new certificates, and AWSPREVIOUS is the set before it.
#[tokio::test(flavor = "multi_thread")]
async fn a_finish_between_signs_two_swaps_stands_with_the_signed_copy() {
    let (store, fleet, original) = world(1).await;
    let key = signed_and_announced(&store, &fleet).await;
    let (s, ca, p) = (secret(), ca_id(), principals());
    let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
    // AWSPREVIOUS after the promotion: the signed set before the rotation.
    let before = store.holder(&s, STAGE_CURRENT).unwrap();
    assert_ne!(before, original);
    let announced = store.holder(&s, STAGE_PENDING).unwrap();
    let pending_keys = keys_of(&document(&store, &announced).await);

    // a: the finish has read the stages, sign starts.
    // c: the finish is about to move AWSCURRENT, sign has swapped AWSPENDING.
    // d: the finish has moved AWSCURRENT, sign is about to.
    let (a, c, d) = (
        tokio::sync::Barrier::new(2),
        tokio::sync::Barrier::new(2),
        tokio::sync::Barrier::new(2),
    );
    let moves = |call: &hostkeyctl::testing::Call<'_>, label: &str| {
        call.op == Op::MoveStage && call.label.is_some_and(|l| l.as_str() == label) && call.to.is_some()
    };
    // sign's moves: AWSPENDING to its copy, the claim off, then AWSCURRENT.
    let signing = Hooked::new(&store, |call| match (call.op, call.nth) {
        (Op::GetCa, 1) => Action::Wait(&a),
        (Op::PutVersion, 2) => Action::Wait(&c),
        (Op::MoveStage, 3) => Action::Wait(&d),
        _ => Action::Pass,
    });
    let finishing = Hooked::new(&store, |call| {
        if call.op == Op::DescribeVersions && call.nth == 1 {
            Action::WaitAfter(&a)
        } else if moves(call, STAGE_CURRENT) {
            Action::Wait(&c)
        } else if call.op == Op::MoveStage && call.label.is_some_and(|l| l.as_str() == STAGE_PENDING) {
            Action::Wait(&d)
        } else {
            Action::Pass
        }
    });
    let finish = Request {
        phase: hostkeyctl::rotation::Phase::Finish,
        pull: Some(std::time::Duration::ZERO),
        ..Request::default()
    };
    let req = request(&s, &ca, &p, &prefix, None);
    let (signed, finished) = tokio::join!(
        sign_key_set(&signing, &req),
        super::rotate_with_ca(&finishing, &fleet, &store, finish, Some(&key))
    );
    // The finish saw AWSPENDING move under it and says how to complete.
    assert!(finished.is_err(), "{finished:?}");
    let signed = signed.unwrap();
    assert!(!signed.notes.is_empty(), "{signed:?}");
    let (now, serials_now) = serials(&store, STAGE_CURRENT).await;
    assert_eq!(now, signed.version_id);
    assert_ne!(now, announced);
    assert_eq!(
        keys_of(&document(&store, &now).await),
        pending_keys,
        "the rotation was undone"
    );
    assert!(serials_now.iter().all(|s| *s == 3), "{serials_now:?}");
    assert_eq!(store.holder(&s, STAGE_PENDING), None);
    assert_eq!(store.holder(&s, hostkeyctl::store::STAGE_PREVIOUS), Some(before));
    assert_eq!(claims(&store), 0, "a claim label was left");
}
