//! `enroll`'s flow on a node ([`super::host::enroll`]) with a recording
//! sshd: a login node gets the trust and no certificate even before
//! `install` ran; sshd must include enrolment's drop-in by name before the
//! signer is asked, and list the certificates before the reload; the
//! client trust carries the CA's key alone and the revoked keys.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use super::configure::HostPattern;
use super::host::{Setup, enroll};
use super::node::NodeError;
use super::tests::{Aws, Bound, Cluster, FakeImds, InProcess, NOW, compute_1, key_dir, node_keys};
use crate::certificate::CaKey;
use crate::install::sshd::{Effective, ReloadMethod, SshdControl, SshdError};
use crate::keyset::{HostKey, KeyAlgorithm};

/// sshd as a config file, `sshd -T`'s certificates, and a reload flag.
struct FakeSshd {
    config: PathBuf,
    lists_certificates: bool,
    reloaded: AtomicBool,
}

impl SshdControl for FakeSshd {
    fn config(&self) -> &Path {
        &self.config
    }
    fn test(&self) -> Result<(), SshdError> {
        Ok(())
    }
    /// sshd -T's certificates: every drop-in's `HostCertificate` lines,
    /// in order (or none, when another setting wins).
    fn effective(&self) -> Result<Effective, SshdError> {
        let dir = self.config.parent().unwrap().join("sshd_config.d");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        files.sort();
        let host_certificates = files
            .iter()
            .flat_map(|f| {
                std::fs::read_to_string(f)
                    .unwrap()
                    .lines()
                    .filter_map(|l| l.strip_prefix("HostCertificate ").map(str::to_owned))
                    .collect::<Vec<_>>()
            })
            .filter(|_| self.lists_certificates)
            .collect();
        Ok(Effective {
            host_certificates,
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
        reloaded: AtomicBool::new(false),
    };
    (dir, sshd)
}

async fn run(dir: &Path, sshd: &FakeSshd, login: bool, bound: &Bound) -> Result<super::host::Report, NodeError> {
    let aws = Aws::new();
    let ca = CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let cluster = Cluster(vec![compute_1()]);
    let (document, signature) = aws.imds(&compute_1().instance_id, "10.1.0.11", NOW - 60);
    let signer = InProcess {
        aws: &aws,
        cluster: &cluster,
        bound,
        ca: &ca,
        swap_in: None,
    };
    let trust: Vec<HostPattern> = vec!["ip-10-1-*".parse().unwrap(), "10.1.*".parse().unwrap()];
    let setup = Setup {
        ssh_dir: dir,
        asked: &[],
        client_dir: &dir.join("client"),
        trust: &trust,
        login,
    };
    enroll(
        &setup,
        &FakeImds(document, signature),
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
async fn a_login_node_takes_the_trust_and_binds_nothing_before_install_ran() {
    // No install drop-in yet (its install failed at first boot): --login-node decides.
    let (dir, sshd) = node("Include DIR/sshd_config.d/*.conf\n", true);
    let bound = Bound::default();
    let report = run(dir.path(), &sshd, true, &bound).await.unwrap();
    assert!(report.enrolled.is_none() && report.login);
    assert_eq!(certificates(dir.path()), 0);
    assert!(!sshd.reloaded.load(Ordering::SeqCst));
    // Its own keys, which the set will replace, must not bind the instance.
    assert!(bound.0.lock().unwrap().is_empty(), "the login node bound its own keys");
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
    let bound = Bound::default();
    let err = run(dir.path(), &sshd, false, &bound).await.unwrap_err();
    assert!(
        matches!(err, NodeError::Sshd(ref m) if m.contains("does not include")),
        "{err}"
    );
    assert!(bound.0.lock().unwrap().is_empty(), "the signer was asked");
    assert_eq!(certificates(dir.path()), 0);

    // Read, but another setting wins: sshd -T lists no certificate.
    let (dir, sshd) = node("Include DIR/sshd_config.d/*.conf\n", false);
    let err = run(dir.path(), &sshd, false, &bound).await.unwrap_err();
    assert!(
        matches!(err, NodeError::Sshd(ref m) if m.contains("does not list")),
        "{err}"
    );
    assert!(!sshd.reloaded.load(Ordering::SeqCst));

    let (dir, sshd) = node("Include DIR/sshd_config.d/5*.conf\n", true);
    let report = run(dir.path(), &sshd, false, &Bound::default()).await.unwrap();
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
    super::configure::configure_client(dir.path(), &ca_line, std::slice::from_ref(&revoked), &trust).unwrap();
    let known = std::fs::read_to_string(dir.path().join("ssh_known_hosts")).unwrap();
    assert!(!known.contains("EVIL") && !known.contains(" x\n"), "{known}");
    assert_eq!(known.matches("@cert-authority ").count(), 1, "{known}");
    assert!(known.contains(&format!("@revoked 10.1.* {bare}\n")), "{known}");
}

/// The set's own certificate for `key`, where install puts it, and
/// install's drop-in naming it.
fn the_set_certifies(dir: &Path, key: &ssh_key::PrivateKey) {
    let ca = CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let request = crate::certificate::SignRequest {
        principals: vec![crate::certificate::Principal::parse("login.example").unwrap()],
        valid_after: 0,
        valid_before: u64::MAX,
        serial: 1,
        key_id: "the set".to_owned(),
    };
    let public = key.public_key().clone();
    let (_, cert) = crate::certificate::sign_keys(&ca, std::slice::from_ref(&public), &request)
        .unwrap()
        .remove(0);
    let path = dir.join("ssh_host_ed25519_key-cert.pub");
    std::fs::write(&path, crate::certificate::certificate_line(&cert)).unwrap();
    std::fs::create_dir_all(dir.join("sshd_config.d")).unwrap();
    std::fs::write(
        dir.join("sshd_config.d")
            .join(crate::install::sshd_config::DROP_IN_NAME),
        format!("HostCertificate {}\n", path.display()),
    )
    .unwrap();
}

#[tokio::test]
async fn a_login_node_serving_the_set_is_certified_on_the_keys_the_sets_own_certificates_leave() {
    let (dir, sshd) = node("Include DIR/sshd_config.d/*.conf\n", true);
    let keys = super::node::login_keys(dir.path()).unwrap();
    the_set_certifies(dir.path(), &keys[0].1);
    // A certificate of an earlier set, for a key the node no longer holds.
    let stale = dir.path().join("hostkeyctl_next_rsa_key-enrolment-cert.pub");
    std::fs::write(&stale, "old").unwrap();
    let bound = Bound::default();
    let report = run(dir.path(), &sshd, false, &bound).await.unwrap();
    assert!(report.login, "install's drop-in makes it a login node");
    let written = report.enrolled.unwrap();
    let ecdsa = dir.path().join("ssh_host_ecdsa_key-enrolment-cert.pub");
    assert_eq!(
        written.files,
        std::slice::from_ref(&ecdsa),
        "the set's certificate covers ed25519"
    );
    let cert = ssh_key::Certificate::read_file(&ecdsa).unwrap();
    assert_eq!(cert.public_key(), keys[1].1.public_key().key_data());
    let note = report.note.unwrap_or_default();
    assert!(
        note.contains("ssh_host_ed25519_key") && note.contains("left to them"),
        "{note}"
    );
    let drop_in = std::fs::read_to_string(dir.path().join("sshd_config.d/50-hostkeyctl-enrolment.conf")).unwrap();
    assert!(
        drop_in.contains(&format!("HostCertificate {}", ecdsa.display())),
        "{drop_in}"
    );
    assert!(sshd.reloaded.load(Ordering::SeqCst));
    assert!(!stale.exists(), "a stale enrolment certificate stayed");
    assert_eq!(bound.0.lock().unwrap().len(), 1, "the login node bound the set");
    // Its keys are the set's: asking for names is refused before anything.
    let err = enroll(
        &Setup {
            ssh_dir: dir.path(),
            asked: &[crate::certificate::Principal::parse("compute-1").unwrap()],
            client_dir: &dir.path().join("client"),
            trust: &["10.1.*".parse().unwrap()],
            login: true,
        },
        &super::tests::FakeImds(String::new(), String::new()),
        &Refuses,
        &sshd,
        &ReloadMethod::Auto,
        NOW * 1000,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, NodeError::Usage(ref m) if m.contains("--principal")),
        "{err}"
    );
}

/// A signer that must not be asked.
struct Refuses;

impl super::node::Signer for Refuses {
    fn audience(&self) -> &str {
        "none"
    }
    async fn enrol(
        &self,
        _: &super::proof::EnrolRequest,
        _: &[crate::certificate::Principal],
    ) -> Result<super::node::Answer, String> {
        panic!("asked")
    }
    async fn login(&self, _: &super::proof::EnrolRequest, _: &[String]) -> Result<super::node::Answer, String> {
        panic!("asked")
    }
    async fn trust(&self, _: &super::proof::EnrolRequest) -> Result<super::node::Trust, String> {
        panic!("asked")
    }
}
