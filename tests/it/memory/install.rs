//! install in memory: rollback, a dead sshd, symlinked files, a damaged marker, certificates, a run killed before its reload, the lock.

use super::current;
use super::dir_contents;
use super::dispatcher_invocation;
use super::options;
use super::pending_set;
use super::sign_current;
use super::world;
use hostkeyctl::exit::ExitStatus as _;
use hostkeyctl::exit::Status;
use hostkeyctl::install::InstallReport;
use hostkeyctl::install::InstallResult;
use hostkeyctl::rollout::push_version;
use hostkeyctl::scan::ScanAlgorithm;
use hostkeyctl::testing::MemDispatcher;

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_reload_rolls_back_and_a_dead_sshd_is_exit_5() {
    let (store, fleet, _) = world(2).await;
    let pending = pending_set(&store).await;
    let before = current(&store).await;
    fleet.nodes[0].faults.lock().unwrap().reload_fails = true;
    fleet.nodes[1].faults.lock().unwrap().dies_on_reload = true;
    let on_disk = dir_contents(&fleet.nodes[0].ssh_dir);
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &pending, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    let reports: Vec<InstallReport> = outcome
        .results
        .iter()
        .map(|r| {
            let inv = dispatcher_invocation(&dispatcher, &r.instance_id);
            InstallReport::from_output(&inv.stdout).unwrap()
        })
        .collect();
    assert_eq!(reports[0].result, InstallResult::RolledBack, "{:?}", reports[0].error);
    assert_eq!(reports[0].status(), Status::Incomplete);
    assert_eq!(
        dir_contents(&fleet.nodes[0].ssh_dir),
        on_disk,
        "the rollback is byte-identical"
    );
    assert!(fleet.nodes[0].serves(&before.document.keys));
    assert_eq!(reports[1].result, InstallResult::RollbackFailed, "{:?}", reports[1]);
    assert_eq!(reports[1].status(), Status::RollbackFailed);
    assert_eq!(reports[1].status().code(), 5);
    assert!(!outcome.all_ok());
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
        hostkeyctl::install::sshd_config::BEGIN_MARK
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
        assert_eq!(
            served.get(&hostkeyctl::scan::ScanAlgorithm::for_managed(*a)),
            Some(cert)
        );
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

/// Regression: an overlap install killed after writing its files and
/// before reloading left the files converged; the next run saw nothing to
/// do ("unchanged") because a handshake cannot see the extra keys, so sshd
/// never served the next set. The reload-pending marker makes the next run
/// reload and verify.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_before_the_reload_is_finished_by_the_next() {
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let current = current(&store).await;
    let next = pending_set(&store).await;
    let instances = fleet.instances();
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let reloads_before = node.reloads();
    node.faults.lock().unwrap().killed_at_reload = true;
    let killed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(push_version(
                &dispatcher,
                &current,
                Some(&next),
                &instances,
                &options(0),
                &|_, _| {},
            ))
        })
    }));
    assert!(killed.is_err(), "the injected kill did not happen");
    assert!(hostkeyctl::install::reload_marker::is_marked(
        &node.root.join("var/lib/hostkeyctl")
    ));
    assert_eq!(node.reloads(), reloads_before, "the killed run reloaded");
    node.faults.lock().unwrap().killed_at_reload = false;

    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &current, Some(&next), &instances, &options(0), &|_, _| {})
        .await
        .unwrap();
    assert!(outcome.all_ok(), "{:?}", outcome.results);
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    let report: serde_json::Value = serde_json::from_str(inv.stdout.trim()).unwrap();
    assert_eq!(report["result"], "reloaded", "{report}");
    assert_eq!(node.reloads(), reloads_before + 1, "the next run did not reload");
    assert!(!hostkeyctl::install::reload_marker::is_marked(
        &node.root.join("var/lib/hostkeyctl")
    ));

    // A third run has nothing left to do.
    let dispatcher = MemDispatcher::new(&fleet, &store);
    push_version(&dispatcher, &current, Some(&next), &instances, &options(0), &|_, _| {})
        .await
        .unwrap();
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    let report: serde_json::Value = serde_json::from_str(inv.stdout.trim()).unwrap();
    assert_eq!(report["result"], "unchanged", "{report}");
    assert_eq!(node.reloads(), reloads_before + 1);
}

/// Regression: a node serving an unmanaged ECDSA P-384 key, with another
/// drop-in sorting before `00-hostkeyctl.conf` that sets HostKeyAlgorithms.
/// The install is refused at the settings check and the files restored:
/// a clean rollback (exit 3), which was reported as "rollback failed"
/// (exit 5) because the rollback was checked against the managed key files
/// only, and the P-384 key sshd still serves looked like an intruder.
#[tokio::test(flavor = "multi_thread")]
async fn a_clean_rollback_on_a_node_with_an_unmanaged_type_is_reported_as_such() {
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ecdsa384_key");
    let p384 = node.ssh_dir.join("ssh_host_ecdsa384_key");
    std::fs::copy(&fixture, &p384).unwrap();
    let config = node.ssh_dir.join("sshd_config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    for a in hostkeyctl::keyset::KeyAlgorithm::ALL {
        text.push_str(&format!(
            "HostKey {}\n",
            node.ssh_dir.join(a.private_file_name()).display()
        ));
    }
    text.push_str(&format!("HostKey {}\n", p384.display()));
    std::fs::write(&config, text).unwrap();
    std::fs::write(
        node.ssh_dir.join("sshd_config.d/00-cloud.conf"),
        "HostKeyAlgorithms ssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,rsa-sha2-512,rsa-sha2-256\n",
    )
    .unwrap();
    // sshd (re)started with that config: it serves the P-384 key too.
    std::fs::remove_file(node.ssh_dir.join("sshd_config.d/00-hostkeyctl.conf")).unwrap();
    hostkeyctl::install::sshd::SshdControl::reload(node, &hostkeyctl::install::sshd::ReloadMethod::Auto).unwrap();
    assert!(node.served().unwrap().contains_key(&ScanAlgorithm::EcdsaP384));
    let served_before = node.served();

    let next = pending_set(&store).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &next, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    let report: serde_json::Value = serde_json::from_str(inv.stdout.trim()).unwrap();
    assert_eq!(report["result"], "rolled_back", "{report}");
    assert_eq!(inv.response_code, Some(3), "{report}");
    assert!(
        report["error"]
            .as_str()
            .unwrap_or_default()
            .contains("another HostKeyAlgorithms line"),
        "{report}"
    );
    assert!(!outcome.all_ok());
    assert_eq!(
        node.served(),
        served_before,
        "sshd serves something else after the rollback"
    );
}

/// `install --check --expect` reads no secret: a node serving its own keys
/// is drift (exit 1); one serving the set matches (exit 0).
#[tokio::test(flavor = "multi_thread")]
async fn check_with_fingerprints_reports_drift_and_reads_no_secret() {
    let (store, fleet, _) = super::world(2).await;
    let set = super::current(&store).await;
    let expect: Vec<String> = set
        .document
        .keys
        .keys()
        .map(|k| format!("--expect={}", k.fingerprint()))
        .collect();
    let line = format!("hostkeyctl install --check --quiet {}", expect.join(" "));
    let matches = super::run_line(&fleet, &store, &line).await;
    assert!(matches.iter().all(|i| i.response_code == Some(0)), "{matches:?}");
    let other = hostkeyctl::testing::MemFleet::new(1, &super::ALGS).unwrap();
    let empty = hostkeyctl::testing::MemoryStore::new();
    let drift = super::run_line(&other, &empty, &line).await;
    assert_eq!(drift[0].response_code, Some(1), "{:?}", drift[0]);
    let report = hostkeyctl::install::InstallReport::from_output(&drift[0].stdout).unwrap();
    assert_eq!(report.result.as_str(), "drift");
}

/// A version that does not parse (a truncated private key), an `--expect`
/// the set does not have, a secret that is not a key set: refused (exit 2),
/// nothing written, sshd never reloaded, and no secret value in the output.
#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_refused_before_anything_is_written() {
    let (store, fleet, _) = super::world(1).await;
    let node = &fleet.nodes[0];
    let before = super::dir_contents(&node.ssh_dir);
    let reloads = node.reloads();
    let wrong = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let refused = super::run_line(
        &fleet,
        &store,
        &format!("hostkeyctl install --secret-id=hk --expect={wrong} --quiet"),
    )
    .await;
    assert_eq!(refused[0].response_code, Some(2), "{:?}", refused[0]);
    let report = hostkeyctl::install::InstallReport::from_output(&refused[0].stdout).unwrap();
    assert_eq!(report.result.as_str(), "refused");
    let secret = hostkeyctl::ids::SecretId::parse("db").unwrap();
    store.put_raw(&secret, "hunter2");
    let not_a_set = super::run_line(&fleet, &store, "hostkeyctl install --secret-id=db --quiet").await;
    assert_eq!(not_a_set[0].response_code, Some(2), "{:?}", not_a_set[0]);
    assert!(!not_a_set[0].stdout.contains("hunter2") && !not_a_set[0].stderr.contains("hunter2"));
    let current = super::current(&store).await;
    let mut text: serde_json::Value = serde_json::from_str(&current.document.to_json().unwrap()).unwrap();
    let pem = text["keys"][0]["private_key"].as_str().unwrap().to_owned();
    text["keys"][0]["private_key"] = serde_json::json!(pem[..pem.len() / 2]);
    let damaged = hostkeyctl::ids::SecretId::parse("damaged").unwrap();
    store.put_raw(&damaged, &text.to_string());
    let truncated = super::run_line(&fleet, &store, "hostkeyctl install --secret-id=damaged --quiet").await;
    assert_eq!(truncated[0].response_code, Some(2), "{:?}", truncated[0]);
    let report = hostkeyctl::install::InstallReport::from_output(&truncated[0].stdout).unwrap();
    assert!(report.error.unwrap_or_default().contains("keys[0].private_key"));
    // The node's ssh directory is missing.
    let moved = node.ssh_dir.with_extension("moved");
    std::fs::rename(&node.ssh_dir, &moved).unwrap();
    let no_dir = super::run_line(&fleet, &store, "hostkeyctl install --secret-id=hk --quiet").await;
    std::fs::rename(&moved, &node.ssh_dir).unwrap();
    assert_eq!(no_dir[0].response_code, Some(2), "{:?}", no_dir[0]);
    assert!(
        no_dir[0].stderr.contains("does not exist") || no_dir[0].stdout.contains("does not exist"),
        "{:?}",
        no_dir[0]
    );
    assert_eq!(
        super::dir_contents(&node.ssh_dir),
        before,
        "a refused install touched the files"
    );
    assert_eq!(node.reloads(), reloads, "a refused install reloaded sshd");
}

/// Each bad certificate in the set (another key's, a user certificate, an
/// expired one, one without the required principal) is refused with what
/// is wrong, nothing written and sshd not reloaded; the good one is served.
#[tokio::test(flavor = "multi_thread")]
async fn each_bad_certificate_is_refused_and_the_good_one_served() {
    use hostkeyctl::certificate::{Principal, SignRequest, now_unix, sign_set};
    use hostkeyctl::keyset::{HostKey, KeyAlgorithm, KeySet};
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let set = current(&store).await;
    let ca = HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap();
    let now = now_unix();
    let request = |names: &[&str], after: u64, before: u64| SignRequest {
        principals: names.iter().map(|n| Principal::parse(n).unwrap()).collect(),
        valid_after: after,
        valid_before: before,
        serial: 7,
        key_id: "test".to_owned(),
    };
    let ed25519 = |keys: &KeySet, request: &SignRequest| {
        sign_set(&ca, keys, request)
            .unwrap()
            .into_iter()
            .find(|(a, _)| *a == KeyAlgorithm::Ed25519)
            .unwrap()
            .1
    };
    let month = now + 30 * 86_400;
    let other = KeySet::generate(&super::ALGS, 2048).unwrap();
    let key = set
        .document
        .keys
        .keys()
        .find(|k| k.algorithm() == KeyAlgorithm::Ed25519)
        .unwrap();
    let ca_private = ssh_key::PrivateKey::from_openssh(ca.reveal_private_openssh().as_bytes()).unwrap();
    let mut user =
        ssh_key::certificate::Builder::new(vec![0; 32], key.public_key().key_data().clone(), now - 60, month).unwrap();
    user.cert_type(ssh_key::certificate::CertType::User).unwrap();
    user.valid_principal("login.test").unwrap();
    let cases = [
        (
            ed25519(&other, &request(&["login.test"], now - 60, month)),
            "certifies key",
        ),
        (user.sign(&ca_private).unwrap(), "user certificate"),
        (
            ed25519(&set.document.keys, &request(&["login.test"], now - 7200, now - 3600)),
            "expired",
        ),
        (
            ed25519(&set.document.keys, &request(&["other.test"], now - 60, month)),
            "does not list principal \"login.test\"",
        ),
    ];
    let with_certificate = |cert: ssh_key::Certificate| {
        let mut document = set.document.clone();
        document.certificates = [(KeyAlgorithm::Ed25519, cert)].into_iter().collect();
        let store = &store;
        async move {
            super::make_current(store, &document).await;
        }
    };
    let line = "hostkeyctl install --secret-id=hk --require-principal=login.test --quiet";
    let before = dir_contents(&node.ssh_dir);
    let reloads = node.reloads();
    for (cert, says) in cases {
        with_certificate(cert).await;
        let run = super::run_line(&fleet, &store, line).await;
        assert_eq!(run[0].response_code, Some(2), "{says}: {:?}", run[0]);
        let error = InstallReport::from_output(&run[0].stdout).ok().and_then(|r| r.error);
        let said = format!("{}{}", error.unwrap_or_default(), run[0].stderr);
        assert!(said.contains(says), "{says}: {:?}", run[0]);
        assert_eq!(dir_contents(&node.ssh_dir), before, "{says}: files changed");
        assert_eq!(node.reloads(), reloads, "{says}: sshd reloaded");
    }
    let good = ed25519(&set.document.keys, &request(&["login.test"], now - 60, month));
    with_certificate(good.clone()).await;
    let run = super::run_line(&fleet, &store, line).await;
    assert_eq!(run[0].response_code, Some(0), "{:?}", run[0]);
    assert_eq!(
        node.served_certificates()
            .get(&ScanAlgorithm::for_managed(KeyAlgorithm::Ed25519)),
        Some(&good)
    );
}

/// A second install waits for the lock (here for `--lock-timeout 1`), then
/// gives up with exit 3, naming the lock, having written nothing; once the
/// lock is free the same install goes through. The holder takes the lock
/// as `flock(1)` and another hostkeyctl do: flock(2) on the file.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_install_waits_for_the_lock_and_then_gives_up_clearly() {
    let (store, fleet, _) = world(1).await;
    let pending = pending_set(&store).await;
    let node = &fleet.nodes[0];
    let lock_file = node.root.join("run/hostkeyctl.lock");
    std::fs::create_dir_all(lock_file.parent().unwrap()).unwrap();
    let holder = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_file)
        .unwrap();
    holder.lock().unwrap();
    let before = dir_contents(&node.ssh_dir);
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let started = std::time::Instant::now();
    let outcome = push_version(&dispatcher, &pending, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(1),
        "it did not wait"
    );
    assert!(!outcome.all_ok());
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    assert_eq!(inv.response_code, Some(3), "{}", inv.stderr);
    let said = format!("{}{}", inv.stdout, inv.stderr);
    assert!(
        said.contains("another hostkeyctl install holds") && said.contains("hostkeyctl.lock"),
        "{said}"
    );
    assert_eq!(dir_contents(&node.ssh_dir), before, "a locked-out install wrote");
    assert!(!node.serves(&pending.document.keys));

    drop(holder);
    let again = push_version(&dispatcher, &pending, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    assert!(again.all_ok(), "{:?}", again.results);
    assert!(node.serves(&pending.document.keys));
}

/// Regression (issue 25): on OpenSSH 10.0 a third install found its keys
/// "on disk but not served" and reloaded sshd for nothing; the pre-check
/// had been refused (PerSourcePenalties), not answered. A refusal is not
/// "not served": the install says so, exits 3 and does not reload.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_check_of_current_files_is_not_a_reason_to_reload() {
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let reloads = node.reloads();
    node.faults.lock().unwrap().penalized = true;
    let asked = node.connections();
    let before = dir_contents(&node.ssh_dir);
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let set = current(&store).await;
    let outcome = push_version(&dispatcher, &set, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    let report = InstallReport::from_output(&inv.stdout).unwrap();
    assert_eq!(report.result, InstallResult::Incomplete, "{report:?}");
    assert_eq!(report.status().code(), 3);
    assert!(!report.reloaded && node.reloads() == reloads, "sshd was reloaded");
    assert!(
        report
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("PerSourcePenaltyExemptList"),
        "{report:?}"
    );
    assert_eq!(dir_contents(&node.ssh_dir), before);
    assert!(!outcome.all_ok());
    assert_eq!(node.connections() - asked, 1, "asked again after the refusal");
}

/// install's checks of what sshd serves ask only for the types its
/// KEXINIT lists: a no-op install and `--check` each open one connection
/// per key sshd holds (two here), where they asked for all five types.
#[tokio::test(flavor = "multi_thread")]
async fn a_no_op_install_and_check_ask_one_connection_per_held_key() {
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    for line in [
        "hostkeyctl install --secret-id hk",
        "hostkeyctl install --secret-id hk --check",
    ] {
        let asked = node.connections();
        let invocations = super::run_line(&fleet, &store, line).await;
        assert_eq!(
            invocations[0].response_code,
            Some(0),
            "{line}: {}",
            invocations[0].stderr
        );
        assert_eq!(node.connections() - asked, 2, "{line}");
    }
}

/// How many of this process's open files are `path` (the lock file): the
/// holder's, and one for each install that has opened it.
fn opened(path: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|p| p == path))
        .count()
}

async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !condition() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

/// Issue 27: install reads the secret under its lock. Two installs queue
/// behind a held lock: the first opens it (having read the secret, when it
/// read before locking), the rotation then moves AWSCURRENT, the second
/// starts, and the lock is let go. Both took the lock after the move, so
/// both apply the later state, and the node ends on it, in every one of
/// 100 trials. Reading before locking, the first applied the state from
/// before the move in every trial, and left the node on it whenever it
/// won the lock second (one trial in four on the bed).
#[tokio::test(flavor = "multi_thread")]
async fn installs_queued_behind_the_lock_apply_the_state_they_read_under_it() {
    use hostkeyctl::store::{STAGE_CURRENT, STAGE_PENDING, SecretStore, stage};

    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let a = current(&store).await;
    let b = pending_set(&store).await;
    let current_label = stage(STAGE_CURRENT);
    store
        .move_stage(&super::secret(), &stage(STAGE_PENDING), None, Some(&b.version_id))
        .await
        .unwrap();
    let lock_file = node.root.join("run/hostkeyctl.lock");
    std::fs::create_dir_all(lock_file.parent().unwrap()).unwrap();
    let line = format!("hostkeyctl install --secret-id {}", super::secret());
    let install = || async {
        let mut args = hostkeyctl::testing::install_args(node, &line).unwrap();
        args.lock_timeout = 10;
        hostkeyctl::install::run::execute(&args.request().unwrap(), Some(&store), node, fleet.as_ref())
            .await
            .unwrap()
    };
    for trial in 0..100 {
        let (from, to) = if trial % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let holder = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_file)
            .unwrap();
        holder.lock().unwrap();
        let first = install();
        let rest = async {
            until("the first install at the lock", || opened(&lock_file) >= 2).await;
            store
                .move_stage(
                    &super::secret(),
                    &current_label,
                    Some(&to.version_id),
                    Some(&from.version_id),
                )
                .await
                .unwrap();
            let second = install();
            let release = async {
                until("the second install at the lock", || opened(&lock_file) >= 3).await;
                drop(holder);
            };
            tokio::join!(second, release).0
        };
        let (one, two) = tokio::join!(first, rest);
        assert!(
            one.error.is_none() && two.error.is_none(),
            "trial {trial}: {one:?} {two:?}"
        );
        // Both took the lock after the move: both applied the later state.
        for (which, report) in [("first", &one), ("second", &two)] {
            assert_eq!(
                report.version_id.as_ref(),
                Some(&to.version_id),
                "trial {trial}: the {which} install applied the state it read before waiting"
            );
        }
        assert!(
            node.serves(&to.document.keys),
            "trial {trial}: the node serves the set from before the move"
        );
    }
}

/// Regression (issue 27): the node serves its own host certificate, from
/// the same CA as the set's but for its own name, signed outside
/// hostkeyctl. The default `--existing-certificates refuse` took it for
/// one hostkeyctl had written (same CA) and overwrote it: clients that
/// connect by the node's own name were refused. It is refused now (exit
/// 2), nothing written; hostkeyctl's own earlier certificates (their key
/// id) are still replaced without a choice.
#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_own_certificate_from_the_same_ca_is_refused_untouched() {
    use hostkeyctl::certificate::{Principal, SignRequest, sign_set};
    use hostkeyctl::keyset::{HostKey, KeyAlgorithm};
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let ca = HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap();
    let now = hostkeyctl::certificate::now_unix();
    let request = SignRequest {
        principals: vec![Principal::parse("node-1.internal").unwrap()],
        valid_after: now - 60,
        valid_before: now + 86_400,
        serial: 7,
        key_id: "node-1, signed by ops".to_owned(),
    };
    let keys = current(&store).await.document.keys;
    let (_, own) = sign_set(&ca, &keys, &request)
        .unwrap()
        .into_iter()
        .find(|(a, _)| *a == KeyAlgorithm::Ed25519)
        .unwrap();
    let cert = node.ssh_dir.join("ssh_host_ed25519_key-cert.pub");
    std::fs::write(&cert, own.to_openssh().unwrap()).unwrap();
    let config = node.ssh_dir.join("sshd_config");
    let text = format!(
        "{}HostCertificate {}\n",
        std::fs::read_to_string(&config).unwrap(),
        cert.display()
    );
    std::fs::write(&config, text).unwrap();
    let signed = super::sign_current_with(&store, &ca, &["login.test"], 86_400).await;
    let before = dir_contents(&node.ssh_dir);
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let outcome = push_version(&dispatcher, &signed, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    assert_eq!(inv.response_code, Some(2), "{:?}", outcome.results);
    let error = outcome.results[0].error.clone().unwrap_or_default();
    assert!(
        error.contains("sshd serves host certificates hostkeyctl did not install"),
        "{error}"
    );
    assert_eq!(dir_contents(&node.ssh_dir), before, "something was written");

    // A certificate hostkeyctl signed earlier (its key id), other names:
    // the set's replaces it with no choice to make.
    let (_, earlier) = hostkeyctl::certificate::Signer {
        ca: ca.clone(),
        principals: vec![Principal::parse("old-name.test").unwrap()],
        validity: 86_400,
        serial: 1,
        signer: "test".to_owned(),
    }
    .sign(&keys, &hostkeyctl::ids::VersionId::random())
    .unwrap()
    .into_iter()
    .find(|(a, _)| *a == KeyAlgorithm::Ed25519)
    .unwrap();
    std::fs::write(&cert, earlier.to_openssh().unwrap()).unwrap();
    let again = push_version(&dispatcher, &signed, None, &fleet.instances(), &options(0), &|_, _| {})
        .await
        .unwrap();
    assert!(again.all_ok(), "{:?}", again.results);
}

/// Issue 27: a certificate of the set that is expired or not valid yet
/// never keeps a node on its own keys. The keys are installed and served,
/// that certificate is left out (the other one served), and the result is
/// `installed_without_certificates`, exit 6, saying what to renew; every
/// later run says so again without reloading. Before, exit 2 and the
/// node's own keys stayed.
#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_out_of_its_time_is_left_out_and_the_keys_still_converge() {
    use hostkeyctl::certificate::{Principal, SignRequest, now_unix, sign_set};
    use hostkeyctl::keyset::{HostKey, KeyAlgorithm, KeySet};
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    let ca = HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap();
    let now = now_unix();
    let request = |after: u64, before: u64| SignRequest {
        principals: vec![Principal::parse("login.test").unwrap()],
        valid_after: after,
        valid_before: before,
        serial: 3,
        key_id: "test".to_owned(),
    };
    let line = "hostkeyctl install --secret-id=hk --quiet";
    for (after, before, says) in [
        (now - 7200, now - 3600, "expired at"),
        (now + 3600, now + 7200, "not valid before"),
    ] {
        let keys = KeySet::generate(&super::ALGS, 2048).unwrap();
        let good = sign_set(&ca, &keys, &request(now - 60, now + 86_400)).unwrap();
        let bad = sign_set(&ca, &keys, &request(after, before)).unwrap();
        let mut document = hostkeyctl::document::SecretDocument::new(keys);
        document.certificates = good.into_iter().collect();
        let ed25519 = bad.into_iter().find(|(a, _)| *a == KeyAlgorithm::Ed25519).unwrap();
        document.certificates.insert(ed25519.0, ed25519.1);
        super::make_current(&store, &document).await;
        for run in 0..2 {
            let reloads = node.reloads();
            let done = super::run_line(&fleet, &store, line).await;
            assert_eq!(done[0].response_code, Some(6), "{says} {run}: {:?}", done[0]);
            let report = InstallReport::from_output(&done[0].stdout).unwrap();
            assert_eq!(report.result, InstallResult::InstalledWithoutCertificates, "{report:?}");
            assert_eq!(report.status(), Status::CertificatesNeedRenewal);
            assert_eq!(report.certificates_left_out.len(), 1, "{report:?}");
            assert_eq!(report.certificates_left_out[0].algorithm, "ssh-ed25519");
            assert!(report.certificates_left_out[0].reason.contains(says), "{report:?}");
            assert!(
                report.error.as_deref().unwrap_or_default().contains("hostkeyctl sign"),
                "{report:?}"
            );
            assert!(node.serves(&document.keys), "{says} {run}: the keys were not served");
            let served = node.served_certificates();
            assert_eq!(
                served.get(&ScanAlgorithm::for_managed(KeyAlgorithm::Ecdsa)),
                document.certificates.get(&KeyAlgorithm::Ecdsa),
                "{says} {run}: the good certificate is not served"
            );
            assert!(
                !served.contains_key(&ScanAlgorithm::for_managed(KeyAlgorithm::Ed25519)),
                "{says} {run}: the bad certificate is served"
            );
            if run == 1 {
                assert_eq!(node.reloads(), reloads, "{says}: the second run reloaded");
            }
        }
    }
}
