//! The real store adapter (Secrets Manager through the SDK) against the
//! emulator: the refusals the flows rely on come out as the modelled
//! variants the in-memory store produces natively, never as AWS's words.

use hostkeyctl::document::SecretDocument;
use hostkeyctl::ids::{SecretId, VersionId};
use hostkeyctl::keyset::{KeyAlgorithm, KeySet};
use hostkeyctl::store::{SecretStore, SecretsManagerStore, StoreError, VersionSelector, stage};

use crate::common::bed::{BedOptions, TestBed};

/// Moving a label another version holds without naming it, or from a
/// version that does not hold it, is LabelHeld with the real holder: how
/// rotations claim AWSPENDING atomically and how sign learns that
/// AWSCURRENT moved under it.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_stage_move_is_label_held_with_its_holder() {
    let bed = TestBed::start(BedOptions {
        nodes: 0,
        documents: false,
        ..BedOptions::default()
    });
    bed.init_generated("hostkeys/hk");
    let store = SecretsManagerStore::new(&bed.sdk_config(1).await);
    let secret = SecretId::parse("hostkeys/hk").unwrap();
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
            &[hostkeyctl::ids::StageLabel::parse("mine").unwrap()],
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
}
