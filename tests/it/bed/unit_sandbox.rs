//! The shipped unit's sandbox, with install inside it (issue 26). systemd
//! cannot boot here, so bubblewrap builds what the unit's directives build:
//! the whole file system read-only (`ProtectSystem=strict`) but the unit's
//! `ReadWritePaths` and its `StateDirectory`, a private /tmp and /dev, and
//! only the `CapabilityBoundingSet`'s capabilities, all read from
//! contrib/systemd/hostkeyctl-install.service itself. On a Debian node
//! (reload through systemd) and an Amazon Linux 2 node (key files in group
//! ssh_keys, which needs CAP_CHOWN) install converges and verifies in it;
//! with a capability or a writable path taken away it fails, naming what
//! is missing, and leaves the node as it was, which shows the emulation
//! bites.

use std::path::{Path, PathBuf};

use crate::bed::profiles::{files, in_node, profile_bed, served};
use crate::common::bed::{Node, Run, SECRET, TestBed, set_fingerprints};
use crate::common::support::require;

/// What the unit's directives say.
struct Sandbox {
    read_write: Vec<PathBuf>,
    /// `RuntimeDirectory=`: under /run, writable (and kept between runs:
    /// `RuntimeDirectoryPreserve=yes`, the connection budget's ledger).
    runtime: Vec<String>,
    capabilities: Vec<String>,
}

fn unit_sandbox() -> Sandbox {
    let unit = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib/systemd/hostkeyctl-install.service"),
    )
    .unwrap();
    let values = |key: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .flat_map(|v| v.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .collect()
    };
    assert_eq!(
        values("ProtectSystem"),
        ["strict"],
        "the emulation models ProtectSystem=strict"
    );
    assert_eq!(values("StateDirectory"), ["hostkeyctl"]);
    assert_eq!(values("PrivateTmp"), ["yes"]);
    assert_eq!(values("PrivateDevices"), ["yes"]);
    Sandbox {
        read_write: values("ReadWritePaths").into_iter().map(PathBuf::from).collect(),
        runtime: values("RuntimeDirectory"),
        capabilities: values("CapabilityBoundingSet"),
    }
}

/// node_exporter's textfile directory, where HyperPod's lifecycle step and
/// the cloud-init example point the metrics file (issue 29).
const TEXTFILE_DIR: &str = "/var/lib/node_exporter/textfile_collector";

/// `hostkeyctl install ARGS` on the node inside `sandbox`. The node's state
/// directory stands for /var/lib/hostkeyctl (StateDirectory=). The bed's
/// stand-in systemctl keeps systemd's own state in /run/standin-systemd,
/// which stays writable: a real systemctl writes nothing, it asks PID 1.
fn install_in(bed: &TestBed, node: &Node, sandbox: &Sandbox, args: &[&str]) -> Run {
    install_with_textfile_dir(bed, node, sandbox, None, args)
}

/// As [`install_in`], on a node that has node_exporter's textfile
/// directory: `textfile`, a directory of the test, stands at
/// [`TEXTFILE_DIR`] (over an empty /var/lib), read-only unless the unit's
/// `ReadWritePaths` names it. A path there with systemd's "-" prefix that
/// does not exist is skipped, as systemd skips it.
fn install_with_textfile_dir(
    bed: &TestBed,
    node: &Node,
    sandbox: &Sandbox,
    textfile: Option<&Path>,
    args: &[&str],
) -> Run {
    let mut cmd = in_node(bed, node, &require("bwrap"));
    cmd.args([
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
    ]);
    if textfile.is_some() {
        cmd.args(["--tmpfs", "/var/lib"]);
    }
    let state = PathBuf::from(&node.env["HOSTKEYCTL_STATE_DIR"]);
    std::fs::create_dir_all(&state).unwrap();
    let mut writable: Vec<(PathBuf, PathBuf)> = vec![];
    let mut textfile_writable = false;
    for entry in &sandbox.read_write {
        let text = entry.to_str().unwrap();
        let (optional, path) = match text.strip_prefix('-') {
            Some(path) => (true, PathBuf::from(path)),
            None => (false, entry.clone()),
        };
        if let (Some(dir), true) = (textfile, path == Path::new(TEXTFILE_DIR)) {
            writable.push((dir.to_owned(), path));
            textfile_writable = true;
        } else if !optional || path.exists() {
            writable.push((path.clone(), path));
        }
    }
    writable.push((state.clone(), state));
    writable.push((
        PathBuf::from("/run/standin-systemd"),
        PathBuf::from("/run/standin-systemd"),
    ));
    if let (Some(dir), false) = (textfile, textfile_writable) {
        cmd.arg("--ro-bind").arg(dir).arg(TEXTFILE_DIR);
    }
    for (source, path) in &writable {
        cmd.arg("--bind").arg(source).arg(path);
    }
    // The node's /run is its own (the profile's run/): systemd makes the
    // runtime directory there before the unit starts.
    for name in &sandbox.runtime {
        std::fs::create_dir_all(Path::new(&node.root).join("run").join(name)).unwrap();
        let path = Path::new("/run").join(name);
        cmd.arg("--bind").arg(&path).arg(&path);
    }
    // The default ledger (/run/hostkeyctl/pacing), as the unit has it.
    cmd.env_remove("HOSTKEYCTL_PACING_DIR");
    // The unit runs /usr/local/bin/hostkeyctl, outside PrivateTmp's /tmp;
    // the build under test may live under /tmp (a checkout there), which
    // the tmpfs above would hide. Read-only, like the unit's binary.
    let binary = crate::common::support::node_binary();
    cmd.arg("--ro-bind").arg(&binary).arg(&binary);
    cmd.args(["--cap-drop", "ALL"]);
    for cap in &sandbox.capabilities {
        cmd.args(["--cap-add", cap]);
    }
    cmd.arg("--").arg(&binary).arg("install").args(args);
    Run::from(cmd.output().unwrap())
}

/// Amazon Linux's key files are in group ssh_keys (gid 993 there). The
/// bed keeps them 0600 (Debian's sshd refuses 0640) but gives them that
/// group, so every new file install writes must be given it too: a chown
/// to a group root is no member of, which needs CAP_CHOWN.
fn ssh_keys_group(node: &Node) {
    for entry in std::fs::read_dir(&node.ssh_dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("ssh_host_") && !name.ends_with(".pub") {
            std::os::unix::fs::chown(&path, Some(0), Some(993)).unwrap();
        }
    }
}

fn converges_in_the_units_sandbox(profile: &'static str) {
    let bed = profile_bed(profile);
    let node = bed.state.profiles[0].clone();
    if profile == "al2" {
        ssh_keys_group(&node);
    }
    let init = bed.init_generated(SECRET);
    let sandbox = unit_sandbox();
    let before = files(&node);

    // Taken away, what the unit grants is missed: nothing changes.
    let no_etc_ssh = Sandbox {
        read_write: vec![],
        ..unit_sandbox()
    };
    let run = install_in(&bed, &node, &no_etc_ssh, &["--secret-id", SECRET]);
    assert_eq!(
        run.code, 3,
        "{profile}: /etc/ssh read-only: rolled back: {}\n{}",
        run.stderr, run.stdout
    );
    assert!(
        format!("{}{}", run.stderr, run.stdout).contains("ReadWritePaths"),
        "{profile}: the read-only file system is not named: {}\n{}",
        run.stderr,
        run.stdout
    );
    assert_eq!(files(&node), before, "{profile}: a refused install changed files");

    let run = install_in(&bed, &node, &sandbox, &["--secret-id", SECRET]);
    assert_eq!(run.code, 0, "{profile}: {}\n{}", run.stderr, run.stdout);
    // Regression: /run is read-only under ProtectSystem=strict, and the
    // connection budget went back to this run alone, with a warning.
    assert!(
        !run.stderr.contains("connection budget"),
        "{profile}: the ledger is not writable in the unit: {}",
        run.stderr
    );
    let expected = set_fingerprints(&init);
    assert_eq!(
        served(&bed, &node)[..3],
        expected[..],
        "{profile}: not served after the sandboxed install"
    );
    let again = install_in(&bed, &node, &sandbox, &["--secret-id", SECRET]);
    again.ok();
    assert_eq!(again.json()["result"], "unchanged", "{profile}");
    let check = install_in(&bed, &node, &sandbox, &["--secret-id", SECRET, "--check"]);
    assert_eq!(check.code, 0, "{profile}: {}", check.stderr);
    metrics_reach_node_exporter_in_the_sandbox(&bed, &node, &sandbox);
    if profile == "al2" {
        use std::os::unix::fs::MetadataExt;
        let key = std::fs::metadata(node.ssh_dir.join("ssh_host_ed25519_key")).unwrap();
        assert_eq!(key.gid(), 993, "the new key file kept the distribution's group");
    }
}

/// Issue 29: the unit lets install write its metrics file in node_exporter's
/// textfile directory, and only there; without that path in
/// `ReadWritePaths` the file is not written and the check still passes,
/// with a warning.
fn metrics_reach_node_exporter_in_the_sandbox(bed: &TestBed, node: &Node, sandbox: &Sandbox) {
    let file = format!("{TEXTFILE_DIR}/hostkeyctl.prom");
    let args = ["--secret-id", SECRET, "--check", "--metrics-file", &file];
    let dir = tempfile::tempdir_in(bed.dir()).unwrap();
    let check = install_with_textfile_dir(bed, node, sandbox, Some(dir.path()), &args);
    assert_eq!(check.code, 0, "{}", check.stderr);
    let samples = crate::common::support::prometheus_samples(&dir.path().join("hostkeyctl.prom"));
    assert!(
        samples
            .iter()
            .any(|(name, _, value)| name == "hostkeyctl_host_keys_converged" && *value == 1.0),
        "{samples:?}"
    );

    let elsewhere = tempfile::tempdir_in(bed.dir()).unwrap();
    let without = Sandbox {
        read_write: sandbox
            .read_write
            .iter()
            .filter(|p| !p.to_string_lossy().ends_with(TEXTFILE_DIR))
            .cloned()
            .collect(),
        ..unit_sandbox()
    };
    assert_ne!(
        without.read_write, sandbox.read_write,
        "the unit names no textfile directory"
    );
    let check = install_with_textfile_dir(bed, node, &without, Some(elsewhere.path()), &args);
    assert_eq!(
        check.code, 0,
        "a metrics file that cannot be written failed the check: {}",
        check.stderr
    );
    assert!(check.stderr.contains("hostkeyctl.prom"), "no warning: {}", check.stderr);
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

#[test]
fn install_converges_inside_the_units_sandbox_on_debian() {
    converges_in_the_units_sandbox("debian-12");
}

/// Amazon Linux 2's key files are in group ssh_keys: a new file gets that
/// group with CAP_CHOWN, which the unit keeps; without it install fails
/// and changes nothing.
#[test]
fn install_converges_inside_the_units_sandbox_on_amazon_linux_2() {
    converges_in_the_units_sandbox("al2");
    let bed = profile_bed("al2");
    let node = bed.state.profiles[0].clone();
    ssh_keys_group(&node);
    bed.init_generated(SECRET);
    let before = files(&node);
    let no_chown = Sandbox {
        capabilities: unit_sandbox()
            .capabilities
            .into_iter()
            .filter(|c| c != "CAP_CHOWN")
            .collect(),
        ..unit_sandbox()
    };
    let run = install_in(&bed, &node, &no_chown, &["--secret-id", SECRET]);
    run.code(3);
    assert_eq!(files(&node), before, "a failed install left changes");
}
