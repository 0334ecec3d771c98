//! Node-matrix regressions (issue 12) in memory: a run killed between
//! writing and reloading, and a clean rollback on a node that serves a
//! type hostkeyctl does not manage. The bed's profile matrix
//! (tests/it/profiles.rs) runs the same cases against real sshd.

use super::MemDispatcher;
use super::flows::{current, dispatcher_invocation, options, pending_set, world};
use crate::rollout::push_version;
use crate::scan::ScanAlgorithm;

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
    assert!(crate::install::pending::is_marked(
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
    assert!(!crate::install::pending::is_marked(
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
    for a in crate::keyset::KeyAlgorithm::ALL {
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
    crate::install::sshd::SshdControl::reload(node, &crate::install::sshd::ReloadMethod::Auto).unwrap();
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
