//! Running a login node's listener for the cluster ([`super::listener`]):
//! its systemd unit, or sshd started and signalled directly; stopping it
//! when it must not serve.

use std::path::Path;

use super::listener::{Listener, Service, UNIT, write};
use super::request::NodeError;
use crate::install::sshd::{Sshd, sshd_pid};

impl Listener {
    /// Stops the listener (a configuration that no longer checks must not
    /// keep serving), and says what was done.
    pub(super) fn stop(&self, pid_file: &Path) -> String {
        let done = match &self.service {
            Service::Systemd => {
                let unit = self.dir.join(UNIT);
                let linked = unit.exists();
                let active = std::process::Command::new("systemctl")
                    .args(["is-active", "--quiet", UNIT])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                let stopped = if active {
                    run("systemctl", &["stop", UNIT]).map(|_| ())
                } else {
                    Ok(())
                };
                stopped.and_then(|()| {
                    if linked {
                        run("systemctl", &["disable", UNIT]).map(|_| ())
                    } else {
                        Ok(())
                    }
                })
            }
            Service::Direct => match self.running(pid_file) {
                Some(pid) => run("kill", &[&pid.to_string()]).map(|_| ()),
                None => Ok(()),
            },
        };
        match done {
            Ok(()) => "the listener is stopped until a run succeeds (users behind the load balancer are not affected)"
                .to_owned(),
            Err(e) => format!("the cluster listener could NOT be stopped ({e}): stop it by hand"),
        }
    }

    /// The pid of this listener's sshd: the pid file's sshd, started with
    /// this configuration (a pid reused by a session's sshd is not it).
    fn running(&self, pid_file: &Path) -> Option<u32> {
        let pid = sshd_pid(pid_file, Path::new("/proc")).ok()?;
        // Its arguments, or the title sshd sets over them
        // (`sshd: /usr/sbin/sshd -f CONFIG [listener] ...`).
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let config = self.config().display().to_string();
        String::from_utf8_lossy(&cmdline)
            .replace('\0', " ")
            .contains(&format!(" {config}"))
            .then_some(pid)
    }

    /// Starts the listener, or reloads it when it runs.
    pub(super) fn start(&self, listener: &Sshd, pid_file: &Path, main_unit: Option<&str>) -> Result<String, NodeError> {
        match &self.service {
            Service::Direct => match self.running(pid_file) {
                Some(pid) => run("kill", &["-HUP", &pid.to_string()]),
                None => {
                    // sshd without -D becomes a daemon and writes its pid
                    // file once it listens.
                    let config = listener.config.display().to_string();
                    let log = self.dir.join("sshd.log").display().to_string();
                    // With no environment of enroll's (its AWS credentials).
                    let started = std::process::Command::new(&listener.binary)
                        .args(["-f", &config, "-E", &log])
                        .env_clear()
                        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                        .stdin(std::process::Stdio::null())
                        .output()
                        .map_err(|e| NodeError::Sshd(format!("cannot run {}: {e}", listener.binary.display())))?;
                    if !started.status.success() {
                        return Err(NodeError::Sshd(format!(
                            "the cluster listener did not start ({} -f {config}: {}): {}",
                            listener.binary.display(),
                            started.status,
                            String::from_utf8_lossy(&started.stderr).trim()
                        )));
                    }
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                    while self.running(pid_file).is_none() {
                        if std::time::Instant::now() > deadline {
                            return Err(NodeError::Sshd(format!(
                                "the cluster listener started ({} -f {config}) but wrote no pid to {} within 10 s: {log} says why",
                                listener.binary.display(),
                                pid_file.display()
                            )));
                        }
                        std::thread::sleep(std::time::Duration::from_millis(20));
                    }
                    Ok(format!("started {} -f {config}", listener.binary.display()))
                }
            },
            Service::Systemd => {
                // systemd (PID 1) links and enables it: the timer's
                // sandbox cannot write /etc/systemd/system, and need not.
                let unit = self.dir.join(UNIT);
                let text = unit_text(&listener.binary, &listener.config, pid_file, main_unit);
                let changed = std::fs::read_to_string(&unit).ok().as_deref() != Some(text.as_str());
                if changed {
                    write(&unit, &text, 0o644)?;
                }
                run("systemctl", &["enable", &unit.display().to_string()])?;
                if changed {
                    run("systemctl", &["daemon-reload"])?;
                }
                let done = run("systemctl", &["reload-or-restart", UNIT])?;
                // A start its conditions skip (sshd_not_to_be_run) succeeds
                // with nothing running: not a success here.
                run("systemctl", &["is-active", "--quiet", UNIT]).map_err(|_| {
                    NodeError::Sshd(format!(
                        "{UNIT} is not active after `systemctl reload-or-restart` (a condition such as /etc/ssh/sshd_not_to_be_run, or a failed start): `systemctl status {UNIT}` says why"
                    ))
                })?;
                Ok(done)
            }
        }
    }
}

/// The unit that runs the listener. It is bound to the main sshd's unit
/// (`main_unit`, `ssh.service` say: stopping ssh, or its dying, stops the
/// listener, restarting it restarts the listener, and the listener never
/// starts without it), and makes sshd's
/// privilege separation directory itself rather than share ssh.service's
/// `RuntimeDirectory`, which systemd removes when ssh.service stops.
pub fn unit_text(binary: &Path, config: &Path, pid_file: &Path, main_unit: Option<&str>) -> String {
    let bound = main_unit.map_or_else(String::new, |u| format!("BindsTo={u}\nPartOf={u}\nAfter={u}\n"));
    format!(
        "# hostkeyctl enroll: this login node's sshd for the cluster's own traffic (docs/cluster-trust.md, \"Login nodes\")\n[Unit]\nDescription=OpenSSH server for the cluster (hostkeyctl)\nAfter=network-online.target\nWants=network-online.target\n{bound}ConditionPathExists=!/etc/ssh/sshd_not_to_be_run\n\n[Service]\nExecStartPre=/bin/mkdir -p -m 0755 /run/sshd\nExecStartPre={b} -t -f {c}\nExecStart={b} -D -f {c}\nExecReload=/bin/mkdir -p -m 0755 /run/sshd\nExecReload={b} -t -f {c}\nExecReload=/bin/kill -HUP $MAINPID\nPIDFile={p}\nKillMode=process\nRestart=on-failure\nRestartPreventExitStatus=255\n\n[Install]\nWantedBy=multi-user.target\n",
        b = binary.display(),
        c = config.display(),
        p = pid_file.display()
    )
}

pub(super) fn run(program: &str, args: &[&str]) -> Result<String, NodeError> {
    let what = format!("{program} {}", args.join(" "));
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| NodeError::Sshd(format!("cannot run {program}: {e}")))?;
    if out.status.success() {
        Ok(what)
    } else {
        Err(NodeError::Sshd(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
