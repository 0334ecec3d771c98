//! The secret document against a corpus of malformed documents: each is
//! refused with its own error naming the field at fault, and no error ever
//! contains private key material.

use hostkeyctl::document::{DocumentError, FORMAT_V1, MAX_SECRET_BYTES, SecretDocument};
use hostkeyctl::keyset::{KeyAlgorithm, KeySet};
use serde_json::{Value, json};

use crate::common::support::fixtures;

fn node_a() -> KeySet {
    KeySet::load_dir(&fixtures().join("node-a")).unwrap()
}

fn good() -> Value {
    serde_json::from_str(&SecretDocument::new(node_a()).to_json().unwrap()).unwrap()
}

fn fixture_pem(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name)).unwrap()
}

fn entry(doc: &Value, key_type: &str) -> usize {
    doc["keys"]
        .as_array()
        .unwrap()
        .iter()
        .position(|k| k["algorithm"] == key_type)
        .unwrap()
}

/// Parses `text`, expects a refusal, checks the message names `field`, and
/// that it does not quote any line of any private key in the corpus.
fn refused(text: &str, field: &str) -> DocumentError {
    let err = SecretDocument::parse(text).expect_err("malformed document was accepted");
    let message = err.to_string();
    assert!(message.contains(field), "error does not name {field}: {message}");
    for key in good()["keys"].as_array().unwrap() {
        for line in key["private_key"]
            .as_str()
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("-----"))
        {
            assert!(!message.contains(line), "error leaks private key material: {message}");
        }
    }
    err
}

#[test]
fn the_good_document_parses() {
    let doc = good();
    assert_eq!(doc["format"], FORMAT_V1);
    let parsed = SecretDocument::parse(&doc.to_string()).unwrap();
    assert_eq!(parsed.keys, node_a());
}

#[test]
fn not_json_and_wrong_shapes() {
    assert!(matches!(
        refused("-----BEGIN OPENSSH PRIVATE KEY-----", "not JSON"),
        DocumentError::NotJson { .. }
    ));
    assert!(matches!(refused("", "not JSON"), DocumentError::NotJson { .. }));
    assert!(matches!(
        refused(r#"{"format": "hostkeyctl/v1", "#, "not JSON"),
        DocumentError::NotJson { .. }
    ));
    assert!(matches!(
        refused(r#"{"username":"admin","password":"hunter2"}"#, "missing field"),
        DocumentError::Schema { .. }
    ));
    assert!(matches!(
        refused("[1,2,3]", "not a hostkeyctl key set"),
        DocumentError::Schema { .. }
    ));
    let mut doc = good();
    doc["keys"] = json!(doc["keys"][0]["private_key"].clone());
    assert!(matches!(
        refused(&doc.to_string(), "line 1 column"),
        DocumentError::Schema { .. }
    ));
}

#[test]
fn unknown_format_version() {
    let mut doc = good();
    doc["format"] = json!("hostkeyctl/v2");
    assert!(
        matches!(refused(&doc.to_string(), "`format`"), DocumentError::UnknownFormat { found } if found == "hostkeyctl/v2")
    );
}

#[test]
fn bad_created_and_empty_keys() {
    let mut doc = good();
    doc["created"] = json!("yesterday");
    assert!(matches!(
        refused(&doc.to_string(), "`created`"),
        DocumentError::BadCreated { .. }
    ));
    let mut doc = good();
    doc["keys"] = json!([]);
    assert!(matches!(refused(&doc.to_string(), "`keys`"), DocumentError::NoKeys));
}

#[test]
fn truncated_pem() {
    let mut doc = good();
    let i = entry(&doc, "ssh-ed25519");
    let pem = doc["keys"][i]["private_key"].as_str().unwrap().to_owned();
    doc["keys"][i]["private_key"] = json!(pem[..pem.len() / 2]);
    let err = refused(&doc.to_string(), &format!("keys[{i}].private_key"));
    assert!(matches!(err, DocumentError::PrivateKey { index, .. } if index == i));
}

#[test]
fn wrong_key_in_wrong_slot() {
    let mut doc = good();
    let ed = entry(&doc, "ssh-ed25519");
    let ec = entry(&doc, "ecdsa-sha2-nistp256");
    let swapped = doc["keys"][ec]["private_key"].clone();
    doc["keys"][ed]["private_key"] = swapped;
    let err = refused(&doc.to_string(), &format!("keys[{ed}].private_key"));
    assert!(
        matches!(
            err,
            DocumentError::WrongSlot {
                expected: KeyAlgorithm::Ed25519,
                found: KeyAlgorithm::Ecdsa,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn public_key_of_another_key() {
    let mut doc = good();
    let i = entry(&doc, "ssh-rsa");
    doc["keys"][i]["public_key"] = json!(fixture_pem("rsa2048_key.pub").trim());
    let err = refused(&doc.to_string(), &format!("keys[{i}].public_key"));
    assert!(matches!(err, DocumentError::PublicKeyMismatch { .. }), "{err}");
    doc["keys"][i]["public_key"] = json!("ssh-rsa not-base64");
    assert!(matches!(
        refused(&doc.to_string(), "public_key"),
        DocumentError::BadPublicKey { .. }
    ));
}

#[test]
fn fingerprint_mismatch() {
    let mut doc = good();
    let i = entry(&doc, "ecdsa-sha2-nistp256");
    doc["keys"][i]["fingerprint"] = json!("SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    let err = refused(&doc.to_string(), &format!("keys[{i}].fingerprint"));
    assert!(matches!(err, DocumentError::FingerprintMismatch { .. }), "{err}");
}

#[test]
fn encrypted_private_key() {
    let mut doc = good();
    let i = entry(&doc, "ssh-ed25519");
    doc["keys"][i]["private_key"] = json!(fixture_pem("encrypted_ed25519_key"));
    let err = refused(&doc.to_string(), "encrypted with a passphrase");
    assert!(
        matches!(
            err,
            DocumentError::PrivateKey {
                source: hostkeyctl::keyset::KeyError::Encrypted,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn unsupported_key_types_and_names() {
    // A DSA key, an ECDSA key on P-384 and a 1024-bit RSA key in otherwise valid slots.
    for (fixture, slot, expect) in [
        ("dsa_key", "ssh-rsa", "ssh-dss keys are not managed"),
        (
            "ecdsa384_key",
            "ecdsa-sha2-nistp256",
            "ecdsa-sha2-nistp384 keys are not managed",
        ),
        ("rsa1024_key", "ssh-rsa", "1024 bits is too small"),
        // Regression (hardening finding 10): no upper bound let whoever can
        // write the secret make every node's handshakes crawl.
        ("rsa8448_key", "ssh-rsa", "8448 bits is too large"),
    ] {
        let mut doc = good();
        let i = entry(&doc, slot);
        doc["keys"][i]["private_key"] = json!(fixture_pem(fixture));
        refused(&doc.to_string(), expect);
    }
    let mut doc = good();
    doc["keys"][0]["algorithm"] = json!("ssh-dss");
    assert!(matches!(
        refused(&doc.to_string(), "keys[0].algorithm"),
        DocumentError::UnsupportedAlgorithm { .. }
    ));
}

#[test]
fn duplicated_algorithm() {
    let mut doc = good();
    let first = doc["keys"][0].clone();
    doc["keys"].as_array_mut().unwrap().push(first);
    let err = refused(&doc.to_string(), "appears twice");
    assert!(
        matches!(err, DocumentError::DuplicateAlgorithm { index: 3, first: 0, .. }),
        "{err}"
    );
}

#[test]
fn oversize_document() {
    let mut doc = good();
    doc["padding"] = json!("x".repeat(MAX_SECRET_BYTES));
    let err = refused(&doc.to_string(), "at most 65536 bytes");
    assert!(matches!(err, DocumentError::TooLarge { .. }));
}

/// `ssm-document deploy` with SSM failing the second document: the error
/// names the call, the first stays deployed, the others are not made, and
/// the rerun leaves it unchanged and deploys the rest.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_document_stops_the_deploy_there_and_the_rerun_finishes() {
    use hostkeyctl::ssm_document::publish::{Names, publish};
    use hostkeyctl::ssm_document::{CHECK_NAME, CONVERGE_NAME, DEFAULT_NAME};
    let (store, fleet, _) = super::world(1).await;
    let documents = hostkeyctl::testing::MemDispatcher::new(&fleet, &store);
    let names = || Names {
        install: DEFAULT_NAME,
        check: CHECK_NAME,
        converge: CONVERGE_NAME,
    };
    let program = hostkeyctl::ids::Program::parse("hostkeyctl").unwrap();
    documents.faults.fail_nth("ssm:CreateDocument", 2);
    let err = publish(&documents, names(), &program).await.unwrap_err().to_string();
    assert!(err.contains("ssm:CreateDocument"), "{err}");
    let deployed = |name: &str| {
        let rt = tokio::runtime::Handle::current();
        let d =
            tokio::task::block_in_place(|| rt.block_on(hostkeyctl::dispatch::Dispatcher::document(&documents, name)));
        d.unwrap().map(|d| d.version)
    };
    assert_eq!(deployed(DEFAULT_NAME).as_deref(), Some("1"));
    assert_eq!(deployed(CHECK_NAME), None);
    let done = publish(&documents, names(), &program).await.unwrap().json();
    assert_eq!(done["result"], "unchanged", "{done}");
    assert_eq!(done["check"]["result"], "created", "{done}");
    assert_eq!(done["converge"]["result"], "created", "{done}");
}
