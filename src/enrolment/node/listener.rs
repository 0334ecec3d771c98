//! A login node's listener for the cluster (`enroll --login-node
//! --cluster-port PORT`): a second sshd that serves this node's own keys
//! with their certificates on a port the load balancer does not forward,
//! so the cluster reaches the login node strictly, like every other node,
//! while users behind the load balancer keep meeting the canonical set on
//! the main sshd and never see a certificate.
//!
//! Why a second sshd: sshd serves every host key and certificate it holds
//! to every client (no `Match` scopes `HostKey` or `HostCertificate`), and
//! Go's `x/crypto/ssh` refuses an untrusted certificate instead of falling
//! back to the key it knows (docs/design-notes.md, "Login nodes serving
//! the set take the trust alone").
//!
//! Its configuration is the main sshd's, so the same users log in the same
//! way: a copy of the main config and every file it includes, with the
//! settings that say what is served (`HostKey`, `HostCertificate`,
//! `HostKeyAlgorithms`, `HostKeyAgent`), where (`Port`, `ListenAddress`) and
//! its `PidFile` commented out, and this listener's in front. Each enroll
//! writes it again from the main config (so edits there reach it at the
//! next renewal) into a directory named after its content, checks it with
//! `sshd -t` and `sshd -T`, and only then points the listener at it.

use std::path::{Path, PathBuf};

use sha2::Digest;

use super::listener_config::{PLACE, copy_config, same_otherwise};
use super::request::NodeError;
use crate::fsutil::{WriteOptions, write_atomic};
use crate::hostport::HostPort;
use crate::install::sshd::{Effective, Sshd};
use crate::keyset::{HostKey, KeyAlgorithm};

/// The listener's directory under the ssh directory: its keys, their
/// certificates and its configuration.
pub const DIR_NAME: &str = "hostkeyctl-cluster";
/// The systemd unit that runs the listener.
pub const UNIT: &str = "hostkeyctl-cluster-sshd.service";
/// The key types the listener serves (generated once, kept).
const KEY_TYPES: [KeyAlgorithm; 2] = [KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa];
/// How the listener's sshd is run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Service {
    /// A systemd unit ([`UNIT`]), kept in the listener's directory (which
    /// the enroll timer's sandbox may write), linked and enabled with
    /// `systemctl enable PATH`, started or reloaded.
    Systemd,
    /// sshd started as a daemon by enroll, and sent SIGHUP by its pid file
    /// afterwards (hosts without systemd).
    Direct,
}

impl Service {
    /// systemd when it runs this host, else direct.
    pub fn detect() -> Self {
        if Path::new("/run/systemd/system").is_dir() {
            Service::Systemd
        } else {
            Service::Direct
        }
    }
}

/// The listener of a login node.
#[derive(Clone, Debug)]
pub struct Listener {
    /// Its port.
    pub port: u16,
    /// Its directory (`<ssh dir>/hostkeyctl-cluster`).
    pub dir: PathBuf,
    /// How its sshd runs.
    pub service: Service,
}

fn write_err(path: &Path, e: impl std::fmt::Display) -> NodeError {
    NodeError::Write {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

pub(super) fn write(path: &Path, text: &str, mode: u32) -> Result<(), NodeError> {
    let options = WriteOptions {
        mode,
        owner: None,
        overwrite: true,
    };
    write_atomic(path, text.as_bytes(), &options).map_err(|e| write_err(path, e))
}

impl Listener {
    /// Its main configuration file.
    pub fn config(&self) -> PathBuf {
        self.dir.join("sshd_config")
    }

    /// Its host keys, each generated the first time and kept after: the
    /// binding the signer holds for this instance names them.
    pub fn ensure_keys(&self) -> Result<(), NodeError> {
        crate::fsutil::create_dir_all(&self.dir, 0o755).map_err(|e| write_err(&self.dir, e))?;
        for algorithm in KEY_TYPES {
            let path = self.dir.join(algorithm.private_file_name());
            if path.exists() {
                continue;
            }
            let key = HostKey::generate(algorithm, crate::keyset::MIN_RSA_BITS).map_err(|e| NodeError::Key {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            // The public file first: a private key alone is what a later
            // run takes as complete.
            write(
                &self.dir.join(algorithm.public_file_name()),
                &format!("{}\n", key.public_line()),
                0o644,
            )?;
            let options = WriteOptions {
                mode: 0o600,
                owner: None,
                overwrite: false,
            };
            write_atomic(&path, key.reveal_private_openssh().as_bytes(), &options).map_err(|e| write_err(&path, e))?;
        }
        Ok(())
    }

    /// The port is free of the main sshd's listeners (the load balancer
    /// forwards to those).
    pub fn check_port(&self, main: &Effective) -> Result<(), NodeError> {
        let taken = main
            .listen
            .iter()
            .filter_map(|l| HostPort::parse(l.split_whitespace().next()?).ok())
            .any(|hp| hp.port() == self.port);
        if taken {
            return Err(NodeError::Usage(format!(
                "--cluster-port {} is a port the main sshd listens on (sshd -T: {}): the cluster's listener needs a port of its own that the load balancer does not forward",
                self.port,
                main.listen.join(", ")
            )));
        }
        Ok(())
    }

    /// What cannot work, before anything is asked or written: a listener
    /// run directly from inside the enroll timer's service, which systemd
    /// would kill when the run ends.
    pub fn preflight(&self) -> Result<(), NodeError> {
        let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if self.service == Service::Direct && in_enroll_timer(&cgroup) {
            return Err(NodeError::Usage(
                "--listener-service direct inside hostkeyctl-enroll.service: systemd would kill the listener when the run ends; use systemd (or auto)".to_owned(),
            ));
        }
        Ok(())
    }

    /// The certificates a past enrolment left (what the listener serves
    /// until the next one).
    pub fn certificates(&self) -> Vec<PathBuf> {
        KEY_TYPES
            .iter()
            .map(|a| self.dir.join(format!("{}-cert.pub", a.private_file_name())))
            .filter(|p| p.is_file())
            .collect()
    }

    /// Writes the listener's configuration from `main` (the main sshd),
    /// checks it, starts or reloads the listener, and says how.
    /// `main_dump` is the main sshd's `sshd -T`, read once per run;
    /// `certificates` are the files enrolment wrote in [`Listener::dir`].
    /// One enroll at a time (a lock in the directory). A configuration
    /// that fails a check is removed and the listener is stopped: it would
    /// no longer log users in as the main sshd does (fail closed; the
    /// cluster then cannot reach this node, users behind the load
    /// balancer still can).
    pub fn serve(&self, main: &Sshd, main_dump: &str, certificates: &[PathBuf]) -> Result<String, NodeError> {
        let effective = Effective::parse(main_dump);
        let pid_file = self.pid_file(&effective);
        self.check_port(&effective)
            .map_err(|e| self.fail_closed(&e.to_string(), Some(&pid_file)))?;
        // The main sshd runs (and how): the listener never outlives it.
        let main_unit = match main.resolve_reload(&crate::install::sshd::ReloadMethod::Auto) {
            Ok(crate::install::sshd::ReloadMethod::Systemd(unit)) => Some(format!("{unit}.service")),
            Ok(crate::install::sshd::ReloadMethod::SocketActivated { socket, .. }) => Some(socket),
            Ok(_) => None,
            Err(e) => {
                return Err(self.fail_closed(
                    &format!("the main sshd does not run ({e}), and the listener never runs without it"),
                    Some(&pid_file),
                ));
            }
        };
        if let Err(why) = self.write_checked(main, main_dump, &pid_file, certificates) {
            return Err(self.fail_closed(
                &format!(
                    "its configuration, written from {}, does not check: {why}",
                    main.config.display()
                ),
                Some(&pid_file),
            ));
        }
        let listener = Sshd {
            binary: main.binary.clone(),
            config: self.config(),
        };
        let done = self.start(&listener, &pid_file, main_unit.as_deref())?;
        self.prune();
        Ok(done)
    }

    /// The listener stopped (and, under systemd, disabled, so a reboot does
    /// not start it on what failed), and `why` with what was done.
    pub fn fail_closed(&self, why: &str, pid_file: Option<&Path>) -> NodeError {
        let default_pid = self.pid_file(&Effective::default());
        let stopped = self.stop(pid_file.unwrap_or(&default_pid));
        NodeError::Sshd(format!("the cluster listener: {why}; {stopped}"))
    }

    /// Enrolls on one node run one at a time here: a run must never remove
    /// the copy another has just put in use. Held from before the keys are
    /// made until the listener runs.
    pub fn lock(&self) -> Result<std::fs::File, NodeError> {
        crate::fsutil::create_dir_all(&self.dir, 0o755).map_err(|e| write_err(&self.dir, e))?;
        let path = self.dir.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| write_err(&path, e))?;
        file.lock().map_err(|e| write_err(&path, e))?;
        Ok(file)
    }

    /// Writes the configuration in a directory named after its content,
    /// checks it, and puts it in use; or says why not, with nothing of it
    /// left.
    fn write_checked(
        &self,
        main: &Sshd,
        main_dump: &str,
        pid_file: &Path,
        certificates: &[PathBuf],
    ) -> Result<(), String> {
        let effective = &Effective::parse(main_dump);
        let copies = copy_config(&main.config).map_err(|e| e.to_string())?;
        let mut keys = Vec::new();
        for algorithm in KEY_TYPES {
            let public = self.dir.join(algorithm.public_file_name());
            keys.push(std::fs::read_to_string(&public).map_err(|e| format!("{}: {e}", public.display()))?);
        }
        let digest = {
            let mut h = sha2::Sha256::new();
            for key in &keys {
                h.update(key.as_bytes());
            }
            for cert in certificates {
                h.update(cert.display().to_string().as_bytes());
            }
            h.update(effective.listen.join(",").as_bytes());
            h.update(pid_file.display().to_string().as_bytes());
            for (name, text, mode) in &copies {
                h.update(format!("{name}\0{mode}\0{text}\0").as_bytes());
            }
            hex::encode(h.finalize())[..12].to_owned()
        };
        let copy_dir = self.dir.join(format!("config-{digest}"));
        let place = copy_dir.display().to_string();
        if place.contains(['"', '\\']) {
            return Err(format!(
                "{place} has a quote or a backslash, which sshd's Include cannot name"
            ));
        }
        let written = (|| -> Result<String, String> {
            crate::fsutil::create_dir_all(&copy_dir, 0o755).map_err(|e| e.to_string())?;
            // The listener's keys by hard links inside the copy: without it
            // (removed by hand, say) sshd finds no host key and refuses to
            // start, instead of starting with the includes it lost.
            for algorithm in KEY_TYPES {
                let link = copy_dir.join(algorithm.private_file_name());
                if !link.exists() {
                    std::fs::hard_link(self.dir.join(algorithm.private_file_name()), &link)
                        .map_err(|e| format!("{}: {e}", link.display()))?;
                }
            }
            for (name, text, mode) in &copies[1..] {
                write(&copy_dir.join(name), &text.replace(PLACE, &place), *mode).map_err(|e| e.to_string())?;
            }
            let head = self.head(effective, pid_file, &copy_dir, certificates);
            Ok(format!("{head}{}", copies[0].1.replace(PLACE, &place)))
        })();
        let next = self.dir.join(format!("sshd_config.next.{}", std::process::id()));
        let checked = written.and_then(|text| {
            write(&next, &text, copies[0].2).map_err(|e| e.to_string())?;
            let candidate = Sshd {
                binary: main.binary.clone(),
                config: next.clone(),
            };
            candidate.test().map_err(|e| format!("sshd -t: {e}"))?;
            let dump = candidate.dump().map_err(|e| format!("sshd -T: {e}"))?;
            self.serves_only_its_own(&Effective::parse(&dump), &copy_dir, certificates)?;
            same_otherwise(main_dump, &dump)
        });
        if let Err(why) = checked {
            // Kept for the admin to compare (`sshd -T -f` of each); its
            // copies go, so nothing can start it.
            let refused = self.dir.join("sshd_config.refused");
            let _ = std::fs::rename(&next, &refused);
            if !self.in_use(&copy_dir) {
                let _ = std::fs::remove_dir_all(&copy_dir);
            }
            return Err(format!("{why} (what was refused: {})", refused.display()));
        }
        let _ = std::fs::remove_file(self.dir.join("sshd_config.refused"));
        std::fs::rename(&next, self.config()).map_err(|e| format!("{}: {e}", self.config().display()))?;
        Ok(())
    }

    /// Whether the configuration in use names `copy_dir`.
    fn in_use(&self, copy_dir: &Path) -> bool {
        std::fs::read_to_string(self.config()).is_ok_and(|t| t.contains(&copy_dir.display().to_string()))
    }

    /// Next to the main sshd's pid file (`/run/sshd.pid`):
    /// `/run/hostkeyctl-cluster-sshd.pid`.
    fn pid_file(&self, main: &Effective) -> PathBuf {
        let main_pid = main
            .pid_file
            .as_deref()
            .filter(|p| *p != "none")
            .unwrap_or("/run/sshd.pid");
        Path::new(main_pid)
            .parent()
            .unwrap_or(Path::new("/run"))
            .join("hostkeyctl-cluster-sshd.pid")
    }

    /// What the listener's configuration sets before the main config's
    /// copy (sshd keeps the first value of each).
    fn head(&self, main: &Effective, pid_file: &Path, copy_dir: &Path, certificates: &[PathBuf]) -> String {
        let mut out = format!(
            "# hostkeyctl enroll: this login node's listener for the cluster, on port {}.\n# Written from the main sshd's configuration at every enroll: edit that, then enroll again.\nPort {}\n",
            self.port, self.port
        );
        for listen in &main.listen {
            let mut words = listen.split_whitespace();
            let Some(Ok(at)) = words.next().map(HostPort::parse) else {
                continue;
            };
            let rest: Vec<&str> = words.collect();
            let moved = HostPort::new(at.host(), self.port);
            out.push_str(&format!("ListenAddress {moved}{}\n", suffix(&rest)));
        }
        out.push_str(&format!("PidFile {}\nVersionAddendum none\n", pid_file.display()));
        let mut algorithms: Vec<String> = Vec::new();
        let mut plain: Vec<String> = Vec::new();
        for algorithm in KEY_TYPES {
            let key = copy_dir.join(algorithm.private_file_name());
            out.push_str(&format!("HostKey \"{}\"\n", key.display()));
            let name = algorithm.key_type();
            algorithms.push(format!("{name}-cert-v01@openssh.com"));
            plain.push(name.to_owned());
        }
        for cert in certificates {
            out.push_str(&format!("HostCertificate {}\n", cert.display()));
        }
        algorithms.extend(plain);
        out.push_str(&format!("HostKeyAlgorithms {}\n", algorithms.join(",")));
        out
    }

    /// `sshd -T` of the candidate lists this listener's keys and
    /// certificates alone, and only its port.
    fn serves_only_its_own(&self, e: &Effective, copy_dir: &Path, certificates: &[PathBuf]) -> Result<(), String> {
        let keys: Vec<String> = KEY_TYPES
            .iter()
            .map(|a| copy_dir.join(a.private_file_name()).display().to_string())
            .collect();
        if e.host_keys != keys {
            return Err(format!("it would serve the host keys {:?}, not {keys:?}", e.host_keys));
        }
        let certs: Vec<String> = certificates.iter().map(|c| c.display().to_string()).collect();
        if e.host_certificates != certs {
            return Err(format!(
                "it would serve the certificates {:?}, not {certs:?}",
                e.host_certificates
            ));
        }
        let elsewhere: Vec<&String> = e
            .listen
            .iter()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .and_then(|a| HostPort::parse(a).ok())
                    .is_none_or(|hp| hp.port() != self.port)
            })
            .collect();
        if !elsewhere.is_empty() || e.listen.is_empty() {
            return Err(format!(
                "it would listen on {:?}, not port {} alone",
                e.listen, self.port
            ));
        }
        Ok(())
    }

    /// Removes the copies of earlier configurations: every one but the
    /// one in use (read again, under the lock).
    fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let stale_next = name.starts_with("sshd_config.next.");
            if (name.starts_with("config-") && !self.in_use(&path)) || stale_next {
                let _ = if stale_next {
                    std::fs::remove_file(&path)
                } else {
                    std::fs::remove_dir_all(&path)
                };
            }
        }
    }
}

/// Whether `/proc/self/cgroup` (`cgroup`) is the shipped timer's service:
/// a unit whose processes systemd kills when its run ends.
fn in_enroll_timer(cgroup: &str) -> bool {
    cgroup
        .lines()
        .filter_map(|l| l.rsplit('/').next())
        .any(|unit| unit == "hostkeyctl-enroll.service")
}

/// ` rdomain NAME` and the like, after a listen address.
fn suffix(rest: &[&str]) -> String {
    if rest.is_empty() {
        String::new()
    } else {
        format!(" {}", rest.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::{Listener, Service};
    use crate::install::sshd::Effective;

    #[test]
    fn a_direct_listener_is_refused_inside_the_enroll_timers_service_alone() {
        let direct = Listener {
            port: 2222,
            dir: "/etc/ssh/hostkeyctl-cluster".into(),
            service: Service::Direct,
        };
        assert!(super::in_enroll_timer("0::/system.slice/hostkeyctl-enroll.service\n"));
        assert!(!super::in_enroll_timer("0::/system.slice/actions.runner.x.service\n"));
        assert!(!super::in_enroll_timer("0::/user.slice/user-0.slice/session-1.scope\n"));
        // This test's own process is no timer's: allowed.
        assert!(direct.preflight().is_ok());
    }

    #[test]
    fn the_head_moves_every_listen_address_to_the_port_and_serves_its_own_keys() {
        let listener = Listener {
            port: 2222,
            dir: "/etc/ssh/hostkeyctl-cluster".into(),
            service: Service::Direct,
        };
        let main = Effective::parse(
            "listenaddress [::]:22\nlistenaddress 0.0.0.0:22\nlistenaddress 10.0.0.5:22 rdomain blue\npidfile /run/sshd.pid\n",
        );
        let head = listener.head(
            &main,
            &listener.pid_file(&main),
            std::path::Path::new("/etc/ssh/hostkeyctl-cluster/config-x"),
            &["/etc/ssh/hostkeyctl-cluster/ssh_host_ed25519_key-cert.pub".into()],
        );
        for line in [
            "ListenAddress [::]:2222\n",
            "ListenAddress 0.0.0.0:2222\n",
            "ListenAddress 10.0.0.5:2222 rdomain blue\n",
            "PidFile /run/hostkeyctl-cluster-sshd.pid\n",
            "HostKey \"/etc/ssh/hostkeyctl-cluster/config-x/ssh_host_ed25519_key\"\n",
            "HostCertificate /etc/ssh/hostkeyctl-cluster/ssh_host_ed25519_key-cert.pub\n",
            "HostKeyAlgorithms ssh-ed25519-cert-v01@openssh.com,ecdsa-sha2-nistp256-cert-v01@openssh.com,ssh-ed25519,ecdsa-sha2-nistp256\n",
        ] {
            assert!(head.contains(line), "{line}: {head}");
        }
        assert!(listener.check_port(&main).is_ok());
        let on_22 = Listener { port: 22, ..listener };
        assert!(
            on_22
                .check_port(&main)
                .unwrap_err()
                .to_string()
                .contains("the main sshd listens on")
        );
    }
}
