//! Revocation in memory ([`hostkeyctl::revocation`] over the store double):
//! what a rotation retires for clients that trust the CA, from staged and
//! deprecated versions alike, until the certificates expire; the KRL
//! checked by the real `ssh-keygen -Q`.

use std::collections::BTreeSet;
use std::path::Path;

use hostkeyctl::certificate::{now_unix, rfc3339};
use hostkeyctl::fingerprint::Fingerprint;
use hostkeyctl::keyset::{HostKey, KeyAlgorithm};
use hostkeyctl::revocation::{krl, retired, revoked_lines};
use hostkeyctl::rotation::{Outcome, Request};
use hostkeyctl::store::StoredVersion;

use super::{current, rotate_reporting, secret, sign_current_with, world};
use crate::common::support::require;

fn fingerprints(v: &StoredVersion) -> BTreeSet<Fingerprint> {
    v.document.keys.keys().map(|k| k.fingerprint().clone()).collect()
}

/// `ssh-keygen -Q -f KRL` on each key of `v`: whether it said REVOKED.
fn revoked_by_krl(krl_file: &Path, v: &StoredVersion) -> Vec<bool> {
    let dir = tempfile::tempdir().unwrap();
    v.document
        .keys
        .keys()
        .map(|k| {
            let file = dir.path().join(format!("{}.pub", k.algorithm().short_name()));
            std::fs::write(&file, format!("{}\n", k.public_key().to_openssh().unwrap())).unwrap();
            let out = std::process::Command::new(require("ssh-keygen"))
                .arg("-Q")
                .arg("-f")
                .arg(krl_file)
                .arg(&file)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(said.contains("REVOKED") || said.contains(": ok"), "{said}");
            said.contains("REVOKED")
        })
        .collect()
}

/// A rotation retires the signed set: the rotation names its keys and
/// until when, `@revoked` lines and a KRL revoke exactly them (not the
/// current keys), also once a renewal left the first set deprecated (no
/// stage), and nothing is left to revoke once its certificates expired.
#[tokio::test(flavor = "multi_thread")]
async fn a_rotation_retires_the_old_keys_for_ca_clients_until_their_certificates_expire() {
    let (store, fleet, _) = world(1).await;
    let ca = hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let week = 7 * 86_400;
    let first = sign_current_with(&store, &ca, &["login.test"], week).await;
    // The unsigned original has no certificate: nothing to revoke.
    assert!(retired(&store, &secret(), now_unix()).await.unwrap().is_empty());

    let (outcome, report) = rotate_reporting(&store, &fleet, &store, Request::default(), Some(&ca)).await;
    assert_eq!(outcome.unwrap(), Outcome::Rotated);
    let advice = report.revocation.expect("the rotation names what to revoke");
    let named: BTreeSet<Fingerprint> = advice.retired.iter().map(|r| r.fingerprint.clone()).collect();
    assert_eq!(named, fingerprints(&first));
    let expiry = first
        .document
        .certificates
        .values()
        .map(ssh_key::Certificate::valid_before)
        .max();
    assert_eq!(advice.until, rfc3339(expiry.unwrap()));

    // A renewal of the new set: AWSPREVIOUS now holds the current keys
    // (never revoked), and the first set has no stage left.
    let second = current(&store).await;
    sign_current_with(&store, &ca, &["login.test"], week).await;
    let stages = store.stages(&secret());
    let (_, labels) = stages.iter().find(|(id, _)| *id == first.version_id).unwrap();
    assert!(labels.is_empty(), "the first set still has {labels:?}");
    let now = now_unix();
    let list = retired(&store, &secret(), now).await.unwrap();
    let still: BTreeSet<Fingerprint> = list.iter().map(|r| r.fingerprint.clone()).collect();
    assert_eq!(still, fingerprints(&first), "a deprecated set must stay revoked");

    let lines = revoked_lines(&list, "login.test,[login.test]:2222");
    assert_eq!(lines.lines().count(), list.len(), "{lines}");
    for k in first.document.keys.keys() {
        let openssh = k.public_key().to_openssh().unwrap();
        let base64 = openssh.split_whitespace().nth(1).unwrap();
        assert!(
            lines.contains(&format!(
                "@revoked login.test,[login.test]:2222 {} {base64} ",
                k.algorithm().key_type()
            )),
            "{lines}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("revoked.krl");
    std::fs::write(&file, krl(&list, now).unwrap()).unwrap();
    assert!(
        revoked_by_krl(&file, &first).iter().all(|r| *r),
        "a retired key is not in the KRL"
    );
    assert!(
        revoked_by_krl(&file, &second).iter().all(|r| !*r),
        "a current key is in the KRL"
    );
    // An empty KRL is still one ssh-keygen reads: it revokes nothing.
    std::fs::write(&file, krl(&[], now).unwrap()).unwrap();
    assert!(revoked_by_krl(&file, &first).iter().all(|r| !*r));

    // Once the certificates have expired, a CA client refuses the key
    // anyway: nothing is left to revoke.
    let later = retired(&store, &secret(), expiry.unwrap()).await.unwrap();
    assert!(later.is_empty(), "{later:?}");
}

/// An aborted overlap retires the announced set: its certificates were in
/// the secret, so a leak of it is closed only by revocation or expiry.
#[tokio::test(flavor = "multi_thread")]
async fn an_aborted_overlap_revokes_the_announced_set() {
    let (store, fleet, _) = world(1).await;
    let ca = hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let first = sign_current_with(&store, &ca, &["login.test"], 86_400).await;
    let overlap = Request {
        phase: hostkeyctl::rotation::Phase::Overlap { resume: false },
        ..Request::default()
    };
    let (outcome, report) = rotate_reporting(&store, &fleet, &store, overlap, Some(&ca)).await;
    assert_eq!(outcome.unwrap(), Outcome::OverlapStarted);
    assert!(report.revocation.is_none(), "nothing is retired while the overlap runs");
    let announced = store.holder(&secret(), hostkeyctl::store::STAGE_PENDING).unwrap();
    let abort = Request {
        phase: hostkeyctl::rotation::Phase::Abort,
        ..Request::default()
    };
    let (outcome, report) = rotate_reporting(&store, &fleet, &store, abort, Some(&ca)).await;
    assert_eq!(outcome.unwrap(), Outcome::Aborted);
    let advice = report.revocation.expect("the abort names what to revoke");
    assert!(advice.retired.iter().all(|r| r.version_id == announced), "{advice:?}");
    assert!(
        advice
            .retired
            .iter()
            .all(|r| !fingerprints(&first).contains(&r.fingerprint)),
        "a current key was revoked: {advice:?}"
    );
    assert_eq!(advice.retired.len(), first.document.keys.keys().count());
}

/// RB: after a rotation and the KRL the docs prescribe, `rotate
/// --rollback` would bring back keys that KRL revokes, and every client
/// holding it would refuse every node. The KRL's production is recorded
/// in the secret's tags; the rollback refuses, changing nothing, names the
/// keys and what to do; `--force` goes on and says which revocation to
/// hand out; a revocation produced after the rollback no longer names the
/// keys served again.
#[tokio::test(flavor = "multi_thread")]
async fn a_rollback_to_keys_a_handed_out_revocation_names_is_refused_unless_forced() {
    use hostkeyctl::revocation::{TAG_REVOKED, record};
    use hostkeyctl::rotation::RotationError;
    use hostkeyctl::store::SecretStore;
    let (store, fleet, _) = world(1).await;
    let ca = hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let first = sign_current_with(&store, &ca, &["login.test"], 7 * 86_400).await;
    let (outcome, _) = rotate_reporting(&store, &fleet, &store, Request::default(), Some(&ca)).await;
    assert_eq!(outcome.unwrap(), Outcome::Rotated);
    let rollback = Request {
        phase: hostkeyctl::rotation::Phase::Rollback { force: false },
        ..Request::default()
    };
    // Before any revocation was produced, nothing stands in the way (the
    // record is what tells, not the mere rotation): checked on a copy.
    let list = retired(&store, &secret(), now_unix()).await.unwrap();
    assert_eq!(
        list.iter().map(|r| r.fingerprint.clone()).collect::<BTreeSet<_>>(),
        fingerprints(&first)
    );
    // known-hosts --krl records, then writes.
    record(&store, &secret(), &list).await.unwrap();
    let tags = store.describe(&secret()).await.unwrap().tags;
    assert!(tags.iter().any(|(k, v)| k == TAG_REVOKED && !v.is_empty()), "{tags:?}");
    let stages = store.stages(&secret());
    let refused = super::rotate(&store, &fleet, &store, rollback).await.unwrap_err();
    let said = refused.to_string();
    assert!(matches!(refused, RotationError::Refused(_)), "{said}");
    for part in [
        "revoked by the last KRL",
        "--force",
        "--krl FILE",
        "Nothing was changed",
    ] {
        assert!(said.contains(part), "{part}: {said}");
    }
    for fp in fingerprints(&first) {
        assert!(said.contains(&fp.to_string()), "{fp}: {said}");
    }
    assert_eq!(store.stages(&secret()), stages, "a refused rollback changed the stages");
    // Forced: it goes on, and says what to hand out.
    let forced = Request {
        phase: hostkeyctl::rotation::Phase::Rollback { force: true },
        ..rollback
    };
    let (outcome, report) = rotate_reporting(&store, &fleet, &store, forced, Some(&ca)).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(
        report
            .steps
            .iter()
            .any(|s| s.starts_with("rollback --force") && s.contains("--krl FILE")),
        "{:?}",
        report.steps
    );
    assert_eq!(current(&store).await.document.keys, first.document.keys);
    // A revocation produced now names none of the keys served again.
    let after = retired(&store, &secret(), now_unix()).await.unwrap();
    assert!(after.iter().all(|r| !fingerprints(&first).contains(&r.fingerprint)));
}
