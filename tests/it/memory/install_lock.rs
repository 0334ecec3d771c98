//! install in memory under its lock: a second install waits and gives up clearly; a refused check is no reason to reload; one connection per held key; installs queued behind the lock apply what they read under it.

use super::current;
use super::dir_contents;
use super::dispatcher_invocation;
use super::pending_set;
use super::world;
use hostkeyctl::exit::ExitStatus as _;
use hostkeyctl::install::InstallReport;
use hostkeyctl::install::InstallResult;
use hostkeyctl::testing::MemDispatcher;

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
    let holder = hold(&lock_file);
    let before = dir_contents(&node.ssh_dir);
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let started = std::time::Instant::now();
    let outcome = super::push_all(&dispatcher, &fleet, &pending).await;
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
    let again = super::push_all(&dispatcher, &fleet, &pending).await;
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
    let outcome = super::push_all(&dispatcher, &fleet, &set).await;
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

/// Takes the lock at `lock_file` as `flock(1)` would, until the file is
/// dropped.
fn hold(lock_file: &std::path::Path) -> std::fs::File {
    let holder = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_file)
        .unwrap();
    holder.lock().unwrap();
    holder
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
        let holder = hold(&lock_file);
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
