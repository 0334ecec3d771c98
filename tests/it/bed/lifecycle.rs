//! A HyperPod lifecycle scripts folder as a node gets it, for the step's
//! bed tests (bootstrap, enrolment_step): the step, its units, the node
//! build and the configs, every file 0644 as S3 keeps them, a scratch root
//! and recording stand-ins for systemctl and aws.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::bed::netfilter::NodeNetfilter;
use crate::common::bed::{Node, SECRET, TestBed};

pub(crate) fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/hyperpod")
}

/// A lifecycle scripts folder as the bucket gives it to a node (every file
/// 0644), a scratch root and recording stand-ins for systemctl and aws.
pub(crate) struct Lifecycle {
    pub(crate) dir: tempfile::TempDir,
    settings: BTreeMap<String, String>,
    /// The node's netfilter, where the step keeps the metadata service to
    /// root.
    pub(crate) netfilter: NodeNetfilter,
}

impl Lifecycle {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let step = dir.path().join("hostkeyctl");
        std::fs::create_dir_all(&step).unwrap();
        let name = format!("hostkeyctl-{}", std::env::consts::ARCH);
        let files = [
            (
                root.join("contrib/hyperpod/install_hostkeyctl.sh"),
                step.join("install_hostkeyctl.sh"),
            ),
            (
                root.join("contrib/systemd/hostkeyctl-install.service"),
                step.join("hostkeyctl-install.service"),
            ),
            (
                root.join("contrib/systemd/hostkeyctl-install.timer"),
                step.join("hostkeyctl-install.timer"),
            ),
            (
                root.join("contrib/systemd/hostkeyctl-imds-guard.service"),
                step.join("hostkeyctl-imds-guard.service"),
            ),
            (
                root.join("contrib/systemd/hostkeyctl-enroll.service"),
                step.join("hostkeyctl-enroll.service"),
            ),
            (
                root.join("contrib/systemd/hostkeyctl-enroll.timer"),
                step.join("hostkeyctl-enroll.timer"),
            ),
            (crate::common::support::node_binary(), step.join(&name)),
            (
                fixtures().join("provisioning_parameters.json"),
                dir.path().join("provisioning_parameters.json"),
            ),
            (
                fixtures().join("resource_config.json"),
                dir.path().join("resource_config.json"),
            ),
        ];
        for (from, to) in &files {
            std::fs::copy(from, to).unwrap();
            // S3 keeps no modes: every file arrives 0644.
            std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        let sum = crate::common::support::run_ok(Command::new("sha256sum").arg(&name).current_dir(&step));
        let sum = sum.split_whitespace().next().unwrap().to_owned();
        // A SHA256SUMS beside the binary is not trusted: it agrees with
        // whatever binary is there.
        std::fs::write(step.join("SHA256SUMS"), format!("{sum}  {name}\n")).unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let log = dir.path().join("calls.log");
        for tool in ["systemctl", "aws"] {
            // aws: a download the node role may not make.
            let body = if tool == "aws" {
                "echo 'download failed: An error occurred (AccessDenied) when calling the GetObject operation' >&2; exit 1\n"
            } else {
                ""
            };
            std::fs::write(
                bin.join(tool),
                format!("#!/bin/sh\necho \"{tool} $*\" >> {}\n{body}", log.display()),
            )
            .unwrap();
            std::fs::set_permissions(bin.join(tool), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let mut settings = BTreeMap::new();
        for (k, v) in [
            ("HOSTKEYCTL_SECRET_ID", SECRET.to_owned()),
            (
                &*format!("HOSTKEYCTL_SHA256_{}", std::env::consts::ARCH.to_uppercase()),
                sum,
            ),
            ("HOSTKEYCTL_ROOT", dir.path().join("root").display().to_string()),
            // Where /opt/ml/config/resource_config.json is on a node.
            (
                "HOSTKEYCTL_RESOURCE_CONFIG",
                dir.path().join("resource_config.json").display().to_string(),
            ),
            ("HOSTKEYCTL_RETRY_SECONDS", "0".to_owned()),
            ("HOSTKEYCTL_FIND_RETRY_SECONDS", "0".to_owned()),
        ] {
            settings.insert(k.to_owned(), v);
        }
        let netfilter = NodeNetfilter::new(&bin);
        Lifecycle {
            dir,
            settings,
            netfilter,
        }
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub(crate) fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// Sets (or with `None` removes) a line of hostkeyctl.env.
    pub(crate) fn set(&mut self, key: &str, value: Option<&str>) {
        match value {
            Some(v) => self.settings.insert(key.to_owned(), v.to_owned()),
            None => self.settings.remove(key),
        };
    }

    /// `sudo bash ./hostkeyctl/install_hostkeyctl.sh ARGS` from the
    /// lifecycle folder, as the node at `ip`; `env` is what the caller's
    /// environment adds (kept here: a call without sudo).
    pub(crate) fn run(
        &self,
        bed: &TestBed,
        node: &Node,
        ip: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> (i32, String) {
        let mut lines: Vec<String> = self.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
        lines.push(format!("HOSTKEYCTL_SELF_IP={ip}"));
        let file = self.dir.path().join("hostkeyctl/hostkeyctl.env");
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut cmd = Command::new("env");
        cmd.arg("-i")
            .arg(format!(
                "PATH={}:/usr/sbin:/usr/bin:/sbin:/bin",
                self.dir.path().join("bin").display()
            ))
            .arg(format!("AWS_ENDPOINT_URL={}", bed.state.endpoint))
            .args([
                "AWS_EC2_METADATA_DISABLED=true",
                "AWS_CONFIG_FILE=/dev/null",
                "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
            ]);
        for (k, v) in node
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(env.iter().copied())
        {
            cmd.arg(format!("{k}={v}"));
        }
        let out = cmd
            .args(["bash", "./hostkeyctl/install_hostkeyctl.sh"])
            .args(args)
            .current_dir(self.dir.path())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), text)
    }

    pub(crate) fn calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("calls.log")).unwrap_or_default()
    }

    /// The settings the step wrote for the timer.
    pub(crate) fn timer_settings(&self) -> String {
        std::fs::read_to_string(self.root().join("etc/default/hostkeyctl")).unwrap_or_default()
    }
}
