//! The post-quantum key exchange in memory (issue 57): install adds the
//! hybrid a node's sshd holds where a crypto policy leaves it out, keeps
//! every exchange sshd applied without it (a site's drop-in before the
//! policy included), follows a changed policy, leaves a
//! policy without X25519 and an sshd without a hybrid alone (naming the
//! upgrade), and rolls back, keys and all, when sshd does not apply its
//! line; the audit reports the warning from the KEXINIT it reads.

use std::sync::Arc;

use hostkeyctl::audit::{Audit, AuditRequest, Conclusion, ExpectedSource};
use hostkeyctl::install::InstallReport;
use hostkeyctl::install::InstallResult;
use hostkeyctl::install::kex::KexStatus;
use hostkeyctl::install::sshd::KexSupport;
use hostkeyctl::scan::ScanPolicy;
use hostkeyctl::scan::warnings::{ClientVersion, MessageCode};
use hostkeyctl::testing::{MemDispatcher, MemFleet, MemNode, MemoryStore};

use super::{current, dir_contents, dispatcher_invocation, secret, world};

/// RHEL 9's DEFAULT policy's list, shortened: no post-quantum exchange.
const POLICY: &str = "curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256,diffie-hellman-group14-sha256";

/// The hybrid OpenSSH 9.2 holds.
const SNTRUP: &str = "sntrup761x25519-sha512@openssh.com";

/// Gives `node` a crypto policy with `kex`, included as RHEL's
/// `50-redhat.conf` does.
fn set_policy(node: &MemNode, kex: &str) {
    let policy = node
        .ssh_dir
        .parent()
        .unwrap()
        .join("crypto-policies/back-ends/opensshserver.config");
    std::fs::create_dir_all(policy.parent().unwrap()).unwrap();
    std::fs::write(&policy, format!("KexAlgorithms {kex}\n")).unwrap();
    std::fs::write(
        node.ssh_dir.join("sshd_config.d/50-redhat.conf"),
        format!("Include {}\n", policy.display()),
    )
    .unwrap();
}

/// Pushes the current set to every node: each node's report.
async fn install(store: &MemoryStore, fleet: &Arc<MemFleet>) -> Vec<InstallReport> {
    let set = current(store).await;
    let dispatcher = MemDispatcher::new(fleet, store);
    let outcome = super::push_all(&dispatcher, fleet, &set).await;
    outcome
        .results
        .iter()
        .map(|r| InstallReport::from_output(&dispatcher_invocation(&dispatcher, &r.instance_id).stdout).unwrap())
        .collect()
}

fn kex_line(node: &MemNode) -> Option<String> {
    let text = std::fs::read_to_string(node.ssh_dir.join("sshd_config.d/00-hostkeyctl.conf")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("KexAlgorithms "))
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_policy_without_a_hybrid_gets_the_one_sshd_holds_and_keeps_the_rest() {
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    set_policy(node, POLICY);
    let first = install(&store, &fleet).await.remove(0);
    assert_eq!(first.result, InstallResult::Changed, "{first:?}");
    let kex = first.kex.clone().unwrap();
    assert_eq!(
        (kex.status, kex.post_quantum),
        (KexStatus::Added, vec![SNTRUP.to_owned()])
    );
    assert_eq!(kex_line(node), Some(format!("{SNTRUP},{POLICY}")));
    assert_eq!(node.kex.lock().unwrap()[0], SNTRUP, "sshd offers it after the reload");
    // Stable over its own line.
    let again = install(&store, &fleet).await.remove(0);
    assert_eq!(again.result, InstallResult::Unchanged, "{again:?}");
    // update-crypto-policies: the next install follows the new list.
    set_policy(node, "curve25519-sha256,ecdh-sha2-nistp384");
    let followed = install(&store, &fleet).await.remove(0);
    assert_eq!(followed.result, InstallResult::Changed, "{followed:?}");
    assert_eq!(
        kex_line(node),
        Some(format!("{SNTRUP},curve25519-sha256,ecdh-sha2-nistp384"))
    );
    // A site drop-in read before the policy (40- sorts before RHEL's
    // 50-redhat.conf) keeps its legacy exchange: the base is what sshd
    // applies without hostkeyctl's line, run after run.
    let site = "curve25519-sha256,diffie-hellman-group14-sha1";
    std::fs::write(
        node.ssh_dir.join("sshd_config.d/40-legacy.conf"),
        format!("KexAlgorithms {site}\n"),
    )
    .unwrap();
    for _ in 0..2 {
        install(&store, &fleet).await;
        assert_eq!(kex_line(node), Some(format!("{SNTRUP},{site}")));
    }
    assert_eq!(install(&store, &fleet).await.remove(0).result, InstallResult::Unchanged);
    std::fs::remove_file(node.ssh_dir.join("sshd_config.d/40-legacy.conf")).unwrap();
    // A policy without X25519, which every hybrid runs: the line goes.
    set_policy(node, "ecdh-sha2-nistp256,diffie-hellman-group14-sha256");
    let forbidden = install(&store, &fleet).await.remove(0);
    assert_eq!(forbidden.kex.unwrap().status, KexStatus::PolicyForbids);
    assert_eq!(kex_line(node), None);
    assert_eq!(
        node.kex.lock().unwrap().join(","),
        "ecdh-sha2-nistp256,diffie-hellman-group14-sha256"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sshd_without_a_hybrid_is_told_its_upgrade_and_nothing_is_written() {
    let (store, fleet, _) = world(1).await;
    let node = &fleet.nodes[0];
    set_policy(node, POLICY);
    *node.kex_support.lock().unwrap() = Some(KexSupport {
        supported: POLICY.split(',').map(str::to_owned).collect(),
        release: "OpenSSH_8.4p1 Debian-5+deb11u3, OpenSSL 1.1.1w".to_owned(),
    });
    let before = dir_contents(&node.ssh_dir);
    let report = install(&store, &fleet).await.remove(0);
    assert_eq!(report.result, InstallResult::Unchanged, "{report:?}");
    let kex = report.kex.unwrap();
    assert_eq!(kex.status, KexStatus::Unsupported);
    assert!(kex.upgrade.unwrap().contains("Debian 12"));
    assert_eq!(dir_contents(&node.ssh_dir), before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_site_list_read_first_is_left_alone_and_a_hybrid_not_offered_rolls_back() {
    let (store, fleet, _) = world(2).await;
    // Node 1: a drop-in that sorts before hostkeyctl's sets the list.
    std::fs::write(
        fleet.nodes[0].ssh_dir.join("sshd_config.d/00-aaa-site.conf"),
        format!("KexAlgorithms {POLICY}\n"),
    )
    .unwrap();
    // Node 2: a policy, and an sshd that does not offer the hybrid after
    // all: the handshake after the reload sees it, and the install,
    // keys included, rolls back.
    set_policy(&fleet.nodes[1], POLICY);
    fleet.nodes[1].faults.lock().unwrap().drops_post_quantum = true;
    let before = dir_contents(&fleet.nodes[1].ssh_dir);
    let reports = install(&store, &fleet).await;
    assert_eq!(reports[0].result, InstallResult::Unchanged, "{:?}", reports[0]);
    assert_eq!(reports[0].kex.as_ref().unwrap().status, KexStatus::SetEarlier);
    assert_eq!(reports[1].result, InstallResult::RolledBack, "{:?}", reports[1]);
    let error = reports[1].error.clone().unwrap();
    assert!(
        error.contains("does not offer the post-quantum key exchange"),
        "{error}"
    );
    assert_eq!(
        dir_contents(&fleet.nodes[1].ssh_dir),
        before,
        "the rollback is byte-identical"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_audit_reports_the_warning_from_the_kexinit_it_reads() {
    let (store, fleet, _) = world(2).await;
    *fleet.nodes[1].kex.lock().unwrap() = POLICY.split(',').map(str::to_owned).collect();
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let audit = Audit {
        store: Some(&store),
        fleet: Some(fleet.as_ref()),
        dispatcher: Some(&dispatcher),
        prober: fleet.clone(),
        policy: ScanPolicy::default(),
    };
    let mut request = AuditRequest {
        expected: ExpectedSource::Secret {
            secret: secret(),
            selector: None,
        },
        targets: vec!["tag:Role=login".parse().unwrap()],
        endpoints: vec![],
        port: 22,
        lb: None,
        samples: 0,
        backends: None,
        certificates: None,
        on_disk: None,
        now: hostkeyctl::certificate::now_unix(),
        client: ClientVersion::NEWEST,
        accepted: vec![],
    };
    let connections_before = fleet.nodes[1].connections();
    let report = audit.run(&request).await.unwrap();
    assert_eq!(report.conclusion, Conclusion::ClientWarnings);
    assert!(report.nodes[0].client_messages.is_empty());
    assert_eq!(report.nodes[1].client_messages[0].code, MessageCode::NoPostQuantumKex);
    // No connection beyond one per key type held.
    assert_eq!(fleet.nodes[1].connections() - connections_before, super::ALGS.len());
    request.client = ClientVersion(10, 0);
    let older = audit.run(&request).await.unwrap();
    assert_eq!(older.conclusion, Conclusion::Consistent);
    assert!(!older.nodes[1].client_messages[0].certain);
    // A site that accepts it (a node kept in FIPS mode): reported, not
    // counted.
    request.client = ClientVersion::NEWEST;
    request.accepted = vec![MessageCode::NoPostQuantumKex];
    let accepted = audit.run(&request).await.unwrap();
    assert_eq!(accepted.conclusion, Conclusion::Consistent);
    assert!(accepted.nodes[1].client_messages[0].accepted);
}
