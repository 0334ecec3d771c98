//! install in memory: rollback, a dead sshd, symlinked files, a damaged marker, a run killed before its reload, an unmanaged type, bad input (certificates: install_certificates.rs; the lock: install_lock.rs).

use super::current;
use super::dir_contents;
use super::dispatcher_invocation;
use super::options;
use super::pending_set;
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
    let outcome = super::push_all(&dispatcher, &fleet, &pending).await;
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
    let outcome = super::push_all(&dispatcher, &fleet, &next).await;
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
    let damaged = format!(
        "{}\nHostKeyAlgorithms ssh-ed25519\n# END hostkeyctl!\nMatch User admin\n  ForceCommand /bin/false\n",
        hostkeyctl::install::sshd_config::BEGIN_MARK
    );
    let error = super::refused_with_config(&store, &fleet, &damaged).await;
    assert!(
        error.contains("sshd_config: line") && error.contains("damaged hostkeyctl marker"),
        "{error}"
    );
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
    let outcome = super::push_all(&dispatcher, &fleet, &next).await;
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
