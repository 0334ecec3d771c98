//! The real store adapter (Secrets Manager through the SDK) against the
//! emulator: the refusals the flows rely on come out as the modelled
//! variants the in-memory store produces natively, never as AWS's words.

use hostkeyctl::aws::SecretsManagerStore;
use hostkeyctl::certificate::{Principal, Signer};
use hostkeyctl::document::SecretDocument;
use hostkeyctl::ids::{SecretId, StageLabel, VersionId};
use hostkeyctl::keyset::{HostKey, KeyAlgorithm, KeySet};
use hostkeyctl::store::{SecretStore, StoreError, VersionSelector, stage};

use crate::common::bed::{BedOptions, SECRET, TestBed};

/// Moving a label another version holds without naming it, or from a
/// version that does not hold it, is LabelHeld with the real holder: how
/// rotations claim AWSPENDING atomically and how sign learns that
/// AWSCURRENT moved under it. A client token reused for another document
/// is TokenConflict: how a retried put is told from a racing one.
#[tokio::test(flavor = "multi_thread")]
async fn refused_stage_moves_and_reused_tokens_are_modelled_errors() {
    let bed = TestBed::start(BedOptions::nodes(0).without_documents());
    bed.init_generated(SECRET);
    let store = SecretsManagerStore::new(&bed.sdk_config(1).await);
    let secret = SecretId::parse(SECRET).unwrap();
    let current = store
        .get(&secret, &VersionSelector::Stage(stage("AWSCURRENT")))
        .await
        .unwrap()
        .version_id;
    let set = || SecretDocument::new(KeySet::generate(&[KeyAlgorithm::Ed25519], 0).unwrap());
    let a = store
        .put_version(&secret, &set(), &VersionId::random(), &[stage("AWSPENDING")])
        .await
        .unwrap();
    let b = store
        .put_version(
            &secret,
            &set(),
            &VersionId::random(),
            &[StageLabel::parse("mine").unwrap()],
        )
        .await
        .unwrap();
    let claim = store.move_stage(&secret, &stage("AWSPENDING"), Some(&b), None).await;
    assert!(
        matches!(&claim, Err(StoreError::LabelHeld { holder: Some(h), .. }) if *h == a),
        "{claim:?}"
    );
    // Compare and swap from a version that no longer holds the label.
    let swap = store
        .move_stage(&secret, &stage("AWSCURRENT"), Some(&b), Some(&a))
        .await;
    assert!(
        matches!(&swap, Err(StoreError::LabelHeld { holder: Some(h), .. }) if *h == current),
        "{swap:?}"
    );
    let message = swap.unwrap_err().to_string();
    assert!(message.contains("moved it meanwhile"), "{message}");
    // The stages are as they were.
    let info = store.describe(&secret).await.unwrap();
    assert_eq!(info.version_with_stage("AWSCURRENT").unwrap().version_id, current);
    assert_eq!(info.version_with_stage("AWSPENDING").unwrap().version_id, a);

    // A client token reused with the same document is the same version
    // (a retried put); with another one (here: the same keys, other
    // certificates, as a sign racing a sign) it is TokenConflict. Secrets
    // Manager refuses such a put; the emulator overwrites silently, so the
    // adapter checks first, and this is what shows that it does.
    let current = store
        .get(&secret, &VersionSelector::Stage(stage("AWSCURRENT")))
        .await
        .unwrap();
    let signed_by = |ca: HostKey| {
        let ca = hostkeyctl::certificate::CaKey::from(ca);
        let mut doc = current.document.clone();
        let signer = Signer {
            ca,
            principals: vec![Principal::parse("login.test").unwrap()],
            validity: 3600,
            serial: 1,
            signer: "test".to_owned(),
        };
        doc.certificates = signer.sign(&doc.keys, &VersionId::random()).unwrap();
        doc
    };
    let first = signed_by(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let other = signed_by(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let token = VersionId::random();
    let label = [StageLabel::parse("test-claim").unwrap()];
    let id = store.put_version(&secret, &first, &token, &label).await.unwrap();
    assert_eq!(store.put_version(&secret, &first, &token, &label).await.unwrap(), id);
    let conflict = store.put_version(&secret, &other, &token, &label).await;
    assert!(
        matches!(conflict, Err(StoreError::TokenConflict { .. })),
        "{conflict:?}"
    );
}
