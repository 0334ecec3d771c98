//! `enroll`'s flow on a node (`hostkeyctl::enrolment::node::enroll::enroll`) with a recording
//! sshd: a login node gets the trust and no certificate even before
//! `install` ran; sshd must include enrolment's drop-in by name before the
//! signer is asked, and list the certificates (and offer their algorithms)
//! before the reload; the client trust carries the CA's key alone and the
//! revoked keys.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::enrolment::{Aws, NOW, compute_1, key_dir, node_keys, signer};
use hostkeyctl::certificate::CaKey;
use hostkeyctl::enrolment::node::NodeError;
use hostkeyctl::enrolment::node::configure::HostPattern;
use hostkeyctl::enrolment::node::enroll::{Setup, enroll};
use hostkeyctl::install::sshd::{Effective, ReloadMethod, SshdControl, SshdError};
use hostkeyctl::keyset::{HostKey, KeyAlgorithm};
use hostkeyctl::testing::{MemBindings, MemCluster, MemImds};

/// sshd as a config file, `sshd -T`'s certificates, and a reload flag.
struct FakeSshd {
    config: PathBuf,
    lists_certificates: bool,
    /// `sshd -T`'s hostkeyalgorithms, when a setting pins it.
    pinned: Option<String>,
    reloaded: AtomicBool,
}

impl SshdControl for FakeSshd {
    fn config(&self) -> &Path {
        &self.config
    }
    fn test(&self) -> Result<(), SshdError> {
        Ok(())
    }
    fn effective(&self) -> Result<Effective, SshdError> {
        let dir = self.config.parent().unwrap();
        let certs = ["ssh_host_ed25519_key-cert.pub", "ssh_host_ecdsa_key-cert.pub"];
        Ok(Effective {
            host_certificates: if self.lists_certificates {
                certs.iter().map(|c| dir.join(c).display().to_string()).collect()
            } else {
                Vec::new()
            },
            host_key_algorithms: self.pinned.clone(),
            ..Effective::default()
        })
    }
    fn reload(&self, _method: &ReloadMethod) -> Result<String, SshdError> {
        self.reloaded.store(true, Ordering::SeqCst);
        Ok("reloaded".to_owned())
    }
}

/// A node directory with `main` as sshd_config, and its sshd.
fn node(main: &str, lists_certificates: bool) -> (tempfile::TempDir, FakeSshd) {
    let dir = key_dir(&node_keys());
    let config = dir.path().join("sshd_config");
    std::fs::write(&config, main.replace("DIR", &dir.path().display().to_string())).unwrap();
    let sshd = FakeSshd {
        config,
        lists_certificates,
        pinned: None,
        reloaded: AtomicBool::new(false),
    };
    (dir, sshd)
}

async fn run(
    dir: &Path,
    sshd: &FakeSshd,
    login: bool,
    bound: &MemBindings,
) -> Result<hostkeyctl::enrolment::node::enroll::Report, NodeError> {
    let aws = Aws::new();
    let ca = CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let cluster = MemCluster::new(vec![compute_1()]);
    let (document, signature) = aws.imds(&compute_1().instance_id, "10.1.0.11", NOW - 60);
    let signer = signer(&aws, &cluster, bound, &ca);
    let trust: Vec<HostPattern> = vec!["ip-10-1-*".parse().unwrap(), "10.1.*".parse().unwrap()];
    let setup = Setup {
        ssh_dir: dir,
        asked: &[],
        client_dir: &dir.join("client"),
        trust: &trust,
        login,
        route: None,
        service: hostkeyctl::enrolment::node::listener::Service::Direct,
    };
    enroll(
        &setup,
        &MemImds::new(document, signature),
        &signer,
        sshd,
        &ReloadMethod::Auto,
        NOW * 1000,
    )
    .await
}

fn certificates(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with("-cert.pub"))
        .count()
}

#[tokio::test]
async fn a_login_node_takes_the_trust_and_no_certificate_before_install_ran() {
    // No install drop-in yet (its install failed at first boot): --login-node decides.
    let (dir, sshd) = node("Include DIR/sshd_config.d/*.conf\n", true);
    let bound = MemBindings::default();
    let report = run(dir.path(), &sshd, true, &bound).await.unwrap();
    assert!(report.enrolled.is_none());
    assert_eq!(certificates(dir.path()), 0);
    assert!(!sshd.reloaded.load(Ordering::SeqCst));
    assert_eq!(
        bound.all.lock().unwrap().len(),
        1,
        "the login node claimed its instance"
    );
    let known = std::fs::read_to_string(dir.path().join("client/ssh_known_hosts")).unwrap();
    assert!(
        known.contains("@cert-authority ip-10-1-*,10.1.* ssh-ed25519 "),
        "{known}"
    );
}

#[tokio::test]
async fn sshd_must_read_the_drop_in_before_the_signer_is_asked_and_list_the_certificates_before_the_reload() {
    // An Include of another file of the directory: sshd would never read ours.
    let (dir, sshd) = node("Include DIR/sshd_config.d/10-other.conf\n", true);
    let bound = MemBindings::default();
    let err = run(dir.path(), &sshd, false, &bound).await.unwrap_err();
    assert!(
        matches!(err, NodeError::Sshd(ref m) if m.contains("does not include")),
        "{err}"
    );
    assert!(bound.all.lock().unwrap().is_empty(), "the signer was asked");
    assert_eq!(certificates(dir.path()), 0);

    // Read, but another setting wins: sshd -T lists no certificate.
    let (dir, sshd) = node("Include DIR/sshd_config.d/*.conf\n", false);
    let err = run(dir.path(), &sshd, false, &bound).await.unwrap_err();
    assert!(
        matches!(err, NodeError::Sshd(ref m) if m.contains("does not list")),
        "{err}"
    );
    assert!(!sshd.reloaded.load(Ordering::SeqCst));

    // Listed, but a pin of plain algorithms would keep them from clients.
    let (dir, mut sshd) = node("Include DIR/sshd_config.d/*.conf\n", true);
    sshd.pinned = Some("ssh-ed25519,ecdsa-sha2-nistp256,rsa-sha2-512".to_owned());
    let err = run(dir.path(), &sshd, false, &MemBindings::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, NodeError::Sshd(ref m) if m.contains("no certificate algorithm")),
        "{err}"
    );
    assert!(!sshd.reloaded.load(Ordering::SeqCst));

    let (dir, sshd) = node("Include DIR/sshd_config.d/5*.conf\n", true);
    let report = run(dir.path(), &sshd, false, &MemBindings::default()).await.unwrap();
    assert!(report.enrolled.is_some() && sshd.reloaded.load(Ordering::SeqCst));
    assert_eq!(certificates(dir.path()), 2);
}

#[test]
fn the_client_trust_carries_the_cas_key_alone_and_each_revoked_key() {
    let dir = tempfile::tempdir().unwrap();
    let ca = HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap();
    let ca_line = format!("{} x\n@cert-authority * ssh-ed25519 EVIL", ca.public_line().trim());
    let key = node_keys()[0].public_key().clone();
    let revoked = format!("{} with a comment", key.to_openssh().unwrap());
    let bare = ssh_key::PublicKey::from(key.key_data().clone()).to_openssh().unwrap();
    let trust: Vec<HostPattern> = vec!["10.1.*".parse().unwrap()];
    hostkeyctl::enrolment::node::configure::configure_client(
        dir.path(),
        &ca_line,
        std::slice::from_ref(&revoked),
        &trust,
        None,
    )
    .unwrap();
    let known = std::fs::read_to_string(dir.path().join("ssh_known_hosts")).unwrap();
    assert!(!known.contains("EVIL") && !known.contains(" x\n"), "{known}");
    assert_eq!(known.matches("@cert-authority ").count(), 1, "{known}");
    assert!(known.contains(&format!("@revoked 10.1.* {bare}\n")), "{known}");
}

#[test]
fn the_login_nodes_are_reached_on_their_listener_and_trusted_there() {
    use hostkeyctl::enrolment::node::configure::LoginRoute;
    let dir = tempfile::tempdir().unwrap();
    let ca = HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap();
    let trust: Vec<HostPattern> = vec!["ip-10-1-*".parse().unwrap(), "10.1.*".parse().unwrap()];
    let logins: Vec<HostPattern> = vec!["ip-10-1-17-*".parse().unwrap(), "10.1.17.*".parse().unwrap()];
    for (hosts, port, said) in [
        (&logins[..], None, "without --cluster-port"),
        (&[][..], Some(2222), "without --login-hosts"),
        (&logins[..], Some(22), "not 0 or 22"),
    ] {
        let refused = LoginRoute::new(hosts, port).unwrap_err();
        assert!(refused.contains(said), "{refused}");
    }
    let negated: Vec<HostPattern> = vec!["!10.1.17.*".parse().unwrap()];
    assert!(LoginRoute::new(&negated, Some(2222)).is_err());
    assert_eq!(LoginRoute::new(&[], None).unwrap(), None);
    let route = LoginRoute::new(&logins, Some(2222)).unwrap().unwrap();
    assert!(route.check_against(&trust).is_ok());
    let broad = LoginRoute::new(&trust[1..], Some(2222)).unwrap().unwrap();
    let refused = broad.check_against(&trust).unwrap_err();
    assert!(
        refused.contains("--login-hosts 10.1.* is also a --trust pattern"),
        "{refused}"
    );
    let revoked = node_keys()[0].public_key().to_openssh().unwrap();
    hostkeyctl::enrolment::node::configure::configure_client(
        dir.path(),
        &ca.public_line(),
        std::slice::from_ref(&revoked),
        &trust,
        Some(&route),
    )
    .unwrap();
    let known = std::fs::read_to_string(dir.path().join("ssh_known_hosts")).unwrap();
    let names = "ip-10-1-*,10.1.*,[ip-10-1-17-*]:2222,[10.1.17.*]:2222";
    assert!(
        known.contains(&format!("@cert-authority {names} ssh-ed25519 ")),
        "{known}"
    );
    assert!(known.contains(&format!("@revoked {names} ")), "{known}");
    let config = std::fs::read_to_string(dir.path().join("ssh_config.d/00-hostkeyctl-cluster.conf")).unwrap();
    let login_block = config
        .find("Host ip-10-1-17-* 10.1.17.*\n    Port 2222\n    StrictHostKeyChecking yes")
        .unwrap();
    // The login nodes' block comes first: ssh keeps the first Port.
    assert!(
        login_block < config.find("Host ip-10-1-* 10.1.*\n").unwrap(),
        "{config}"
    );
}
