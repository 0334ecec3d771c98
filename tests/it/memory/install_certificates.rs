//! install in memory with certificates: a node serving its own is refused, the set's are served and verified, each bad one refused.

use super::current;
use super::dir_contents;
use super::dispatcher_invocation;
use super::sign_current;
use super::world;
use hostkeyctl::exit::ExitStatus as _;
use hostkeyctl::exit::Status;
use hostkeyctl::install::InstallReport;
use hostkeyctl::install::InstallResult;
use hostkeyctl::scan::ScanAlgorithm;
use hostkeyctl::testing::MemDispatcher;

/// Node matrix (issue 12), certificates (issue 17): a node that already
/// serves a host certificate hostkeyctl did not install is refused with
/// exit 2 naming the HostCertificate line and the admin's two choices, and
/// no file is touched; installing would replace the certified key and lock
/// out clients that trust only the CA.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_serving_host_certificates_is_refused_untouched() {
    let (store, fleet, _) = world(1).await;
    let cert = fleet.nodes[0].ssh_dir.join("ssh_host_ed25519_key-cert.pub");
    let listed = format!("HostCertificate {}\n", cert.display());
    let error = super::refused_with_config(&store, &fleet, &listed).await;
    assert!(
        error.contains("sshd serves host certificates hostkeyctl did not install")
            && error.contains("--existing-certificates replace")
            && error.contains(&format!("HostCertificate {}", cert.display())),
        "{error}"
    );
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
    let outcome = super::push_all(&dispatcher, &fleet, &signed).await;
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
    let outcome = super::push_all(&dispatcher, &fleet, &signed).await;
    let error = outcome.results[0].error.clone().unwrap_or_default();
    assert!(error.contains("without its certificate"), "{error}");
    let inv = dispatcher_invocation(&dispatcher, &node.instance.instance_id);
    assert_eq!(inv.response_code, Some(3), "{inv:?}");
    assert_eq!(dir_contents(&node.ssh_dir), before, "not rolled back");
    assert!(node.serves(&signed.document.keys));
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
    let ca = hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
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
    let hostkeyctl::certificate::CaKey::Held(held) = &ca else {
        unreachable!("a held CA")
    };
    let ca_private = ssh_key::PrivateKey::from_openssh(held.reveal_private_openssh().as_bytes()).unwrap();
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
    let line = "hostkeyctl install --secret-id=hk --principal=login.test --quiet";
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
    let ca = hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
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
    let outcome = super::push_all(&dispatcher, &fleet, &signed).await;
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
    let again = super::push_all(&dispatcher, &fleet, &signed).await;
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
    let ca = hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
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
