//! `ca init` in memory ([`hostkeyctl::ca_init`] over the store and KMS
//! doubles): each source makes its CA; a CA the nodes could read, or one
//! already there, is refused before a KMS key is made; a failure at each
//! call after a new KMS key names the key, and a failure before it leaves
//! nothing.

use hostkeyctl::ca_init::{CaInitError, CaSource, InitRequest, init};
use hostkeyctl::document::KeySetPrefix;
use hostkeyctl::exit::{ExitStatus, Status};
use hostkeyctl::ids::SecretId;
use hostkeyctl::keyset::{HostKey, KeyAlgorithm};
use hostkeyctl::store::SecretStore;
use hostkeyctl::testing::{Fault, Hooked, MEM_KMS_KEY, MemKms, MemoryStore, Op};

fn ca_id() -> SecretId {
    SecretId::parse("hostkeyctl-ca/ca").unwrap()
}

fn request<'a>(secret: &'a SecretId, prefix: &'a KeySetPrefix, source: CaSource<'a>) -> InitRequest<'a> {
    InitRequest {
        secret,
        key_set_prefix: prefix,
        source,
        tags: &[],
        kms_key_id: None,
    }
}

#[tokio::test]
async fn each_source_makes_its_ca_and_a_second_init_overwrites_nothing() {
    let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
    let kms = MemKms::p256(7);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ca");
    let adopted = HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap();
    std::fs::write(&file, adopted.reveal_private_openssh().as_bytes()).unwrap();
    let cases = [
        ("hostkeyctl-ca/generated", CaSource::Generate(KeyAlgorithm::Ed25519)),
        ("hostkeyctl-ca/file", CaSource::File(&file)),
        ("hostkeyctl-ca/kms", CaSource::Kms(MEM_KMS_KEY)),
        ("hostkeyctl-ca/new-kms", CaSource::NewKms(KeyAlgorithm::Ecdsa)),
    ];
    let store = MemoryStore::new();
    for (name, source) in cases {
        let secret = SecretId::parse(name).unwrap();
        let report = init(&store, &kms, &request(&secret, &prefix, source)).await.unwrap();
        let stored = store.get_ca(&secret).await.unwrap();
        assert_eq!(report.fingerprint, stored.key.fingerprint().to_string(), "{name}");
        match source {
            CaSource::File(_) => {
                assert_eq!(report.fingerprint, adopted.fingerprint().to_string());
                assert_eq!(report.adopted_from.as_deref(), Some(file.as_path()));
            }
            CaSource::Kms(key) => assert_eq!(report.kms_key_arn.as_deref(), Some(key)),
            CaSource::NewKms(_) => {
                let created = kms.created.lock().unwrap().clone();
                assert_eq!(created.len(), 1, "{created:?}");
                assert_eq!(report.kms_key_arn.as_deref(), Some(created[0].as_str()));
            }
            CaSource::Generate(_) => assert_eq!(report.algorithm, "ssh-ed25519"),
        }
        // Again: refused, and the CA stands.
        let again = init(&store, &kms, &request(&secret, &prefix, source))
            .await
            .unwrap_err();
        assert!(again.to_string().contains("never overwrites a CA"), "{name}: {again}");
        assert_eq!(again.status(), Status::Usage);
        assert_eq!(
            store.get_ca(&secret).await.unwrap().key.fingerprint(),
            stored.key.fingerprint()
        );
    }
    // The second --kms init was refused before CreateKey.
    assert_eq!(kms.created.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_ca_the_nodes_could_read_is_refused_before_any_call() {
    let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
    let kms = MemKms::p256(7);
    let store = MemoryStore::new();
    let counting = Hooked::counting(&store);
    let under = SecretId::parse("hostkeys/ca").unwrap();
    let e = init(
        &counting,
        &kms,
        &request(&under, &prefix, CaSource::NewKms(KeyAlgorithm::Ecdsa)),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, CaInitError::Refused(_)), "{e}");
    assert!(e.to_string().contains("nothing was created"), "{e}");
    assert!(counting.log().is_empty(), "{:?}", counting.log());
    assert!(kms.faults.calls().is_empty(), "{:?}", kms.faults.calls());
}

/// A failure at each call before CreateKey leaves nothing; at each call
/// after it, the error names the new key, so it is never left unnamed.
#[tokio::test]
async fn every_failure_after_a_new_kms_key_names_it_and_one_before_leaves_nothing() {
    let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
    let secret = ca_id();
    let new = CaSource::NewKms(KeyAlgorithm::Ecdsa);
    // Before: DescribeSecret, then CreateKey.
    let store = MemoryStore::new();
    let kms = MemKms::p256(7);
    let describe = Hooked::fault_at(&store, 1, Some(Op::Describe), Fault::Fail);
    let e = init(&describe, &kms, &request(&secret, &prefix, new))
        .await
        .unwrap_err();
    assert!(
        matches!(e, CaInitError::Store { .. }) && e.to_string().contains("nothing was created"),
        "{e}"
    );
    assert!(kms.created.lock().unwrap().is_empty());
    kms.faults.fail_nth("kms:CreateKey", 1);
    let e = init(&store, &kms, &request(&secret, &prefix, new)).await.unwrap_err();
    assert!(
        matches!(e, CaInitError::Kms { .. }) && e.to_string().contains("nothing was created"),
        "{e}"
    );
    assert_ne!(e.status(), Status::Success);
    assert!(store.describe(&secret).await.is_err(), "no CA secret");
    // After: GetPublicKey, then CreateSecret.
    kms.faults.fail_nth("kms:GetPublicKey", 1);
    let e = init(&store, &kms, &request(&secret, &prefix, new)).await.unwrap_err();
    let first = kms.created.lock().unwrap()[0].clone();
    assert!(
        e.to_string().contains(&first) && e.to_string().contains("schedule its deletion"),
        "{e}"
    );
    let create = Hooked::fault_at(&store, 1, Some(Op::CreateCa), Fault::Fail);
    let e = init(&create, &kms, &request(&secret, &prefix, new)).await.unwrap_err();
    let second = kms.created.lock().unwrap()[1].clone();
    assert!(
        e.to_string().contains(&second) && e.to_string().contains("is the CA of no secret"),
        "{e}"
    );
    assert!(store.describe(&secret).await.is_err(), "no CA secret");
    // A failed CreateSecret of a CA held in the secret may still have
    // taken effect (a lost answer): never "nothing was created".
    let generated = Hooked::fault_at(&store, 1, Some(Op::CreateCa), Fault::Fail);
    let e = init(
        &generated,
        &kms,
        &request(&secret, &prefix, CaSource::Generate(KeyAlgorithm::Ed25519)),
    )
    .await
    .unwrap_err();
    assert!(
        e.to_string().contains("may or may not exist now") && !e.to_string().contains("nothing was created"),
        "{e}"
    );
    // And then it works, with a third key.
    let report = init(&store, &kms, &request(&secret, &prefix, new)).await.unwrap();
    assert_eq!(
        report.kms_key_arn.as_deref(),
        Some(kms.created.lock().unwrap()[2].as_str())
    );
}
