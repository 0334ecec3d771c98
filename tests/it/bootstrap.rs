//! The HyperPod lifecycle step (contrib/hyperpod/install_hostkeyctl.sh) on
//! the bed: it finds its node type as lifecycle_script.py does (its address
//! in resource_config.json, the login group in provisioning_parameters.json),
//! checks the binary's checksum, installs it, the units and the keys, enables
//! the timer, and changes nothing the second time. The node's systemctl is a
//! recording stand-in.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::common::bed::{BedOptions, Node, TestBed, served, set_fingerprints};

/// A lifecycle scripts folder as the bucket would hold it, plus a scratch
/// root and a recording systemctl.
struct Lifecycle {
    dir: tempfile::TempDir,
}

impl Lifecycle {
    fn new(bed: &TestBed) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let step = dir.path().join("hostkeyctl");
        std::fs::create_dir_all(&step).unwrap();
        for file in [
            "hyperpod/install_hostkeyctl.sh",
            "systemd/hostkeyctl-install.service",
            "systemd/hostkeyctl-install.timer",
        ] {
            let from = root.join("contrib").join(file);
            let to = step.join(from.file_name().unwrap());
            std::fs::copy(&from, &to).unwrap();
        }
        let name = format!("hostkeyctl-{}", std::env::consts::ARCH);
        std::fs::copy(crate::common::support::node_binary(), step.join(&name)).unwrap();
        let sum = crate::common::support::run_ok(Command::new("sha256sum").arg(&name).current_dir(&step));
        let sum = sum.split_whitespace().next().unwrap().to_owned();
        // A SHA256SUMS beside the binary is not trusted: it agrees with
        // whatever binary is there.
        std::fs::write(step.join("SHA256SUMS"), format!("{sum}  {name}\n")).unwrap();
        std::fs::write(
            step.join("hostkeyctl.env"),
            format!(
                "HOSTKEYCTL_SECRET_ID=hostkeys/hk\nHOSTKEYCTL_SHA256_{}={sum}\n",
                std::env::consts::ARCH.to_uppercase()
            ),
        )
        .unwrap();
        let nodes = &bed.state.nodes;
        let resource_config = json!({ "InstanceGroups": [
            { "Name": "controller-machine", "Instances": [{ "InstanceName": "c-1", "CustomerIpAddress": "10.1.0.5" }] },
            { "Name": "login-group", "Instances": nodes.iter().map(|n| json!({ "InstanceName": n.name, "CustomerIpAddress": n.address })).collect::<Vec<_>>() },
            { "Name": "worker-group", "Instances": [{ "InstanceName": "w-1", "CustomerIpAddress": "10.1.0.9" }] },
        ]});
        std::fs::write(dir.path().join("resource_config.json"), resource_config.to_string()).unwrap();
        let params = json!({ "version": "1.0.0", "workload_manager": "slurm", "controller_group": "controller-machine", "login_group": "login-group" });
        std::fs::write(dir.path().join("provisioning_parameters.json"), params.to_string()).unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let systemctl = bin.join("systemctl");
        std::fs::write(
            &systemctl,
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\n",
                dir.path().join("systemctl.log").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&systemctl, std::fs::Permissions::from_mode(0o755)).unwrap();
        Lifecycle { dir }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// Runs the step as the node with address `ip`, in `node`'s environment.
    fn run(&self, bed: &TestBed, node: &Node, ip: &str) -> (i32, String) {
        let out = Command::new(self.dir.path().join("hostkeyctl/install_hostkeyctl.sh"))
            .envs(bed.aws_env(crate::common::bed::Role::Node))
            .envs(node.env.clone())
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.dir.path().join("bin").display(),
                    std::env::var("PATH").unwrap()
                ),
            )
            .env("HOSTKEYCTL_ROOT", self.root())
            .env("HOSTKEYCTL_SELF_IP", ip)
            .env(
                "HOSTKEYCTL_RESOURCE_CONFIG",
                self.dir.path().join("resource_config.json"),
            )
            .env("HOSTKEYCTL_RETRY_SECONDS", "0")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code().unwrap_or(-1), text)
    }

    fn systemctl_calls(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("systemctl.log")).unwrap_or_default()
    }
}

#[test]
fn the_lifecycle_step_installs_on_login_nodes_only_and_is_idempotent() {
    let bed = TestBed::start(BedOptions {
        nodes: 1,
        no_reexec: true,
        ..BedOptions::default()
    });
    let node = bed.state.nodes[0].clone();
    let init = bed.init_generated("hostkeys/hk");
    let lifecycle = Lifecycle::new(&bed);

    // A worker node: nothing happens.
    let (code, log) = lifecycle.run(&bed, &node, "10.1.0.9");
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("not the login group 'login-group'; nothing to do"),
        "{log}"
    );
    assert!(!lifecycle.root().exists(), "a worker got files");

    // The login node: binary, settings, units, keys, timer.
    let (code, log) = lifecycle.run(&bed, &node, &node.address);
    assert_eq!(code, 0, "{log}");
    let bin = lifecycle.root().join("usr/local/bin/hostkeyctl");
    assert_eq!(std::fs::metadata(&bin).unwrap().permissions().mode() & 0o777, 0o755);
    assert!(
        std::fs::read_to_string(lifecycle.root().join("etc/default/hostkeyctl"))
            .unwrap()
            .contains("HOSTKEYCTL_SECRET_ID=hostkeys/hk")
    );
    for unit in ["hostkeyctl-install.service", "hostkeyctl-install.timer"] {
        assert!(
            lifecycle.root().join("etc/systemd/system").join(unit).is_file(),
            "{unit}"
        );
    }
    assert_eq!(served(&node), set_fingerprints(&init), "{log}");
    assert!(
        lifecycle
            .systemctl_calls()
            .contains("enable --now hostkeyctl-install.timer")
    );

    // Again: nothing changes.
    let (code, log) = lifecycle.run(&bed, &node, &node.address);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("is already this build"), "{log}");
    assert!(!log.contains("wrote "), "the second run rewrote files: {log}");

    // A binary that does not match the pinned hash is never installed,
    // even with a SHA256SUMS beside it that agrees with it (whoever can
    // write the binary can write that too).
    let step = lifecycle.dir.path().join("hostkeyctl");
    let name = format!("hostkeyctl-{}", std::env::consts::ARCH);
    std::fs::write(step.join(&name), b"#!/bin/sh\necho tampered\n").unwrap();
    let sums = crate::common::support::run_ok(Command::new("sha256sum").arg(&name).current_dir(&step));
    std::fs::write(step.join("SHA256SUMS"), sums).unwrap();
    // The installed binary is the pinned build: the other one is ignored.
    let (code, log) = lifecycle.run(&bed, &node, &node.address);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("is already this build"), "{log}");
    assert_ne!(std::fs::read(&bin).unwrap(), b"#!/bin/sh\necho tampered\n");

    // An installed binary that was changed is replaced by the pinned one.
    let good = Lifecycle::new(&bed);
    let good_root = good.root();
    std::fs::create_dir_all(good_root.join("usr/local/bin")).unwrap();
    std::fs::write(
        good_root.join("usr/local/bin/hostkeyctl"),
        b"#!/bin/sh\necho changed on the node\n",
    )
    .unwrap();
    let (code, log) = good.run(&bed, &node, &node.address);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("installed "), "{log}");
    assert_eq!(
        std::fs::read(good_root.join("usr/local/bin/hostkeyctl")).unwrap(),
        std::fs::read(crate::common::support::node_binary()).unwrap()
    );

    // No pin: nothing is installed, and the message says what to set.
    let unpinned = Lifecycle::new(&bed);
    std::fs::write(
        unpinned.dir.path().join("hostkeyctl/hostkeyctl.env"),
        "HOSTKEYCTL_SECRET_ID=hostkeys/hk\n",
    )
    .unwrap();
    let (code, log) = unpinned.run(&bed, &node, &node.address);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains("HOSTKEYCTL_SHA256_") && log.contains("is not set"),
        "{log}"
    );
    assert!(!unpinned.root().exists(), "{log}");

    // On a fresh login node, a bad checksum installs nothing at all.
    let fresh = Lifecycle::new(&bed);
    std::fs::write(fresh.dir.path().join("hostkeyctl").join(&name), b"tampered").unwrap();
    let (code, log) = fresh.run(&bed, &node, &node.address);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("not installing it"), "{log}");
    assert!(
        !fresh.root().join("usr/local/bin/hostkeyctl.new").exists(),
        "the refused copy was left behind"
    );
    assert!(!fresh.root().join("usr/local/bin/hostkeyctl").exists(), "{log}");
    assert!(
        !fresh.root().join("etc").exists(),
        "a bad checksum still wrote files: {log}"
    );
    assert!(fresh.systemctl_calls().is_empty(), "{log}");
}

/// The cloud-init example carries contrib/systemd's units verbatim.
#[test]
fn the_cloud_init_example_embeds_the_unit_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib");
    let example = std::fs::read_to_string(root.join("cloud-init/hostkeyctl.yaml")).unwrap();
    for unit in ["hostkeyctl-install.service", "hostkeyctl-install.timer"] {
        let text = std::fs::read_to_string(root.join("systemd").join(unit)).unwrap();
        let indented: String = text
            .lines()
            .map(|l| {
                if l.is_empty() {
                    "\n".to_owned()
                } else {
                    format!("      {l}\n")
                }
            })
            .collect();
        assert!(example.contains(&indented), "{unit} differs in the cloud-init example");
    }
}
