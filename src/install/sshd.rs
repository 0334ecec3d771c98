//! sshd control on the node: config test, effective settings, reload.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::hostport::HostPort;

/// How to make sshd pick up new host keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReloadMethod {
    /// A shell command line, run with `sh -c`.
    Command(String),
    /// Find out: the systemd `ssh`/`sshd` unit if active, else HUP the pid
    /// from sshd's PidFile.
    Auto,
    /// Do not reload (and so do not verify what is served).
    None,
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
    /// No way to reload was found.
    #[error(
        "cannot tell how to reload sshd (no active ssh/sshd systemd unit, no pid in {pid_file}); pass --reload-command CMD or --no-reload"
    )]
    NoReload {
        /// The pid file looked at.
        pid_file: String,
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
}

/// The node's sshd: its binary and main config file.
#[derive(Clone, Debug)]
pub struct Sshd {
    /// The sshd binary.
    pub binary: PathBuf,
    /// The main configuration file.
    pub config: PathBuf,
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
}

impl Effective {
    /// The address to verify against: the first listen address, with a
    /// wildcard replaced by loopback.
    pub fn verify_address(&self) -> Option<HostPort> {
        let first = HostPort::parse(self.listen.first()?).ok()?;
        let host = match first.host() {
            "0.0.0.0" => "127.0.0.1",
            "::" => "::1",
            other => other,
        };
        Some(HostPort::new(host, first.port()))
    }
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
        let text = self.run("-T")?;
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
                _ => {}
            }
        }
        Ok(e)
    }

    /// Reloads sshd. Returns what was done, for the report.
    pub fn reload(&self, method: &ReloadMethod) -> Result<String, SshdError> {
        match method {
            ReloadMethod::None => Ok("not reloaded (--no-reload)".to_owned()),
            ReloadMethod::Command(cmd) => run_shell(cmd).map(|_| cmd.clone()),
            ReloadMethod::Auto => {
                for unit in ["ssh", "sshd"] {
                    let active = Command::new("systemctl")
                        .args(["is-active", "--quiet", unit])
                        .status()
                        .is_ok_and(|s| s.success());
                    if active {
                        let cmd = format!("systemctl reload {unit}");
                        return run_shell(&cmd).map(|_| cmd);
                    }
                }
                let pid_file = self
                    .effective()
                    .ok()
                    .and_then(|e| e.pid_file)
                    .unwrap_or_else(|| "/run/sshd.pid".to_owned());
                let pid = std::fs::read_to_string(&pid_file)
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok())
                    .ok_or(SshdError::NoReload {
                        pid_file: pid_file.clone(),
                    })?;
                let cmd = format!("kill -HUP {pid}");
                run_shell(&cmd).map(|_| cmd)
            }
        }
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
