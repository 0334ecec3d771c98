//! Hardening findings tested through the flows, in memory: two rotations
//! racing for AWSPENDING, symlinked managed files, a damaged marker.

use super::MemDispatcher;
use super::MemoryStore;
use super::flows::{assert_rotated, dir_contents, dispatcher_invocation, options, pending_set, rotate, secret, world};
use crate::document::SecretDocument;
use crate::ids::{SecretId, StageLabel, VersionId};
use crate::rollout::push_version;
use crate::rotation::{Outcome, Request};
use crate::store::{CreateRequest, STAGE_CURRENT, SecretStore, StoreError, StoredVersion, VersionSelector, stage};

/// Holds every run at its first `describe` until all have read the stages,
/// so their claims race for real.
struct Gate<'a, S> {
    inner: &'a S,
    barrier: &'a tokio::sync::Barrier,
    passed: std::sync::atomic::AtomicBool,
}

impl<S: SecretStore> SecretStore for Gate<'_, S> {
    async fn create(&self, req: &CreateRequest<'_>) -> Result<(SecretId, VersionId), StoreError> {
        self.inner.create(req).await
    }
    async fn get(&self, s: &SecretId, v: &VersionSelector) -> Result<StoredVersion, StoreError> {
        self.inner.get(s, v).await
    }
    async fn describe(&self, s: &SecretId) -> Result<crate::store::SecretInfo, StoreError> {
        let info = self.inner.describe(s).await;
        if !self.passed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            self.barrier.wait().await;
        }
        info
    }
    async fn put_version(
        &self,
        s: &SecretId,
        d: &SecretDocument,
        t: &VersionId,
        l: &[StageLabel],
    ) -> Result<VersionId, StoreError> {
        self.inner.put_version(s, d, t, l).await
    }
    async fn move_stage(
        &self,
        s: &SecretId,
        label: &StageLabel,
        to: Option<&VersionId>,
        from: Option<&VersionId>,
    ) -> Result<(), StoreError> {
        self.inner.move_stage(s, label, to, from).await
    }
    async fn tag(&self, s: &SecretId, t: &[(String, String)]) -> Result<(), StoreError> {
        self.inner.tag(s, t).await
    }
}

/// Regression (hardening finding 9): the in-flight check was not atomic and
/// PutSecretValue silently took AWSPENDING from the other admin's version.
/// Two rotations started together, 20 times: exactly one proceeds, the
/// other is refused naming it, and the stages and the fleet end consistent.
#[tokio::test(flavor = "multi_thread")]
async fn two_rotations_started_together_never_both_proceed() {
    for round in 0..20 {
        let (store, fleet, original) = world(2).await;
        let barrier = tokio::sync::Barrier::new(2);
        let gate = |_: usize| Gate {
            inner: &store,
            barrier: &barrier,
            passed: false.into(),
        };
        let (a, b) = (gate(0), gate(1));
        let (ra, rb) = tokio::join!(
            rotate(&a, &fleet, &store, Request::default()),
            rotate(&b, &fleet, &store, Request::default())
        );
        let outcomes = [&ra, &rb];
        let won = outcomes.iter().filter(|r| matches!(r, Ok(Outcome::Rotated))).count();
        assert_eq!(won, 1, "round {round}: {ra:?} / {rb:?}");
        let lost = outcomes.iter().find_map(|r| r.as_ref().err()).unwrap().to_string();
        assert!(
            lost.contains("another rotation claimed AWSPENDING first") || lost.contains("another rotation finished"),
            "round {round}: {lost}"
        );
        assert_rotated(&store, &fleet, &original, &format!("round {round}"));
        let claims = store
            .stages(&secret())
            .into_iter()
            .flat_map(|(_, l)| l)
            .filter(|l| l.starts_with(crate::rotation::CLAIM_PREFIX))
            .count();
        assert_eq!(claims, 0, "round {round}: a claim label was left behind");
    }
}

/// A node whose sshd_config and ed25519 .pub are symlinks (config
/// management): install writes through to the targets, keeps the links,
/// and never leaves a group- or world-writable file.
#[tokio::test(flavor = "multi_thread")]
async fn symlinked_config_and_keys_are_written_through_with_safe_modes() {
    use std::os::unix::fs::PermissionsExt;
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let managed = node.root.join("managed");
    std::fs::create_dir_all(&managed).unwrap();
    for (name, mode) in [("sshd_config", 0o640), ("ssh_host_ed25519_key.pub", 0o664)] {
        let link = node.ssh_dir.join(name);
        let target = managed.join(name);
        std::fs::rename(&link, &target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
    }
    let next = pending_set(&store).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &next, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    assert!(outcome.all_ok(), "{:?}", outcome.results);
    assert!(node.serves(&next.document.keys));
    for (name, mode) in [("sshd_config", 0o640), ("ssh_host_ed25519_key.pub", 0o644)] {
        let link = node.ssh_dir.join(name);
        assert!(
            link.symlink_metadata().unwrap().file_type().is_symlink(),
            "{name} is no longer a link"
        );
        let meta = std::fs::metadata(managed.join(name)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, mode, "{name}");
    }
    for entry in std::fs::read_dir(&node.ssh_dir).unwrap().flatten() {
        let meta = std::fs::metadata(entry.path()).unwrap();
        assert_eq!(
            meta.permissions().mode() & 0o022,
            0,
            "{} is group/world writable",
            entry.path().display()
        );
    }
}

/// Regression (hardening finding 3) through a whole install: a damaged
/// marker in sshd_config is refused with exit 2 naming the file and line,
/// and nothing is written.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_marker_refuses_the_install_and_writes_nothing() {
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let config = node.ssh_dir.join("sshd_config");
    let text = format!(
        "{}{}\nHostKeyAlgorithms ssh-ed25519\n# END hostkeyctl!\nMatch User admin\n  ForceCommand /bin/false\n",
        std::fs::read_to_string(&config).unwrap(),
        crate::install::restrict::BEGIN_MARK
    );
    std::fs::write(&config, &text).unwrap();
    let before = dir_contents(&node.ssh_dir);
    let next = pending_set(&store).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &next, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    let error = outcome.results[0].error.clone().unwrap_or_default();
    assert!(
        error.contains("sshd_config: line") && error.contains("damaged hostkeyctl marker"),
        "{error}"
    );
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    assert_eq!(inv.response_code, Some(2));
    let after = dir_contents(&node.ssh_dir);
    assert_eq!(before, after, "something was written");
}

/// Node matrix (issue 12), certificates (issue 17): a node that already
/// serves a host certificate hostkeyctl did not install is refused with
/// exit 2 naming the HostCertificate line and the admin's two choices, and
/// no file is touched; installing would replace the certified key and lock
/// out clients that trust only the CA.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_serving_host_certificates_is_refused_untouched() {
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let config = node.ssh_dir.join("sshd_config");
    let cert = node.ssh_dir.join("ssh_host_ed25519_key-cert.pub");
    let text = format!(
        "{}HostCertificate {}\n",
        std::fs::read_to_string(&config).unwrap(),
        cert.display()
    );
    std::fs::write(&config, text).unwrap();
    let before = dir_contents(&node.ssh_dir);
    let next = pending_set(&store).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &next, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    let error = outcome.results[0].error.clone().unwrap_or_default();
    assert!(
        error.contains("sshd serves host certificates hostkeyctl did not install")
            && error.contains("--existing-certificates replace")
            && error.contains(&format!("HostCertificate {}", cert.display())),
        "{error}"
    );
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    assert_eq!(inv.response_code, Some(2));
    let after = dir_contents(&node.ssh_dir);
    assert_eq!(before, after, "something was written");
}

/// A signed copy of the current set, stored as AWSCURRENT.
async fn sign_current(store: &MemoryStore, principals: &[&str], valid_for: u64) -> StoredVersion {
    let ca = crate::keyset::HostKey::generate(crate::keyset::KeyAlgorithm::Ed25519, 0).unwrap();
    sign_current_with(store, &ca, principals, valid_for).await
}

/// [`sign_current`] with a given CA.
async fn sign_current_with(
    store: &MemoryStore,
    ca: &crate::keyset::HostKey,
    principals: &[&str],
    valid_for: u64,
) -> StoredVersion {
    let current = super::flows::current(store).await;
    let signer = crate::certificate::Signer {
        ca: ca.clone(),
        principals: principals
            .iter()
            .map(|p| crate::certificate::Principal::parse(p).unwrap())
            .collect(),
        validity: valid_for,
        serial: 1,
        signer: "test".to_owned(),
    };
    let token = VersionId::random();
    let mut document = current.document.clone();
    document.certificates = signer.sign(&document.keys, &token).unwrap();
    let id = store
        .put_version(&secret(), &document, &token, &[stage(STAGE_CURRENT)])
        .await
        .unwrap();
    store.get(&secret(), &VersionSelector::VersionId(id)).await.unwrap()
}

/// Certificates (issue 17): install writes each certificate beside its key,
/// lists it with HostCertificate, pins the certificate algorithms, and
/// proves by handshake that sshd serves them.
#[tokio::test(flavor = "multi_thread")]
async fn install_serves_the_sets_certificates() {
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let signed = sign_current(&store, &["login.test"], 86_400).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &signed, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    assert!(outcome.all_ok(), "{:?}", outcome.results);
    let served = node.served_certificates();
    assert_eq!(served.len(), signed.document.certificates.len());
    for (a, cert) in &signed.document.certificates {
        assert_eq!(served.get(&crate::scan::ScanAlgorithm::for_managed(*a)), Some(cert));
    }
    let drop_in = std::fs::read_to_string(node.ssh_dir.join("sshd_config.d/00-hostkeyctl.conf")).unwrap();
    assert!(
        drop_in.contains("HostCertificate ") && drop_in.contains("ssh-ed25519-cert-v01@openssh.com"),
        "{drop_in}"
    );
}

/// Certificates (issue 17): a reload after which sshd does not serve the
/// certificates is rolled back (exit 3), files restored byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_that_drops_the_certificates_rolls_back() {
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let before = dir_contents(&node.ssh_dir);
    let signed = sign_current(&store, &["login.test"], 86_400).await;
    node.faults.lock().unwrap().drops_certificates = true;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &signed, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    let error = outcome.results[0].error.clone().unwrap_or_default();
    assert!(error.contains("without its certificate"), "{error}");
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    assert_eq!(inv.response_code, Some(3), "{inv:?}");
    assert_eq!(dir_contents(&node.ssh_dir), before, "not rolled back");
    assert!(node.serves(&signed.document.keys));
}

/// Certificates (issue 17): a rotation of a signed set without the CA is
/// refused before anything is stored; a new set without certificates would
/// lock out clients that trust only the CA.
#[tokio::test(flavor = "multi_thread")]
async fn rotating_a_signed_set_without_the_ca_is_refused_and_stores_nothing() {
    let (store, fleet, _) = world(1).await;
    let signed = sign_current(&store, &["login.test"], 86_400).await;
    let versions = store.stages(&secret()).len();
    let refused = super::flows::rotate(&store, &fleet, &store, Request::default()).await;
    let Err(crate::rotation::RotationError::Refused(message)) = refused else {
        panic!("not refused: {refused:?}");
    };
    assert!(message.contains("--ca-secret-id"), "{message}");
    assert_eq!(store.stages(&secret()).len(), versions, "a version was stored");
    assert_eq!(
        store.holder(&secret(), crate::store::STAGE_CURRENT),
        Some(signed.version_id)
    );
}

/// Certificates (issue 17): `rotate --ca-secret-id` signs the new set like
/// the current one (same principals, same validity length, next serial),
/// and every node serves the new certificates once it is promoted.
#[tokio::test(flavor = "multi_thread")]
async fn a_rotation_signs_the_new_set_like_the_current_one() {
    let (store, fleet, _) = world(2).await;
    let ca = crate::keyset::HostKey::generate(crate::keyset::KeyAlgorithm::Ed25519, 0).unwrap();
    let day = 86_400;
    let signed = sign_current_with(&store, &ca, &["login.test", "alias.test"], 30 * day).await;
    let outcome = super::flows::rotate_with_ca(&store, &fleet, &store, Request::default(), Some(&ca))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rotated);
    assert_rotated(&store, &fleet, &signed.version_id, "signed rotation");
    let now = super::flows::current(&store).await;
    assert_ne!(now.document.keys, signed.document.keys);
    assert_eq!(now.document.certificates.len(), now.document.keys.len());
    for cert in now.document.certificates.values() {
        assert_eq!(cert.serial(), 2);
        assert_eq!(cert.valid_principals(), ["login.test", "alias.test"]);
        assert_eq!(&crate::certificate::ca_fingerprint(cert), ca.fingerprint());
        let length = cert.valid_before() - cert.valid_after();
        assert!(
            length.abs_diff(30 * day + crate::certificate::BACKDATE_SECS) < 120,
            "{length}"
        );
    }
    for node in &fleet.nodes {
        let served = node.served_certificates();
        assert_eq!(
            served.len(),
            now.document.certificates.len(),
            "{}",
            node.instance.instance_id
        );
    }
}
