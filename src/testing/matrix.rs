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

/// Runs the nodes' timer: `hostkeyctl install --secret-id hk` (no version)
/// on every node, as docs/bootstrap.md's unit does. Returns the exit codes.
async fn timer(fleet: &super::MemFleet, store: &super::MemoryStore) -> Vec<Option<i32>> {
    use crate::dispatch::{CommandSpec, Dispatcher};
    let dispatcher = MemDispatcher::new(fleet, store);
    let spec = CommandSpec {
        document: crate::ssm_document::RUN_SHELL_SCRIPT.to_owned(),
        document_version: None,
        parameters: None,
        command_line: "hostkeyctl install --secret-id=hk --quiet".to_owned(),
        comment: "timer".to_owned(),
        max_concurrency: "100%".to_owned(),
        max_errors: "100%".to_owned(),
        execution_timeout: std::time::Duration::from_secs(60),
    };
    let ids: Vec<String> = fleet.nodes.iter().map(|n| n.instance.instance_id.clone()).collect();
    let sent = dispatcher.send(&spec, &ids).await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let (states, _) = dispatcher.wait(&sent, deadline, &|_, _| {}).await.unwrap();
    ids.iter().map(|id| states[id].response_code).collect()
}

/// Every node is exactly where the stages say: serves AWSCURRENT, and
/// offers AWSPENDING as extra keys when one is announced (else none).
async fn assert_desired(store: &super::MemoryStore, fleet: &super::MemFleet, what: &str) {
    let desired = crate::store::desired_state(store, &super::flows::secret())
        .await
        .unwrap();
    for node in &fleet.nodes {
        let name = &node.instance.instance_id;
        assert!(
            node.serves(&desired.current.document.keys),
            "{what}: {name} does not serve AWSCURRENT"
        );
        match &desired.next {
            Some(next) => assert!(
                node.offers(&next.document.keys),
                "{what}: {name} does not offer AWSPENDING"
            ),
            None => {
                let leftovers = std::fs::read_dir(&node.ssh_dir)
                    .unwrap()
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("hostkeyctl_next_"))
                    .count();
                assert_eq!(leftovers, 0, "{what}: {name} still offers a dropped next set");
            }
        }
    }
}

/// Issue 14: the timer's plain install and a rotation never disagree. A
/// timer run on every node between every pair of steps leaves every node
/// exactly where the stages say (it used to drop the overlap's next keys
/// and move nodes off the set step's AWSPENDING).
#[tokio::test(flavor = "multi_thread")]
async fn a_timer_between_every_step_never_moves_a_node_off_the_stages() {
    use crate::rotation::{Request, Step};
    use crate::testing::flows::rotate;
    let (store, fleet, _) = world(3).await;
    assert_eq!(timer(&fleet, &store).await, [Some(0); 3]);
    assert_desired(&store, &fleet, "before").await;
    let step = |overlap: bool, resume: bool, finish: bool, stop_after: Option<Step>| Request {
        overlap,
        resume,
        finish,
        stop_after,
        ..Request::default()
    };
    for (request, pushed, what) in [
        (step(true, false, false, Some(Step::Create)), false, "announced"),
        (step(true, true, false, None), true, "overlap started"),
        (
            step(false, false, true, Some(Step::Set)),
            true,
            "finish stopped after set",
        ),
        (
            step(false, false, true, Some(Step::Test)),
            true,
            "finish stopped after test",
        ),
        (step(false, false, true, None), true, "rotated"),
    ] {
        rotate(&store, &fleet, &store, request).await.unwrap();
        if pushed {
            assert_desired(&store, &fleet, what).await;
        }
        assert_eq!(timer(&fleet, &store).await, [Some(0); 3], "{what}");
        assert_desired(&store, &fleet, &format!("{what}, then the timer")).await;
    }
}

/// After a kill at every store call of a rotation, a timer run puts every
/// node where the stages say, and the rotation then completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_timer_after_a_kill_at_every_step_follows_the_stages() {
    use super::{Fault, Faulty};
    use crate::rotation::Request;
    use crate::testing::flows::rotate;
    let (store, fleet, _) = world(2).await;
    let counting = Faulty::counting(&store);
    rotate(&counting, &fleet, &store, Request::default()).await.unwrap();
    let calls = counting.log().len();
    for at in 1..=calls {
        let what = format!("killed after store call {at}");
        let (store, fleet, _) = world(2).await;
        let faulty = Faulty::new(&store, at, None, Fault::CrashAfter);
        assert!(
            rotate(&faulty, &fleet, &store, Request::default()).await.is_err(),
            "{what}"
        );
        assert_eq!(timer(&fleet, &store).await, [Some(0); 2], "{what}");
        assert_desired(&store, &fleet, &what).await;
    }
}
