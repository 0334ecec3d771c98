//! The plan phase of install: read the sets, take the lock, and work out
//! every file as it must be (keys, `.pub`s, sshd settings), with modes and
//! owners following what the distribution uses.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ssh_key::Certificate;
use zeroize::Zeroizing;

use super::certs::{CertPlan, Certificates, foreign_certificates, plan_certificates};
use super::files::{self, Desired};
use super::sshd::{ReloadMethod, SshdControl};
use super::sshd_config::{self, Placement};
use super::{InstallError, InstallOptions, InstallReport, io_err};
use crate::fingerprint::Fingerprint;
use crate::hostport::HostPort;
use crate::keyset::{HostKey, KeyAlgorithm, KeySet};
use crate::scan::ScanAlgorithm;
use crate::store::{SecretStore, VersionSelector};

pub(super) fn check_expect(expect: &[Fingerprint], keys: &KeySet) -> Result<(), InstallError> {
    if expect.is_empty() {
        return Ok(());
    }
    let mut expected = expect.to_vec();
    expected.sort();
    expected.dedup();
    let mut actual: Vec<Fingerprint> = keys.keys().map(|k| k.fingerprint().clone()).collect();
    actual.sort();
    if expected == actual {
        Ok(())
    } else {
        Err(InstallError::ExpectMismatch { expected, actual })
    }
}

struct Lock {
    _file: std::fs::File,
}

/// How often a waiting install tries the lock again.
const LOCK_POLL: Duration = Duration::from_millis(20);

async fn lock(path: &Path, timeout: Duration) -> Result<Lock, InstallError> {
    if let Some(parent) = path.parent() {
        // The state directory by default: root's alone.
        crate::fsutil::create_dir_all(parent, 0o700).map_err(io_err("cannot create the lock directory", parent))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(io_err("cannot open the lock file", path))?;
    let start = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Lock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < timeout => {
                tokio::time::sleep(LOCK_POLL).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(InstallError::Locked {
                    path: path.to_owned(),
                    waited: start.elapsed(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err("cannot lock", path)(e)),
        }
    }
}

/// The files a set needs, with modes and owners following what is there.
/// Where the next set's keys live during a rotation's overlap phase.
pub fn next_private_path(ssh_dir: &Path, a: KeyAlgorithm) -> PathBuf {
    ssh_dir.join(format!("hostkeyctl_next_{}_key", a.short_name()))
}

/// The `.pub` beside [`next_private_path`].
pub fn next_public_path(ssh_dir: &Path, a: KeyAlgorithm) -> PathBuf {
    ssh_dir.join(format!("hostkeyctl_next_{}_key.pub", a.short_name()))
}

/// Where a managed file really is (see [`files::managed_path`]).
fn managed(path: &Path) -> Result<PathBuf, InstallError> {
    files::managed_path(path).map_err(io_err("cannot manage", path))
}

/// The key files of one set, named by `private_path`/`public_path`.
fn key_files(
    keys: &KeySet,
    sibling: Option<(u32, u32, u32)>,
    private_path: &dyn Fn(KeyAlgorithm) -> PathBuf,
    public_path: &dyn Fn(KeyAlgorithm) -> PathBuf,
) -> Result<Vec<Desired>, InstallError> {
    let mut out = Vec::new();
    for key in keys.keys() {
        let a = key.algorithm();
        let private = managed(&private_path(a))?;
        let public = managed(&public_path(a))?;
        let current = files::read_current(&private).map_err(io_err("cannot read", &private))?;
        let (mode, owner) = match (&current, sibling) {
            // Keep a safe existing mode; never keep one sshd would refuse.
            (Some(c), _) if c.mode & 0o037 == 0 => (c.mode, Some((c.uid, c.gid))),
            (_, Some((mode, uid, gid))) => (mode, Some((uid, gid))),
            _ => (0o600, None),
        };
        out.push(Desired {
            path: private,
            content: Some(Zeroizing::new(key.reveal_private_openssh().as_bytes().to_vec())),
            mode,
            owner,
        });
        // A .pub is 0644 whatever it was; only its owner is kept.
        let current_pub = files::read_current(&public).map_err(io_err("cannot read", &public))?;
        let (mode, owner) = (0o644, current_pub.map(|c| (c.uid, c.gid)));
        out.push(Desired {
            path: public,
            content: Some(Zeroizing::new(format!("{}\n", key.public_line()).into_bytes())),
            mode,
            owner,
        });
    }
    Ok(out)
}

/// The mode, owner and group of an existing private host key, which new
/// key files copy: distributions differ (Debian root:root 0600, RHEL
/// root:ssh_keys 0640).
fn sibling_key_owner(ssh_dir: &Path) -> Result<Option<(u32, u32, u32)>, InstallError> {
    for a in KeyAlgorithm::ALL {
        let path = ssh_dir.join(a.private_file_name());
        if let Some(current) = files::read_current(&path).map_err(io_err("cannot read", &path))?
            && current.mode & 0o037 == 0
        {
            return Ok(Some((current.mode, current.uid, current.gid)));
        }
    }
    Ok(None)
}

/// What [`desired_files`] works from.
#[derive(Clone, Copy)]
struct FileInputs<'a> {
    /// The set to serve.
    keys: &'a KeySet,
    /// A rotation's next set, during its overlap.
    next: Option<&'a KeySet>,
    /// The HostKey lines sshd has now.
    host_keys: &'a [String],
    /// Whether the config lists HostKey explicitly.
    explicit_host_keys: bool,
    /// Where the keys live.
    ssh_dir: &'a Path,
    /// Where hostkeyctl's settings go (drop-in or inline block).
    placement: &'a Placement,
    /// The main sshd_config, and its text.
    main_config: &'a Path,
    main_text: &'a str,
    /// The certificates to write.
    certificates: &'a CertPlan,
    /// hostkeyctl's `KexAlgorithms` line ([`super::kex`]).
    kex: Option<&'a str>,
}

/// The files a set needs, with modes and owners following what is there.
/// With `next` (a rotation's overlap phase), also the next set's keys and
/// the explicit HostKey list `host_keys` (current keys first); without it,
/// any next-set files left from an overlap are removed.
fn desired_files(inputs: FileInputs<'_>) -> Result<Vec<Desired>, InstallError> {
    let FileInputs {
        keys,
        next,
        host_keys,
        explicit_host_keys,
        ssh_dir,
        placement,
        main_config,
        main_text,
        certificates,
        kex,
    } = inputs;
    let sibling = sibling_key_owner(ssh_dir)?;
    let mut out = key_files(keys, sibling, &|a| ssh_dir.join(a.private_file_name()), &|a| {
        ssh_dir.join(a.public_file_name())
    })?;
    // sshd loads every HostKey line in order and serves the first key of
    // each type, and clients refuse a host key update that lists a key
    // twice. So during an overlap the next keys come after all other
    // HostKey lines: in a block near the end of the main config when such
    // lines exist, or, when sshd uses its default list, in the managed
    // settings after the current keys listed explicitly.
    let mut listed = Vec::new();
    let mut next_block = Vec::new();
    match next {
        Some(next) => {
            out.extend(key_files(next, sibling, &|a| next_private_path(ssh_dir, a), &|a| {
                next_public_path(ssh_dir, a)
            })?);
            let next_paths: Vec<String> = next
                .keys()
                .map(|k| next_private_path(ssh_dir, k.algorithm()).display().to_string())
                .collect();
            if explicit_host_keys {
                next_block = next_paths;
            } else {
                listed.extend(host_keys.iter().cloned());
                listed.extend(next_paths);
            }
        }
        None => out.extend(no_next_files(ssh_dir)),
    }
    out.extend(certificate_files(certificates)?);
    let wanted = sshd_config::Settings {
        algorithms: keys.algorithms(),
        certificates: certificates.served,
        host_keys: listed,
        host_certificates: certificates.lines.clone(),
        version_addendum: next.map(crate::keyset::KeySet::next_marker),
        kex_algorithms: kex.map(str::to_owned),
    };
    let settings = sshd_config::settings(&wanted);
    let mut managed_files = Vec::new();
    match placement {
        Placement::DropIn(p) => {
            managed_files.push((p.clone(), sshd_config::drop_in_content(&wanted)));
            managed_files.push((
                main_config.to_owned(),
                sshd_config::main_config_content(main_text, None, &next_block),
            ));
        }
        Placement::Inline(p) => {
            managed_files.push((
                p.clone(),
                sshd_config::main_config_content(main_text, Some(&settings), &next_block),
            ));
        }
    }
    for (path, content) in managed_files {
        let path = managed(&path)?;
        let current = files::read_current(&path).map_err(io_err("cannot read", &path))?;
        // A config keeps the real file's mode, never group or world write.
        let (mode, owner) = current.map_or((0o644, None), |c| (c.mode & !0o022, Some((c.uid, c.gid))));
        out.push(Desired {
            path,
            content: Some(Zeroizing::new(content.into_bytes())),
            mode,
            owner,
        });
    }
    Ok(out)
}

/// Without an overlap, no next-set file stays.
fn no_next_files(ssh_dir: &Path) -> Vec<Desired> {
    KeyAlgorithm::ALL
        .into_iter()
        .flat_map(|a| [next_private_path(ssh_dir, a), next_public_path(ssh_dir, a)])
        .map(|path| Desired {
            path,
            content: None,
            mode: 0,
            owner: None,
        })
        .collect()
}

/// The certificate files, public (0644), owned as the file there is.
fn certificate_files(certificates: &CertPlan) -> Result<Vec<Desired>, InstallError> {
    let mut out = Vec::new();
    for (path, cert) in &certificates.files {
        let current = files::read_current(path).map_err(io_err("cannot read", path))?;
        out.push(Desired {
            path: path.clone(),
            content: Some(Zeroizing::new(
                format!("{}\n", crate::certificate::certificate_line(cert)).into_bytes(),
            )),
            mode: 0o644,
            owner: current.map(|c| (c.uid, c.gid)),
        });
    }
    Ok(out)
}

/// Whether the file on disk already is as desired. Keys are compared as
/// keys (a private key file in another encoding of the same key is fine).
pub(super) fn is_converged(want: &Desired) -> Result<bool, InstallError> {
    let current = files::read_current(&want.path).map_err(io_err("cannot read", &want.path))?;
    let (Some(current), Some(content)) = (current, &want.content) else {
        // Converged when both are absent.
        return Ok(want.content.is_none() && !want.path.exists());
    };
    let private = content.starts_with(b"-----BEGIN OPENSSH PRIVATE KEY-----");
    if private {
        if current.mode & 0o037 != 0 {
            return Ok(false);
        }
        let (Ok(have), Ok(wanted)) = (std::str::from_utf8(&current.content), std::str::from_utf8(content)) else {
            return Ok(false);
        };
        return Ok(match (HostKey::from_openssh(have), HostKey::from_openssh(wanted)) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        });
    }
    Ok(current.content == *content)
}

/// What the plan phase found: the sets, the files, where to verify.
pub(super) struct Prepared {
    /// The file holding hostkeyctl's sshd settings.
    pub settings_file: PathBuf,
    /// The set to serve.
    pub keys: KeySet,
    /// The next set of an overlap, served as extra keys.
    pub next_keys: Option<KeySet>,
    /// Every file as it must be.
    pub desired: Vec<Desired>,
    /// Where to verify, unless not reloading.
    pub verify_address: Option<HostPort>,
    /// How to reload, resolved.
    pub reload: ReloadMethod,
    /// Whether the pinned algorithms include the certificate ones.
    pub pins_certificates: bool,
    /// The certificates sshd must serve after the reload.
    pub certificates: BTreeMap<ScanAlgorithm, Certificate>,
    /// hostkeyctl's `KexAlgorithms` line, which sshd -T and a handshake
    /// must show after the reload.
    pub kex_line: Option<String>,
    _lock: Lock,
}

/// Reads the set to install (and the next set of an overlap) and checks
/// them against what the caller expects.
async fn fetch_sets(
    options: &InstallOptions,
    store: &impl SecretStore,
    report: &mut InstallReport,
) -> Result<(KeySet, Certificates, Option<KeySet>), InstallError> {
    let version = store.get(&options.secret_id, &options.selector).await?;
    report.secret = Some(version.arn.clone());
    report.version_id = Some(version.version_id.clone());
    let keys = version.document.keys;
    let certificates = version.document.certificates;
    report.certificates = certificates
        .iter()
        .map(|(a, c)| {
            let row = super::report::CertificateRow {
                serial: c.serial(),
                valid_before: crate::certificate::rfc3339(c.valid_before()),
            };
            (a.key_type().to_owned(), row)
        })
        .collect();
    report.fingerprints = keys
        .keys()
        .map(|k| (k.algorithm().key_type().to_owned(), k.fingerprint().clone()))
        .collect();
    check_expect(&options.expect, &keys)?;
    let next_version = match (&options.next, options.from_stages) {
        // No version named: the next set is what the stages announce.
        (_, true) => crate::store::announced_next(store, &options.secret_id, &version.version_id).await?,
        (Some(next), false) => {
            let v = store
                .get(&options.secret_id, &VersionSelector::VersionId(next.version_id.clone()))
                .await?;
            check_expect(&next.expect, &v.document.keys)?;
            Some(v)
        }
        (None, false) => None,
    };
    let next_keys = match next_version {
        None => None,
        Some(version) => {
            report.next_version_id = Some(version.version_id.clone());
            report.next_fingerprints = version
                .document
                .keys
                .keys()
                .map(|k| (k.algorithm().key_type().to_owned(), k.fingerprint().clone()))
                .collect();
            if version.document.keys.algorithms() != keys.algorithms() {
                let names = |s: &KeySet| {
                    s.algorithms()
                        .iter()
                        .map(|a| a.key_type())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                return Err(InstallError::NextAlgorithms {
                    current: names(&keys),
                    next: names(&version.document.keys),
                });
            }
            Some(version.document.keys)
        }
    };
    Ok((keys, certificates, next_keys))
}

/// sshd's own HostKey files, in its order, without the next set's.
fn own_host_keys(sshd: &impl SshdControl, ssh_dir: &Path) -> Result<Vec<String>, InstallError> {
    let mut seen = Vec::new();
    for path in sshd.effective()?.host_keys {
        let ours = KeyAlgorithm::ALL
            .iter()
            .any(|a| Path::new(&path) == next_private_path(ssh_dir, *a));
        if !ours && !seen.contains(&path) {
            seen.push(path);
        }
    }
    Ok(seen)
}

/// The main config without our blocks, and every drop-in but ours.
fn config_texts(ssh_dir: &Path, main_text: &str) -> Vec<String> {
    let mut texts = vec![sshd_config::strip_blocks(main_text)];
    if let Ok(entries) = std::fs::read_dir(ssh_dir.join("sshd_config.d")) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".conf") && name != sshd_config::DROP_IN_NAME {
                texts.push(std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
    }
    texts
}

/// The plan phase: what the files must be, under the lock.
pub(super) async fn prepare(
    options: &InstallOptions,
    store: &impl SecretStore,
    sshd: &impl SshdControl,
    report: &mut InstallReport,
) -> Result<Prepared, InstallError> {
    if !options.ssh_dir.is_dir() {
        return Err(InstallError::NoSshDir(options.ssh_dir.clone()));
    }
    // The lock first, then the secret: an install queued behind another
    // must apply what the secret says once it holds the lock, never what
    // it said before it waited (a rotation may have finished meanwhile).
    let lock = lock(&options.lock_file, options.lock_timeout).await?;
    let (keys, certificates, next_keys) = fetch_sets(options, store, report).await?;
    // How to reload is settled before anything is written: an install
    // that could not reload (or would signal the wrong process) never starts.
    let reload = sshd.resolve_reload(&options.reload)?;
    for dir in [options.ssh_dir.clone(), options.ssh_dir.join("sshd_config.d")] {
        let removed = files::remove_leftovers(&dir).map_err(io_err("cannot clean up", &dir))?;
        for path in removed {
            tracing::info!("removed {} left by an interrupted install", path.display());
        }
    }
    let main_config = sshd.config();
    let main_text = std::fs::read_to_string(main_config).map_err(io_err("cannot read", main_config))?;
    sshd_config::check_blocks(&main_text).map_err(|source| InstallError::DamagedBlock {
        path: main_config.to_owned(),
        source,
    })?;
    let placement = sshd_config::placement(&options.ssh_dir, main_config, &main_text);
    if let Placement::DropIn(path) = &placement
        && let Some(parent) = path.parent()
    {
        crate::fsutil::create_dir_all(parent, 0o755).map_err(io_err("cannot create", parent))?;
    }
    // During an overlap, list sshd's own host keys explicitly, first, so
    // they stay the ones served; the next set's keys follow.
    let host_keys = if next_keys.is_some() {
        own_host_keys(sshd, &options.ssh_dir)?
    } else {
        Vec::new()
    };
    let texts = config_texts(&options.ssh_dir, &main_text);
    let explicit = sshd_config::has_host_key_lines(&texts);
    // Certificates sshd already serves that are not ours: the admin
    // chooses to refuse, replace or keep them (docs/certificates.md).
    let own_settings = match &placement {
        Placement::DropIn(p) => std::fs::read_to_string(p).unwrap_or_default(),
        Placement::Inline(_) => sshd_config::block_text(&main_text),
    };
    let foreign = foreign_certificates(sshd, &texts, &own_settings);
    let cert_plan = plan_certificates(options, &keys, &certificates, &foreign)?;
    report.certificates_left_out.clone_from(&cert_plan.left_out);
    let scratch = options.state_dir.join("kex-trial");
    let kex = super::kex::plan_for(sshd, &options.ssh_dir, &placement, &main_text, &scratch);
    report.kex = Some(kex.report.clone());
    let desired = desired_files(FileInputs {
        keys: &keys,
        next: next_keys.as_ref(),
        host_keys: &host_keys,
        explicit_host_keys: explicit,
        ssh_dir: &options.ssh_dir,
        placement: &placement,
        main_config,
        main_text: &main_text,
        certificates: &cert_plan,
        kex: kex.line.as_deref(),
    })?;
    let verify_address = match (&options.reload, &options.verify_address) {
        (ReloadMethod::None, _) => None,
        (_, Some(a)) => Some(a.clone()),
        (_, None) => {
            let effective = sshd.effective()?;
            let address = effective.verify_address();
            Some(address.ok_or(InstallError::NoVerifyAddress(effective.listen))?)
        }
    };
    Ok(Prepared {
        settings_file: placement.path().to_owned(),
        keys,
        next_keys,
        desired,
        verify_address,
        reload,
        pins_certificates: cert_plan.served,
        kex_line: kex.line,
        certificates: cert_plan.expected,
        _lock: lock,
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::desired_files;
    use crate::install::sshd_config::Placement;
    use crate::keyset::{KeyAlgorithm, KeySet};

    /// RHEL keeps host keys root:ssh_keys 0640; a missing key must be
    /// created the same way (Debian's sshd refuses such files, so this is
    /// checked here rather than on the bed's sshd).
    #[test]
    fn new_key_files_follow_an_existing_private_keys_group_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let rsa = dir.path().join("ssh_host_rsa_key");
        std::fs::write(&rsa, b"x").unwrap();
        std::fs::set_permissions(&rsa, std::fs::Permissions::from_mode(0o640)).unwrap();
        let gid = 1;
        std::os::unix::fs::chown(&rsa, None, Some(gid)).unwrap();
        let keys = KeySet::generate(&[KeyAlgorithm::Ed25519], 3072).unwrap();
        let main = dir.path().join("sshd_config");
        let desired = desired_files(super::FileInputs {
            keys: &keys,
            next: None,
            host_keys: &[],
            explicit_host_keys: false,
            ssh_dir: dir.path(),
            placement: &Placement::Inline(main.clone()),
            main_config: &main,
            main_text: "",
            certificates: &super::CertPlan::default(),
            kex: None,
        })
        .unwrap();
        let ed = desired
            .iter()
            .find(|d| d.path.ends_with("ssh_host_ed25519_key"))
            .unwrap();
        assert_eq!(ed.mode, 0o640);
        assert_eq!(ed.owner.map(|(_, g)| g), Some(gid));
        let public = desired
            .iter()
            .find(|d| d.path.ends_with("ssh_host_ed25519_key.pub"))
            .unwrap();
        assert_eq!(public.mode, 0o644);
    }
}
