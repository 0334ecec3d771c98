//! sshd control on the node: config test, effective settings, reload.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::hostport::HostPort;

/// How to make sshd pick up new host keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReloadMethod {
    /// A shell command line, run with `sh -c`.
    Command(String),
    /// Find out: the systemd `ssh`/`sshd` service if active, else the
    /// `ssh`/`sshd` socket if active (socket activation), else HUP the pid
    /// from sshd's PidFile.
    Auto,
    /// Do not reload (and so do not verify what is served).
    None,
    /// Resolved from `Auto`: `systemctl reload UNIT`.
    Systemd(String),
    /// Resolved from `Auto`: SIGHUP to this sshd pid, checked in /proc.
    Pid(u32),
    /// Resolved from `Auto`: socket activation (Ubuntu 22.10 and later,
    /// `sshd.socket` elsewhere). `systemctl reload SERVICE` if the service
    /// runs by the time of the reload; otherwise nothing, since `SOCKET`
    /// starts it at the next connection, reading the files then on disk.
    SocketActivated {
        /// The service the socket starts, e.g. `ssh.service`.
        service: String,
        /// The socket unit, e.g. `ssh.socket`.
        socket: String,
    },
}

/// sshd failures.
#[derive(Debug, thiserror::Error)]
pub enum SshdError {
    /// The sshd binary cannot be run.
    #[error("cannot run {}: {source}; pass --sshd PATH (or HOSTKEYCTL_SSHD)", binary.display())]
    Spawn {
        /// The binary.
        binary: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `sshd -t` or `sshd -T` refused the configuration.
    #[error("`{command}` refused the configuration: {stderr}")]
    ConfigTest {
        /// The command.
        command: String,
        /// sshd's complaint.
        stderr: String,
    },
    /// The reload command failed.
    #[error("reloading sshd with `{command}` failed ({status}): {stderr}")]
    Reload {
        /// What ran.
        command: String,
        /// Its exit status.
        status: String,
        /// Its stderr.
        stderr: String,
    },
    /// The pid file does not name a running sshd.
    #[error(
        "will not signal the pid in {pid_file}: {why}; nothing was written. Pass --reload-command CMD, or fix sshd's PidFile"
    )]
    BadPid {
        /// The pid file.
        pid_file: String,
        /// Why.
        why: String,
    },
}

/// What install needs of the node's sshd. The real one is [`Sshd`]
/// (the binary, systemd, signals); tests use doubles (feature `testing`).
pub trait SshdControl: Sync {
    /// The main configuration file.
    fn config(&self) -> &Path;
    /// `sshd -t`: the configuration and keys load.
    fn test(&self) -> Result<(), SshdError>;
    /// `sshd -T`: the effective settings hostkeyctl cares about.
    fn effective(&self) -> Result<Effective, SshdError>;
    /// Makes sshd pick up the files on disk. Returns what was done.
    fn reload(&self, method: &ReloadMethod) -> Result<String, SshdError>;
    /// Turns `Auto` into the concrete way to reload, before anything is
    /// written, so an install that could not reload never starts.
    fn resolve_reload(&self, method: &ReloadMethod) -> Result<ReloadMethod, SshdError> {
        Ok(method.clone())
    }
    /// The sshd binary, when this is a real sshd (a login node's cluster
    /// listener runs another of it).
    fn binary(&self) -> Option<&Path> {
        None
    }
    /// `sshd -T -f CONFIG`: the settings of another configuration (a
    /// trial copy); an error where it cannot be asked.
    fn effective_of(&self, config: &Path) -> Result<Effective, SshdError> {
        Err(SshdError::ConfigTest {
            command: format!("sshd -T -f {}", config.display()),
            stderr: "not asked of this sshd".to_owned(),
        })
    }
    /// The post-quantum exchanges sshd accepts and its release;
    /// `None` when it cannot say.
    fn kex_support(&self) -> Option<KexSupport> {
        None
    }
}

impl SshdControl for Sshd {
    fn config(&self) -> &Path {
        &self.config
    }

    fn test(&self) -> Result<(), SshdError> {
        Sshd::test(self)
    }

    fn effective(&self) -> Result<Effective, SshdError> {
        Sshd::effective(self)
    }

    fn reload(&self, method: &ReloadMethod) -> Result<String, SshdError> {
        Sshd::reload(self, method)
    }

    fn resolve_reload(&self, method: &ReloadMethod) -> Result<ReloadMethod, SshdError> {
        Sshd::resolve_reload(self, method)
    }

    fn binary(&self) -> Option<&Path> {
        Some(&self.binary)
    }

    fn effective_of(&self, config: &Path) -> Result<Effective, SshdError> {
        let other = Sshd {
            binary: self.binary.clone(),
            config: config.to_owned(),
        };
        Ok(Effective::parse(&other.run("-T")?))
    }

    fn kex_support(&self) -> Option<KexSupport> {
        // sshd has no `-Q`: each post-quantum name is tried with `sshd -t
        // -o KexAlgorithms=NAME`, which refuses a name this sshd does not
        // know ("Bad SSH2 KexAlgorithms"), once the config passes alone.
        let test = |extra: &[&str]| {
            Command::new(&self.binary)
                .arg("-t")
                .args(extra)
                .arg("-f")
                .arg(&self.config)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !test(&[]) {
            return None;
        }
        let supported = crate::scan::warnings::POST_QUANTUM_KEX
            .iter()
            .filter(|k| test(&["-o", &format!("KexAlgorithms={k}")]))
            .map(|k| (*k).to_owned())
            .collect();
        // `-V` prints the release (9.x and later); older ones print it in
        // their usage text, on stderr too.
        let version = Command::new(&self.binary).arg("-V").output().ok()?;
        let release = String::from_utf8_lossy(&version.stderr);
        Some(KexSupport {
            supported,
            release: release
                .lines()
                .find(|l| l.starts_with("OpenSSH"))
                .unwrap_or_default()
                .to_owned(),
        })
    }
}

/// The pid in sshd's pid file, if it names a running sshd: above 1 (0 and
/// negative pids signal process groups, 1 is init) and, per
/// `/proc/PID/comm`, an `sshd`. A stale pid reused by another process is
/// refused rather than signalled.
pub fn sshd_pid(pid_file: &Path, proc_root: &Path) -> Result<u32, SshdError> {
    let refuse = |why: String| SshdError::BadPid {
        pid_file: pid_file.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(pid_file).map_err(|e| refuse(format!("cannot read it ({e})")))?;
    let pid: u32 = text.trim().parse().map_err(|_| {
        refuse(format!(
            "it holds {}, not a pid",
            crate::escape::quoted_prefix(text.trim(), 20)
        ))
    })?;
    if pid <= 1 {
        return Err(refuse(format!("it holds pid {pid}, which no sshd can have")));
    }
    let comm = std::fs::read_to_string(proc_root.join(pid.to_string()).join("comm"))
        .map_err(|_| refuse(format!("pid {pid} is not running (a stale pid file)")))?;
    let comm = comm.trim();
    if comm != "sshd" {
        return Err(refuse(format!(
            "pid {pid} is {}, not sshd (a stale pid file)",
            crate::escape::quoted_prefix(comm, 20)
        )));
    }
    Ok(pid)
}

/// The node's sshd: its binary and main config file.
#[derive(Clone, Debug)]
pub struct Sshd {
    /// The sshd binary.
    pub binary: PathBuf,
    /// The main configuration file.
    pub config: PathBuf,
}

/// The post-quantum exchanges sshd accepts (`sshd -t -o
/// KexAlgorithms=NAME` for each) and its release (the line `sshd -V`
/// prints).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KexSupport {
    /// The exchanges it accepts (the post-quantum ones are asked).
    pub supported: Vec<String>,
    /// `OpenSSH_8.4p1 Debian-5+deb11u3, OpenSSL ...`.
    pub release: String,
}

/// Settings read from `sshd -T`.
#[derive(Clone, Debug, Default)]
pub struct Effective {
    /// `hostkey` paths, in order.
    pub host_keys: Vec<String>,
    /// `hostkeyalgorithms`.
    pub host_key_algorithms: Option<String>,
    /// `listenaddress` values.
    pub listen: Vec<String>,
    /// `pidfile`.
    pub pid_file: Option<String>,
    /// `hostcertificate` paths.
    pub host_certificates: Vec<String>,
    /// `versionaddendum` (`none` when unset).
    pub version_addendum: Option<String>,
    /// `kexalgorithms`.
    pub kex_algorithms: Option<String>,
}

impl Effective {
    /// The settings hostkeyctl cares about, from `sshd -T`'s output
    /// (`keyword value` lines; anything else is skipped).
    pub fn parse(text: &str) -> Self {
        let mut e = Effective::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once(' ') else {
                continue;
            };
            match key {
                "hostkey" => e.host_keys.push(value.to_owned()),
                "hostkeyalgorithms" => e.host_key_algorithms = Some(value.to_owned()),
                "listenaddress" => e.listen.push(value.to_owned()),
                "pidfile" => e.pid_file = Some(value.to_owned()),
                "hostcertificate" => e.host_certificates.push(value.to_owned()),
                "versionaddendum" => e.version_addendum = Some(value.to_owned()),
                "kexalgorithms" => e.kex_algorithms = Some(value.to_owned()),
                _ => {}
            }
        }
        e
    }

    /// The address to verify against: the first listen address this host
    /// can reach, a wildcard replaced by the loopback address of its family.
    /// sshd lists `[::]:22` before `0.0.0.0:22`, and on a host with IPv6
    /// off (`ipv6.disable=1`, or no `::1`) nothing answers on `[::1]:22`.
    pub fn verify_address(&self) -> Option<HostPort> {
        self.verify_address_with(is_local_address)
    }

    /// [`Effective::verify_address`] with the test for "this host has
    /// that address" given.
    pub fn verify_address_with(&self, is_local: impl Fn(IpAddr) -> bool) -> Option<HostPort> {
        self.listen.iter().find_map(|listen| {
            // `sshd -T` may follow the address with ` rdomain NAME`.
            let parsed = HostPort::parse(listen.split_whitespace().next()?).ok()?;
            let host = match parsed.host() {
                "0.0.0.0" => "127.0.0.1",
                "::" => "::1",
                other => other,
            };
            match host.parse::<IpAddr>() {
                Ok(ip) if !is_local(ip) => None,
                _ => Some(HostPort::new(host, parsed.port())),
            }
        })
    }
}

/// Whether this host has `ip` (a socket can be bound to it). False for
/// `::1` when IPv6 is disabled, and for a ListenAddress sshd could not
/// bind either.
pub fn is_local_address(ip: IpAddr) -> bool {
    std::net::TcpListener::bind((ip, 0)).is_ok()
}

impl Sshd {
    fn run(&self, flag: &str) -> Result<String, SshdError> {
        let out = Command::new(&self.binary)
            .arg(flag)
            .arg("-f")
            .arg(&self.config)
            .output()
            .map_err(|source| SshdError::Spawn {
                binary: self.binary.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(SshdError::ConfigTest {
                command: format!("{} {flag} -f {}", self.binary.display(), self.config.display()),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `sshd -t`: the configuration and keys load.
    pub fn test(&self) -> Result<(), SshdError> {
        self.run("-t").map(|_| ())
    }

    /// `sshd -T`: the effective settings hostkeyctl cares about.
    pub fn effective(&self) -> Result<Effective, SshdError> {
        Ok(Effective::parse(&self.run("-T")?))
    }

    /// `sshd -T`'s whole output.
    pub fn dump(&self) -> Result<String, SshdError> {
        self.run("-T")
    }

    /// Reloads sshd. Returns what was done, for the report.
    pub fn reload(&self, method: &ReloadMethod) -> Result<String, SshdError> {
        match method {
            ReloadMethod::None => Ok("not reloaded (--no-reload)".to_owned()),
            ReloadMethod::Command(cmd) => run_shell(cmd).map(|_| cmd.clone()),
            ReloadMethod::Systemd(unit) => systemctl_reload(unit),
            ReloadMethod::SocketActivated { service, socket } => {
                // Checked now, after the files were written: a service
                // started since the plan read the old files.
                if unit_active(service) {
                    systemctl_reload(service)
                } else {
                    Ok(format!(
                        "none needed: {service} is not running, and {socket} starts it with the new files at the next connection"
                    ))
                }
            }
            ReloadMethod::Pid(pid) => {
                // Checked again right before the signal: the pid may have
                // gone since the plan.
                let (pid_file, proc_root) = (self.pid_file(), Path::new("/proc"));
                let current = sshd_pid(&pid_file, proc_root)?;
                if current != *pid {
                    return Err(SshdError::BadPid {
                        pid_file: pid_file.display().to_string(),
                        why: format!("it changed from {pid} to {current} during the install"),
                    });
                }
                let out = Command::new("kill")
                    .args(["-HUP", &pid.to_string()])
                    .output()
                    .map_err(|source| SshdError::Spawn {
                        binary: Path::new("kill").to_owned(),
                        source,
                    })?;
                check_status(&format!("kill -HUP {pid}"), &out)
            }
            ReloadMethod::Auto => {
                let resolved = self.resolve_reload(method)?;
                self.reload(&resolved)
            }
        }
    }

    /// sshd's pid file, from `sshd -T` (default `/run/sshd.pid`).
    fn pid_file(&self) -> PathBuf {
        self.effective()
            .ok()
            .and_then(|e| e.pid_file)
            .map_or_else(|| PathBuf::from("/run/sshd.pid"), PathBuf::from)
    }

    /// `Auto` as the active systemd `ssh`/`sshd` unit, else sshd's pid.
    pub fn resolve_reload(&self, method: &ReloadMethod) -> Result<ReloadMethod, SshdError> {
        if *method != ReloadMethod::Auto {
            return Ok(method.clone());
        }
        for unit in ["ssh", "sshd"] {
            if unit_active(&format!("{unit}.service")) {
                return Ok(ReloadMethod::Systemd(unit.to_owned()));
            }
        }
        for unit in ["ssh", "sshd"] {
            let socket = format!("{unit}.socket");
            if unit_active(&socket) {
                return Ok(ReloadMethod::SocketActivated {
                    service: format!("{unit}.service"),
                    socket,
                });
            }
        }
        sshd_pid(&self.pid_file(), Path::new("/proc")).map(ReloadMethod::Pid)
    }
}

/// `systemctl is-active --quiet UNIT` (false when systemctl is missing,
/// or cannot talk to systemd: a container or chroot with systemctl but
/// no systemd, where its complaint on stderr is only noise).
fn unit_active(unit: &str) -> bool {
    Command::new("systemctl")
        .args(["is-active", "--quiet", unit])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn systemctl_reload(unit: &str) -> Result<String, SshdError> {
    let out = Command::new("systemctl")
        .args(["reload", unit])
        .output()
        .map_err(|source| SshdError::Spawn {
            binary: Path::new("systemctl").to_owned(),
            source,
        })?;
    check_status(&format!("systemctl reload {unit}"), &out)
}

fn check_status(what: &str, out: &std::process::Output) -> Result<String, SshdError> {
    if out.status.success() {
        Ok(what.to_owned())
    } else {
        Err(SshdError::Reload {
            command: what.to_owned(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

fn run_shell(cmd: &str) -> Result<(), SshdError> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .map_err(|source| SshdError::Spawn {
            binary: Path::new("sh").to_owned(),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(SshdError::Reload {
            command: cmd.to_owned(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{Effective, sshd_pid};

    #[test]
    fn sshd_t_output_names_host_certificates() {
        let e = Effective::parse(
            "port 22\nhostkey /etc/ssh/ssh_host_ed25519_key\nhostcertificate /etc/ssh/ssh_host_ed25519_key-cert.pub\n",
        );
        assert_eq!(e.host_certificates, ["/etc/ssh/ssh_host_ed25519_key-cert.pub"]);
        assert!(Effective::parse("port 22\n").host_certificates.is_empty());
    }

    /// Regression (issue 12): with IPv6 off, sshd -T still lists `[::]:22`
    /// first, and install verified against `[::1]:22`, failed and rolled
    /// back on every run. The verify address is the first one this host has.
    #[test]
    fn the_verify_address_is_one_this_host_has() {
        let stock = Effective::parse("listenaddress [::]:22\nlistenaddress 0.0.0.0:22\n");
        let no_ipv6 = |ip: std::net::IpAddr| ip.is_ipv4();
        assert_eq!(stock.verify_address_with(no_ipv6).unwrap().to_string(), "127.0.0.1:22");
        assert_eq!(stock.verify_address_with(|_| true).unwrap().to_string(), "[::1]:22");
        let port = Effective::parse("listenaddress [::]:2222\nlistenaddress 0.0.0.0:2222\n");
        assert_eq!(port.verify_address_with(no_ipv6).unwrap().to_string(), "127.0.0.1:2222");
        // A specific address this host does not have (sshd could not bind
        // it either) is skipped; none left is no address.
        let one = Effective::parse("listenaddress 10.9.8.7:22 rdomain x\nlistenaddress 127.0.0.5:2200\n");
        let only_loopback = |ip: std::net::IpAddr| ip.is_loopback();
        assert_eq!(
            one.verify_address_with(only_loopback).unwrap().to_string(),
            "127.0.0.5:2200"
        );
        assert_eq!(one.verify_address_with(|_| false), None);
        assert_eq!(Effective::parse("port 22\n").verify_address_with(|_| true), None);
        // The real test: 127.0.0.1 is always this host's, 192.0.2.1 never is.
        assert!(super::is_local_address("127.0.0.1".parse().unwrap()));
        assert!(!super::is_local_address("192.0.2.1".parse().unwrap()));
    }

    /// Regression (hardening finding 4): a pid file holding 0 made the
    /// reload signal hostkeyctl's own process group, and a stale pid an
    /// unrelated process.
    #[test]
    fn only_a_running_sshd_pid_is_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("sshd.pid");
        let refused = |text: &str| {
            std::fs::write(&pid_file, text).unwrap();
            sshd_pid(&pid_file, Path::new("/proc")).unwrap_err().to_string()
        };
        assert!(refused("0\n").contains("which no sshd can have"));
        assert!(refused("1").contains("which no sshd can have"));
        assert!(refused("-5").contains("not a pid"));
        assert!(refused("abc").contains("not a pid"));
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        // Until the child has exec'd, its comm is this test's thread name:
        // await the exec (a condition, not a sleep).
        let comm = format!("/proc/{}/comm", sleeper.id());
        while std::fs::read_to_string(&comm).unwrap_or_default().trim() != "sleep" {
            std::thread::yield_now();
        }
        let err = refused(&sleeper.id().to_string());
        assert!(err.contains("is \"sleep\", not sshd"), "{err}");
        assert_eq!(sleeper.try_wait().unwrap(), None, "the unrelated process is untouched");
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(refused("4194304").contains("not running"));
        // A fake /proc where the pid is an sshd.
        let proc_root = dir.path().join("proc");
        std::fs::create_dir_all(proc_root.join("4242")).unwrap();
        std::fs::write(proc_root.join("4242/comm"), "sshd\n").unwrap();
        std::fs::write(&pid_file, "4242\n").unwrap();
        assert_eq!(sshd_pid(&pid_file, &proc_root).unwrap(), 4242);
    }
}
