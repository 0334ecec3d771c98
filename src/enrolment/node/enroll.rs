//! `hostkeyctl enroll`'s one flow, on the node: enrol its own keys, make
//! sshd serve the certificates, make its ssh client trust the CA for the
//! cluster's patterns, strictly.
//!
//! A login node whose keys `hostkeyctl install` manages serves the
//! canonical set, which rotates and may carry the set's own certificates
//! (sshd holds one certificate per key): its keys are never certified. It
//! claims its instance (certified for no key, so nobody who copies its
//! identity document gets a certificate for its names, whatever keys they
//! hold, the set's included) and gets the client trust alone, so its users
//! reach the cluster's nodes strictly
//! (docs/cluster-trust.md, "Login nodes"). With a cluster port, it serves
//! the cluster instead from a listener of its own ([`super::listener`]):
//! its own keys, certified like every node's, on a port the load balancer
//! does not forward.

use std::path::{Path, PathBuf};

use super::configure::{HostPattern, LoginRoute, configure_client, configure_sshd};
use super::listener::{DIR_NAME, Listener, Service};
use super::request::{Imds, NodeError, Signer, TrustAsk, Written, enrol_node, trust_node};
use crate::certificate::Principal;
use crate::install::sshd::{ReloadMethod, SshdControl};

/// What the node is asked to do.
#[derive(Debug)]
pub struct Setup<'a> {
    /// Where its host keys are.
    pub ssh_dir: &'a Path,
    /// Names it expects its certificates to carry.
    pub asked: &'a [Principal],
    /// The ssh client's directory.
    pub client_dir: &'a Path,
    /// The cluster's host patterns.
    pub trust: &'a [HostPattern],
    /// A login node (it serves, or will serve, the canonical set): it
    /// claims its instance and takes the trust alone, even before
    /// `install` has run.
    pub login: bool,
    /// The login nodes' listener for the cluster: on a login node, serve
    /// it; on every node, reach the login nodes there.
    pub route: Option<&'a LoginRoute>,
    /// How a login node's listener runs.
    pub service: Service,
}

/// What `enroll` did.
#[derive(Debug)]
pub struct Report {
    /// The node's certificates, or `None` on a login node serving the set
    /// with no listener for the cluster.
    pub enrolled: Option<Written>,
    /// A login node's listener for the cluster: its port, when it serves one.
    pub listener: Option<u16>,
    /// The CA's fingerprint.
    pub ca: String,
    /// How sshd was reloaded (`None` when it was left alone).
    pub reload: Option<String>,
    /// The patterns this node's ssh now checks strictly against the CA.
    pub trusted: Vec<String>,
    /// How many revoked keys its trust lists.
    pub revoked: usize,
}

impl Report {
    /// `enroll --output json`.
    pub fn json(&self) -> ReportJson<'_> {
        let files = self.enrolled.as_ref().map(|w| w.files.as_slice()).unwrap_or_default();
        ReportJson {
            ca_fingerprint: &self.ca,
            certificates: files,
            cluster_listener_port: self.listener,
            instance_id: self.enrolled.as_ref().map(|w| w.instance_id.as_str()),
            login_node: self.enrolled.is_none() || self.listener.is_some(),
            principals: self.enrolled.as_ref().map(|w| w.principals.as_slice()),
            sshd_reload: self.reload.as_deref(),
            trusted: &self.trusted,
        }
    }
}

/// `enroll --output json`: what [`enroll`] did.
#[derive(Debug, serde::Serialize)]
pub struct ReportJson<'a> {
    /// The CA's fingerprint.
    pub ca_fingerprint: &'a str,
    /// The certificate files written (none on a login node serving the set).
    pub certificates: &'a [std::path::PathBuf],
    /// A login node's listener for the cluster, when it serves one.
    pub cluster_listener_port: Option<u16>,
    /// The instance enrolled.
    pub instance_id: Option<&'a str>,
    /// Whether this is a login node.
    pub login_node: bool,
    /// The names certified.
    pub principals: Option<&'a [String]>,
    /// How sshd was reloaded.
    pub sshd_reload: Option<&'a str>,
    /// The patterns checked strictly against the CA.
    pub trusted: &'a [String],
}

/// True when `hostkeyctl install` manages the host keys sshd serves (its
/// drop-in, or its block in the main config).
pub fn serves_the_set(sshd_config: &Path) -> bool {
    let drop_in = sshd_config
        .parent()
        .unwrap_or(Path::new("/"))
        .join("sshd_config.d")
        .join(crate::install::sshd_config::DROP_IN_NAME);
    drop_in.exists()
        || std::fs::read_to_string(sshd_config)
            .is_ok_and(|t| t.lines().any(|l| l == crate::install::sshd_config::BEGIN_MARK))
}

/// Enrols the node (or, on a login node serving the set, takes the CA
/// only) and configures sshd and the client. Nothing is written unless
/// the signer's answer checks; a failed `sshd -t` puts the old drop-in back.
/// `now_ms`: Unix milliseconds.
pub async fn enroll(
    setup: &Setup<'_>,
    imds: &impl Imds,
    signer: &impl Signer,
    sshd: &impl SshdControl,
    method: &ReloadMethod,
    now_ms: i64,
) -> Result<Report, NodeError> {
    if setup.trust.is_empty() {
        return Err(NodeError::Usage(
            "no --trust pattern: name the cluster's nodes (`--trust 'ip-10-1-*,10.1.*'`), so its ssh checks them against the CA".to_owned(),
        ));
    }
    if let Some(route) = setup.route {
        route.check_against(setup.trust).map_err(NodeError::Usage)?;
    }
    let login = setup.login || serves_the_set(sshd.config());
    let (enrolled, ca_line, revoked, reload) = match (login, setup.route) {
        (true, Some(route)) => {
            let (written, reload) = enrol_listener(setup, route, imds, signer, sshd, now_ms).await?;
            let line = written.ca_line.clone();
            let revoked = written.revoked.clone();
            (Some(written), line, revoked, Some(reload))
        }
        (true, None) => {
            let trust = match trust_node(setup.ssh_dir, imds, signer, now_ms, TrustAsk::Claim).await {
                Ok(trust) => trust,
                // Refused (a binding to keys not its own, say): the trust
                // is still renewed, so revocations keep reaching it.
                Err(refused @ NodeError::Signer(_)) => {
                    return Err(trust_alone(refused, setup, imds, signer, now_ms).await);
                }
                Err(other) => return Err(other),
            };
            (None, trust.ca, trust.revoked, None)
        }
        (false, _) => {
            super::configure::preflight_sshd(sshd)?;
            let written = enrol_node(setup.ssh_dir, setup.asked, imds, signer, now_ms).await?;
            let files: Vec<PathBuf> = written.files.clone();
            let reload = configure_sshd(sshd, method, &files)?;
            let line = written.ca_line.clone();
            let revoked = written.revoked.clone();
            (Some(written), line, revoked, Some(reload))
        }
    };
    let ca = ssh_key::PublicKey::from_openssh(ca_line.trim())
        .map_err(|e| NodeError::Answer(format!("the CA is not a public key: {e}")))?
        .fingerprint(ssh_key::HashAlg::Sha256)
        .to_string();
    let listener = setup.route.filter(|_| login).map(|r| r.port);
    if listener.is_none() {
        // (The listener's branch wrote it before serving.)
        configure_client(setup.client_dir, &ca_line, &revoked, setup.trust, setup.route)?;
    }
    Ok(Report {
        listener,
        enrolled,
        ca,
        reload,
        trusted: setup.trust.iter().map(|p| p.as_str().to_owned()).collect(),
        revoked: revoked.len(),
    })
}

/// After the signer refused a login node's claim: the client trust renewed
/// from a request for the trust alone (binds nothing); the refusal, and
/// whether the trust was renewed.
async fn trust_alone(
    refused: NodeError,
    setup: &Setup<'_>,
    imds: &impl Imds,
    signer: &impl Signer,
    now_ms: i64,
) -> NodeError {
    let renewed = match trust_node(setup.ssh_dir, imds, signer, now_ms, TrustAsk::Trust).await {
        Ok(trust) => configure_client(setup.client_dir, &trust.ca, &trust.revoked, setup.trust, setup.route)
            .map(|()| "the client trust was renewed all the same".to_owned())
            .unwrap_or_else(|e| format!("the client trust: {e}")),
        Err(e) => format!("the client trust was not renewed ({e})"),
    };
    match refused {
        NodeError::Signer(m) => NodeError::Signer(format!("{m}; {renewed}")),
        other => other,
    }
}

/// A login node's listener for the cluster: its keys enrolled, the client
/// trust written (before the listener, so a listener that fails never
/// holds back a revocation), then the listener served. When the signer
/// refuses or cannot be reached, the listener's configuration still
/// follows the main sshd's, with the certificates it has.
async fn enrol_listener(
    setup: &Setup<'_>,
    route: &LoginRoute,
    imds: &impl Imds,
    signer: &impl Signer,
    sshd: &impl SshdControl,
    now_ms: i64,
) -> Result<(Written, String), NodeError> {
    let binary = sshd
        .binary()
        .ok_or_else(|| NodeError::Usage("a login node's cluster listener needs a real sshd to run".to_owned()))?;
    let main = crate::install::sshd::Sshd {
        binary: binary.to_path_buf(),
        config: sshd.config().to_path_buf(),
    };
    let listener = Listener {
        port: route.port,
        dir: setup.ssh_dir.join(DIR_NAME),
        service: setup.service.clone(),
    };
    listener.preflight()?;
    let _lock = listener.lock()?;
    // Before anything is asked: the main sshd answers sshd -T and the port
    // is not its; failing that, the listener stops (fail closed).
    let main_dump = main
        .dump()
        .map_err(|e| listener.fail_closed(&format!("sshd -T of the main config: {e}"), None))?;
    listener
        .check_port(&crate::install::sshd::Effective::parse(&main_dump))
        .map_err(|e| listener.fail_closed(&e.to_string(), None))?;
    listener.ensure_keys()?;
    let written = match enrol_node(&listener.dir, setup.asked, imds, signer, now_ms).await {
        Ok(written) => written,
        Err(refused) => {
            return Err(after_refusal(
                refused,
                setup,
                route,
                &listener,
                (&main, &main_dump),
                imds,
                signer,
                now_ms,
            )
            .await);
        }
    };
    configure_client(
        setup.client_dir,
        &written.ca_line,
        &written.revoked,
        setup.trust,
        Some(route),
    )?;
    let reload = listener.serve(&main, &main_dump, &written.files)?;
    Ok((written, reload))
}

/// After the signer refused the listener's keys (or could not be asked):
/// the trust still follows the signer's (a request for the trust alone,
/// which binds nothing, gives the CA and the revoked keys), and the
/// listener the main sshd's
/// configuration, with the certificates it has. The refusal, and what
/// else failed.
#[allow(clippy::too_many_arguments)]
async fn after_refusal(
    refused: NodeError,
    setup: &Setup<'_>,
    route: &LoginRoute,
    listener: &Listener,
    (main, main_dump): (&crate::install::sshd::Sshd, &str),
    imds: &impl Imds,
    signer: &impl Signer,
    now_ms: i64,
) -> NodeError {
    let mut also = Vec::new();
    match trust_node(&listener.dir, imds, signer, now_ms, TrustAsk::Trust).await {
        Ok(trust) => {
            if let Err(e) = configure_client(setup.client_dir, &trust.ca, &trust.revoked, setup.trust, Some(route)) {
                also.push(format!("the client trust: {e}"));
            }
        }
        Err(e) => also.push(format!("the client trust was not renewed ({e})")),
    }
    let had = listener.certificates();
    if listener.config().exists()
        && !had.is_empty()
        && let Err(e) = listener.serve(main, main_dump, &had)
    {
        also.push(e.to_string());
    }
    if also.is_empty() {
        return refused;
    }
    let more = also.join("; ");
    match refused {
        NodeError::Signer(m) => NodeError::Signer(format!("{m}; and {more}")),
        NodeError::Imds(m) => NodeError::Imds(format!("{m}; and {more}")),
        other => NodeError::Sshd(format!("{other}; and {more}")),
    }
}
