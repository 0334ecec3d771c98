//! The certificate part of install's plan: the set's certificates checked,
//! and, with the admin's choice, what becomes of certificates sshd already
//! serves that hostkeyctl did not install (docs/certificates.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ssh_key::Certificate;

use super::report::LeftOut;
use super::sshd::SshdControl;
use super::sshd_config;
use super::{ExistingCertificates, InstallError, InstallOptions};
use crate::keyset::{KeyAlgorithm, KeySet};
use crate::scan::ScanAlgorithm;

/// Where a managed file really is (see [`super::files::managed_path`]).
fn managed(path: &Path) -> Result<PathBuf, InstallError> {
    super::files::managed_path(path).map_err(super::io_err("cannot manage", path))
}

/// The set's certificates, by key type.
pub(super) type Certificates = BTreeMap<KeyAlgorithm, Certificate>;

/// The certificates a node will serve, and where they come from.
#[derive(Default)]
pub(super) struct CertPlan {
    /// Certificate files to write (ours, or foreign ones replaced).
    pub files: Vec<(PathBuf, Certificate)>,
    /// `HostCertificate` lines of hostkeyctl's settings.
    pub lines: Vec<String>,
    /// Whether any certificate will be served (pins the cert algorithms).
    pub served: bool,
    /// What each type must serve after the reload.
    pub expected: BTreeMap<ScanAlgorithm, Certificate>,
    /// The set's certificates left out: expired or not yet valid.
    pub left_out: Vec<LeftOut>,
}

/// `ssh_host_<alg>_key-cert.pub`, where install puts the set's certificates.
pub fn certificate_path(ssh_dir: &Path, a: KeyAlgorithm) -> PathBuf {
    ssh_dir.join(format!("ssh_host_{}_key-cert.pub", a.short_name()))
}

/// A certificate sshd is configured with that hostkeyctl did not install.
pub(super) struct Foreign {
    path: String,
    cert: Option<Certificate>,
}

/// Checks the set's certificates and decides, with the admin's choice for
/// certificates hostkeyctl did not install, what the node will serve.
pub(super) fn plan_certificates(
    options: &InstallOptions,
    keys: &KeySet,
    certificates: &Certificates,
    foreign: &[Foreign],
) -> Result<CertPlan, InstallError> {
    let (usable, left_out) = usable(options, keys, certificates)?;
    if certificates.is_empty() && !options.require_principals.is_empty() {
        let names: Vec<String> = options.require_principals.iter().map(ToString::to_string).collect();
        return Err(InstallError::NoCertificates(names.join(",")));
    }
    let algorithm_of = |c: &Certificate| KeyAlgorithm::of(&c.public_key().algorithm());
    // A certificate file that holds one hostkeyctl signed with the set's
    // CA was replaced by an earlier run (replace, then push or the timer
    // without the choice): it is the set's, and is replaced again. The CA
    // alone does not make it ours: the node's own certificate from the same
    // CA, for other names (its own hostname), is someone else's, and
    // replacing it refuses clients that connect by those names (issue 27).
    let (ours, foreign): (Vec<&Foreign>, Vec<&Foreign>) = foreign.iter().partition(|f| {
        f.cert.as_ref().is_some_and(|c| {
            algorithm_of(c).and_then(|a| certificates.get(&a)).is_some_and(|mine| {
                crate::certificate::ca_fingerprint(mine) == crate::certificate::ca_fingerprint(c)
                    && (c.key_id().starts_with(crate::certificate::KEY_ID_PREFIX)
                        || same_names(mine.valid_principals(), c.valid_principals()))
            })
        })
    });
    let certificates = &usable;
    let mut replaced: Vec<&Foreign> = ours;
    // Types whose certificate sshd gets through a line that is not ours.
    let mut covered: Vec<KeyAlgorithm> = Vec::new();
    // Types whose certificate is theirs, kept (it certifies the set's key).
    let mut kept: Vec<KeyAlgorithm> = Vec::new();
    let mut plan = CertPlan {
        left_out,
        ..CertPlan::default()
    };
    match options.existing_certificates {
        ExistingCertificates::Refuse if !foreign.is_empty() => {
            return Err(InstallError::HostCertificates(
                foreign.iter().map(|f| f.path.clone()).collect(),
            ));
        }
        ExistingCertificates::Refuse => {}
        ExistingCertificates::Keep => {
            for f in &foreign {
                let certifies = f
                    .cert
                    .as_ref()
                    .filter(|c| keys.keys().any(|k| k.public_key().key_data() == c.public_key()));
                let Some(cert) = certifies else {
                    return Err(InstallError::KeepWouldBreak {
                        path: f.path.clone(),
                        certified: f.cert.as_ref().map_or_else(
                            || "nothing readable".to_owned(),
                            |c| crate::certificate::subject_fingerprint(c).to_string(),
                        ),
                    });
                };
                kept.extend(algorithm_of(cert));
                plan.served = true;
            }
        }
        ExistingCertificates::Replace => replaced.extend(foreign),
    }
    for f in replaced {
        let Some(a) = f.cert.as_ref().and_then(algorithm_of) else {
            continue;
        };
        if let Some(mine) = certificates.get(&a) {
            plan.files.push((managed(Path::new(&f.path))?, mine.clone()));
            covered.push(a);
        }
    }
    for (a, cert) in certificates {
        let scan = ScanAlgorithm::for_managed(*a);
        plan.expected.insert(scan, cert.clone());
        if kept.contains(a) {
            // Theirs stays, certifying the same key: ours is not installed.
            plan.expected.remove(&scan);
            continue;
        }
        if covered.contains(a) {
            // Ours is written into their file, which their line names.
            continue;
        }
        let path = managed(&certificate_path(&options.ssh_dir, *a))?;
        plan.lines.push(path.display().to_string());
        plan.files.push((path, cert.clone()));
    }
    plan.served |= !certificates.is_empty();
    Ok(plan)
}

/// The set's certificates that may be served, and those left out for
/// their time alone.
fn usable(
    options: &InstallOptions,
    keys: &KeySet,
    certificates: &Certificates,
) -> Result<(Certificates, Vec<LeftOut>), InstallError> {
    let now = crate::certificate::now_unix();
    // A certificate whose only fault is its time (expired, not valid yet)
    // is left out, never a reason to keep the node's own keys: plain-key
    // clients need the canonical keys, and the report says to renew
    // (issue 27). Every other fault refuses the set, and so does any fault
    // under --principal, which asks for certificates strictly.
    let mut usable = Certificates::new();
    let mut left_out = Vec::new();
    for (a, cert) in certificates {
        let Some(key) = keys.get(*a) else { continue };
        match crate::certificate::check_for_install(cert, key, now, &options.require_principals) {
            Ok(()) => {
                usable.insert(*a, cert.clone());
            }
            Err(
                problem @ (crate::certificate::CertProblem::Expired { .. }
                | crate::certificate::CertProblem::NotYetValid { .. }),
            ) if options.require_principals.is_empty() => left_out.push(LeftOut {
                algorithm: a.key_type().to_owned(),
                reason: problem.to_string(),
            }),
            Err(problem) => return Err(problem.into()),
        }
    }
    Ok((usable, left_out))
}

/// Whether two certificates name the same principals, in any order.
fn same_names(a: &[String], b: &[String]) -> bool {
    let set = |names: &[String]| names.iter().cloned().collect::<std::collections::BTreeSet<String>>();
    set(a) == set(b)
}

/// The certificate files sshd is configured with that are not in
/// hostkeyctl's own settings.
pub(super) fn foreign_certificates(sshd: &impl SshdControl, texts: &[String], own_settings: &str) -> Vec<Foreign> {
    let ours = sshd_config::keyword_values(&[own_settings.to_owned()], "hostcertificate");
    // sshd -T refuses a config whose current keys do not load, and an
    // install may be what repairs that: then the config text is read.
    let configured = match sshd.effective() {
        Ok(e) => e.host_certificates,
        Err(_) => sshd_config::keyword_values(texts, "hostcertificate"),
    };
    let mut out: Vec<Foreign> = Vec::new();
    for path in configured {
        if ours.contains(&path) || out.iter().any(|f| f.path == path) {
            continue;
        }
        let cert = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| Certificate::from_openssh(t.trim()).ok());
        out.push(Foreign { path, cert });
    }
    out
}
