//! Signing in memory ([`hostkeyctl::certificate::signing`] over the store
//! double): the signed set becomes current with the same keys, a renewal
//! that is not due stores nothing, a CA the nodes could read is never read,
//! and a sign racing a rotation never undoes it.

use std::sync::Arc;

use hostkeyctl::certificate::Principal;
use hostkeyctl::certificate::signing::{SigningError, SigningRequest, sign_key_set};
use hostkeyctl::document::{CaDocument, KeySetPrefix};
use hostkeyctl::ids::SecretId;
use hostkeyctl::keyset::{HostKey, KeyAlgorithm};
use hostkeyctl::rotation::{Outcome, Request};
use hostkeyctl::store::claim::CLAIM_PREFIX;
use hostkeyctl::store::{CaCreateRequest, STAGE_CURRENT, SecretStore};
use hostkeyctl::testing::{Action, Hooked, MemoryStore, Op};

use super::{current, rotate, secret, world};

fn ca_id() -> SecretId {
    SecretId::parse("hostkeyctl-ca/ca").unwrap()
}

async fn with_ca(store: &MemoryStore) {
    let ca = CaDocument {
        created: "2026-12-01T00:00:00Z".to_owned(),
        key: HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap(),
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
    let versions = store.version_count(&s);

    let again = sign_key_set(&store, &request(&s, &ca, &p, &prefix, Some(3)))
        .await
        .unwrap();
    assert!(!again.signed);
    assert_eq!(again.version_id, signed.version_id);
    assert_eq!(
        store.version_count(&s),
        versions,
        "a renewal that was not due stored a version"
    );
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
