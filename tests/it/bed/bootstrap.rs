//! The HyperPod lifecycle step (contrib/hyperpod/install_hostkeyctl.sh) on
//! the bed, run as base-config runs its scripts: `ExecuteBashScript` is
//! `sudo bash SCRIPT ARGS...` on files S3 gave mode 0644, and sudo resets
//! the environment (modelled by `env -i`, keeping what a node has anyway:
//! its role's credentials, here the bed's, and hostkeyctl's paths on the
//! bed's node). The configs are the real structure (testbed/hyperpod/).
//! The step finds its node type as lifecycle_script.py does, takes the
//! region from the cluster's ARN, checks the binary's checksum, installs
//! it, the units and the keys, enables the timer, and changes nothing the
//! second time. The node's systemctl is a recording stand-in.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::bed::lifecycle::{Lifecycle, fixtures};
use crate::common::bed::{BedOptions, Node, SECRET, TestBed, served, set_fingerprints};

/// The login node's address in the fixtures.
const LOGIN_IP: &str = "10.1.17.20";
/// A worker's.
const WORKER_IP: &str = "10.1.17.40";

fn bed_of_one() -> (TestBed, Node, Vec<Option<String>>) {
    let bed = TestBed::start(BedOptions::nodes(1).no_reexec());
    let node = bed.state.nodes[0].clone();
    let init = bed.init_generated(SECRET);
    (bed, node, set_fingerprints(&init))
}

/// No arguments: the node type from the configs. No region is set, and
/// the node's metadata gives none (regression: install exited 2, the step
/// blamed HOSTKEYCTL_SECRET_ID and stopped provisioning with the timer
/// off): the region is the cluster's, from ClusterConfig.ClusterArn, also
/// for the timer. A group whose `Instances` is null is skipped (it crashed
/// the step on every node).
#[test]
fn the_lifecycle_step_installs_on_login_nodes_only_and_is_idempotent() {
    let (bed, node, set) = bed_of_one();
    let lifecycle = Lifecycle::new();

    // A worker node: nothing happens.
    let (code, log) = lifecycle.run(&bed, &node, WORKER_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("instance group worker-group) is a compute node, not a login node: nothing to do"),
        "{log}"
    );
    assert!(!lifecycle.root().exists(), "a worker got files");

    // The login node: binary, settings, units, keys, timer.
    let (code, log) = lifecycle.run(&bed, &node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("region us-east-1 (the cluster's"), "{log}");
    let bin = lifecycle.root().join("usr/local/bin/hostkeyctl");
    assert_eq!(std::fs::metadata(&bin).unwrap().permissions().mode() & 0o777, 0o755);
    let settings = lifecycle.timer_settings();
    assert!(
        settings.contains("HOSTKEYCTL_SECRET_ID=hostkeys/hk") && settings.contains("AWS_REGION=us-east-1"),
        "{settings}"
    );
    for unit in ["hostkeyctl-install.service", "hostkeyctl-install.timer"] {
        assert!(
            lifecycle.root().join("etc/systemd/system").join(unit).is_file(),
            "{unit}"
        );
    }
    assert_eq!(served(&node), set, "{log}");
    assert!(
        lifecycle
            .calls()
            .contains("systemctl enable --now hostkeyctl-install.timer")
    );
    assert_metrics_in_node_exporters_directory(&lifecycle, &settings);
    // The metadata service is root's alone (issue 56): a login user gets
    // nothing, root still does, and every boot applies it again.
    assert!(lifecycle.netfilter.metadata_as(65534).starts_with("refused:"), "{log}");
    assert_eq!(lifecycle.netfilter.metadata_as(0), "i-0123456789abcdef0");
    assert!(
        lifecycle
            .root()
            .join("etc/systemd/system/hostkeyctl-imds-guard.service")
            .is_file()
            && lifecycle
                .calls()
                .contains("systemctl enable hostkeyctl-imds-guard.service"),
        "{}",
        lifecycle.calls()
    );

    // Again: nothing changes.
    let (code, log) = lifecycle.run(&bed, &node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("is already this build"), "{log}");
    assert!(!log.contains("wrote "), "the second run rewrote files: {log}");

    imds_opt_out_and_allowed_users(&bed, &node);
    assert_only_the_pinned_binary_is_installed(&bed, &node, &lifecycle, &bin);
    metrics_settings_are_checked_and_followed(&bed, &node);
    assert_lapsed_certificates_never_stop_the_step(&bed, &node);
}

/// `HOSTKEYCTL_IMDS_ALLOW_USERS` lets a named user through; the opt-out
/// (`HOSTKEYCTL_IMDS=open`) opens the service to every user again, says
/// what that means, and removes the boot unit; a wrong value stops the
/// step.
fn imds_opt_out_and_allowed_users(bed: &TestBed, node: &Node) {
    let mut lifecycle_allow = Lifecycle::new();
    lifecycle_allow.set("HOSTKEYCTL_IMDS_ALLOW_USERS", Some("65534"));
    let (code, log) = lifecycle_allow.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert_eq!(
        lifecycle_allow.netfilter.metadata_as(65534),
        "i-0123456789abcdef0",
        "{log}"
    );
    assert!(lifecycle_allow.netfilter.metadata_as(1).starts_with("refused:"));

    let mut open = Lifecycle::new();
    open.set("HOSTKEYCTL_IMDS", Some("wide-open"));
    let (code, log) = open.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains("HOSTKEYCTL_IMDS is 'wide-open': set it to root-only or open"),
        "{log}"
    );
    open.set("HOSTKEYCTL_IMDS", None);
    let (code, log) = open.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert!(open.netfilter.metadata_as(65534).starts_with("refused:"));
    open.set("HOSTKEYCTL_IMDS", Some("open"));
    let (code, log) = open.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("WARNING: HOSTKEYCTL_IMDS=open") && log.contains("removed hostkeyctl-imds-guard.service"),
        "{log}"
    );
    assert_eq!(
        open.netfilter.metadata_as(65534),
        "i-0123456789abcdef0",
        "the opt-out restores it"
    );
    assert!(
        !open
            .root()
            .join("etc/systemd/system/hostkeyctl-imds-guard.service")
            .exists()
    );
}

/// The binary the step installs is the pinned build, whatever lies beside
/// it; a changed one is replaced; with no pin or a bad checksum nothing is
/// installed at all.
fn assert_only_the_pinned_binary_is_installed(bed: &TestBed, node: &Node, lifecycle: &Lifecycle, bin: &Path) {
    // A binary that does not match the pinned hash is never installed,
    // even with a SHA256SUMS beside it that agrees with it (whoever can
    // write the binary can write that too).
    let step = lifecycle.dir.path().join("hostkeyctl");
    let name = format!("hostkeyctl-{}", std::env::consts::ARCH);
    std::fs::write(step.join(&name), b"#!/bin/sh\necho tampered\n").unwrap();
    let sums = crate::common::support::run_ok(Command::new("sha256sum").arg(&name).current_dir(&step));
    std::fs::write(step.join("SHA256SUMS"), sums).unwrap();
    // The installed binary is the pinned build: the other one is ignored.
    let (code, log) = lifecycle.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("is already this build"), "{log}");
    assert_ne!(std::fs::read(bin).unwrap(), b"#!/bin/sh\necho tampered\n");

    // An installed binary that was changed is replaced by the pinned one.
    let good = Lifecycle::new();
    let good_root = good.root();
    std::fs::create_dir_all(good_root.join("usr/local/bin")).unwrap();
    std::fs::write(
        good_root.join("usr/local/bin/hostkeyctl"),
        b"#!/bin/sh\necho changed on the node\n",
    )
    .unwrap();
    let (code, log) = good.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("installed "), "{log}");
    assert_eq!(
        std::fs::read(good_root.join("usr/local/bin/hostkeyctl")).unwrap(),
        std::fs::read(crate::common::support::node_binary()).unwrap()
    );

    // No pin: nothing is installed, and the message says what to set.
    let mut unpinned = Lifecycle::new();
    unpinned.set(
        &format!("HOSTKEYCTL_SHA256_{}", std::env::consts::ARCH.to_uppercase()),
        None,
    );
    let (code, log) = unpinned.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains("HOSTKEYCTL_SHA256_") && log.contains("is not set"),
        "{log}"
    );
    assert!(!unpinned.root().exists(), "{log}");

    // On a fresh login node, a bad checksum installs nothing at all.
    let fresh = Lifecycle::new();
    std::fs::write(fresh.dir.path().join("hostkeyctl").join(&name), b"tampered").unwrap();
    let (code, log) = fresh.run(bed, node, LOGIN_IP, &[], &[]);
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
    assert!(fresh.calls().is_empty(), "{log}");
}

/// Issue 29: the timer writes its textfile where node_exporter's textfile
/// collector reads (the unit's optional ReadWritePaths names that
/// directory), and the step's own install already wrote it. Another
/// directory gets a drop-in that lets the unit write there; "none" turns
/// the metrics off and takes the drop-in back; a relative path is refused
/// before anything is written.
fn assert_metrics_in_node_exporters_directory(lifecycle: &Lifecycle, settings: &str) {
    let default = "/var/lib/node_exporter/textfile_collector";
    assert!(
        settings.contains(&format!("HOSTKEYCTL_METRICS_FILE={default}/hostkeyctl.prom")),
        "{settings}"
    );
    assert!(!settings.contains("HOSTKEYCTL_REPORT_COMPLIANCE"), "{settings}");
    let unit = std::fs::read_to_string(lifecycle.root().join("etc/systemd/system/hostkeyctl-install.service")).unwrap();
    assert!(
        unit.lines()
            .any(|l| l.starts_with("ReadWritePaths=") && l.contains(&format!(" -{default}"))),
        "the unit may not write {default}"
    );
    let prom = lifecycle.root().join(&default[1..]).join("hostkeyctl.prom");
    let samples = crate::common::support::prometheus_samples(&prom);
    assert!(
        samples
            .iter()
            .any(|(name, _, value)| name == "hostkeyctl_host_keys_converged" && *value == 1.0),
        "{samples:?}"
    );
    let dropin = lifecycle
        .root()
        .join("etc/systemd/system/hostkeyctl-install.service.d/20-metrics.conf");
    assert!(!dropin.exists(), "a drop-in for the default directory");
}

/// The metrics settings of the step, on a login node of their own.
fn metrics_settings_are_checked_and_followed(bed: &TestBed, node: &Node) {
    let mut elsewhere = Lifecycle::new();
    elsewhere.set("HOSTKEYCTL_METRICS_DIR", Some("/srv/metrics"));
    elsewhere.set("HOSTKEYCTL_REPORT_COMPLIANCE", Some("maybe"));
    let (code, log) = elsewhere.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("HOSTKEYCTL_REPORT_COMPLIANCE is 'maybe'"), "{log}");
    assert!(!elsewhere.root().join("etc").exists(), "{log}");
    elsewhere.set("HOSTKEYCTL_REPORT_COMPLIANCE", None);
    let (code, log) = elsewhere.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert!(
        elsewhere
            .timer_settings()
            .contains("HOSTKEYCTL_METRICS_FILE=/srv/metrics/hostkeyctl.prom"),
        "{log}"
    );
    assert!(elsewhere.root().join("srv/metrics/hostkeyctl.prom").is_file(), "{log}");
    let dropin = elsewhere
        .root()
        .join("etc/systemd/system/hostkeyctl-install.service.d/20-metrics.conf");
    let text = std::fs::read_to_string(&dropin).unwrap();
    assert!(text.contains("[Service]\nReadWritePaths=-/srv/metrics\n"), "{text}");
    elsewhere.set("HOSTKEYCTL_METRICS_DIR", Some("none"));
    let (code, log) = elsewhere.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert!(!elsewhere.timer_settings().contains("HOSTKEYCTL_METRICS_FILE"), "{log}");
    assert!(!dropin.exists(), "{log}");
    elsewhere.set("HOSTKEYCTL_METRICS_DIR", Some("metrics"));
    let (code, log) = elsewhere.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("is not an absolute path"), "{log}");
    // systemd would read "%h" as a specifier: never written into the unit.
    elsewhere.set("HOSTKEYCTL_METRICS_DIR", Some("/srv/%h"));
    let (code, log) = elsewhere.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("ReadWritePaths cannot name it"), "{log}");
}

/// A set whose ed25519 certificate expired (issue 27): the step exited 1
/// with the timer off and the node kept its own keys. The keys are
/// installed, the certificate left out (install's exit 6), the timer on.
fn assert_lapsed_certificates_never_stop_the_step(bed: &TestBed, node: &Node) {
    let lapsed = current_with_an_expired_certificate(bed);
    let renewal = Lifecycle::new();
    let (code, log) = renewal.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("installed_without_certificates") && log.contains("expired at") && log.contains("(exit 6"),
        "{log}"
    );
    assert_eq!(served(node), lapsed, "{log}");
    assert!(
        renewal
            .calls()
            .contains("systemctl enable --now hostkeyctl-install.timer"),
        "{log}"
    );
}

/// Stores a new key set as AWSCURRENT of `hostkeys/hk` whose ed25519 key
/// carries a certificate that expired in 2020 (signed by ssh-keygen with a
/// CA of its own); returns the set's fingerprints.
fn current_with_an_expired_certificate(bed: &TestBed) -> Vec<Option<String>> {
    let fresh = bed.init_generated("hostkeys/fresh");
    let dir = tempfile::tempdir().unwrap();
    let keygen = || Command::new(crate::common::support::require("ssh-keygen"));
    crate::common::support::run_ok(
        keygen()
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.path().join("ca")),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let text = runtime.block_on(bed.secret_value("hostkeys/fresh"));
    let mut document: serde_json::Value = serde_json::from_str(&text).unwrap();
    for key in document["keys"].as_array_mut().unwrap() {
        if key["algorithm"] != "ssh-ed25519" {
            continue;
        }
        let public = dir.path().join("host.pub");
        std::fs::write(&public, format!("{}\n", key["public_key"].as_str().unwrap())).unwrap();
        crate::common::support::run_ok(
            keygen()
                .arg("-q")
                .arg("-s")
                .arg(dir.path().join("ca"))
                .args(["-h", "-I", "test", "-n", "login.test", "-V", "20200101:20200102"])
                .arg(&public),
        );
        let cert = std::fs::read_to_string(dir.path().join("host-cert.pub")).unwrap();
        key["certificate"] = serde_json::Value::String(cert.trim().to_owned());
    }
    runtime.block_on(bed.put_secret_value(SECRET, &document.to_string(), "AWSCURRENT"));
    set_fingerprints(&fresh)
}

/// The call docs/bootstrap.md tells base-config users to add, as Python:
/// its arguments, in order.
fn documented_call() -> Vec<String> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/bootstrap.md")).unwrap();
    let call = "ExecuteBashScript(\"./hostkeyctl/install_hostkeyctl.sh\").run(";
    let at = doc
        .find(call)
        .expect("docs/bootstrap.md shows the lifecycle_script.py call");
    let rest = &doc[at + call.len()..];
    let args = &rest[..rest.find(')').unwrap()];
    args.split(',').map(|a| a.trim().to_owned()).collect()
}

/// Each way the step met a real cluster and failed it (issue 32), on the
/// real configs' structure, with the call as docs/bootstrap.md shows it.
#[test]
fn the_lifecycle_step_never_skips_a_login_node_and_reads_every_cluster_model() {
    let (bed, node, set) = bed_of_one();

    // The documented call, its arguments as lifecycle_script.py has them
    // (regression: the call's place and arguments were not documented).
    let lifecycle = Lifecycle::new();
    let args = documented_call();
    assert_eq!(
        args,
        ["node_type", "args.resource_config", "args.provisioning_parameters"]
    );
    let (rc, pp) = (
        lifecycle.path("resource_config.json"),
        lifecycle.path("provisioning_parameters.json"),
    );
    // lifecycle_script.py's node type for a controller: nothing to do.
    let (code, log) = lifecycle.run(&bed, &node, "10.1.17.5", &["controller", &rc, &pp], &[]);
    assert_eq!(
        (code, log.contains("controller node, not a login node")),
        (0, true),
        "{log}"
    );
    assert!(!lifecycle.root().exists(), "{log}");
    // Settings in the environment are ignored, and said to be (they work
    // by hand and vanish under sudo): the file's secret and the cluster's
    // region are used. Regression: the header offered the environment.
    let env = [
        ("HOSTKEYCTL_SECRET_ID", "hostkeys/other"),
        ("HOSTKEYCTL_REGION", "eu-west-9"),
    ];
    let (code, log) = lifecycle.run(&bed, &node, LOGIN_IP, &["login", &rc, &pp], &env);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("ignoring HOSTKEYCTL_SECRET_ID HOSTKEYCTL_REGION from the environment"),
        "{log}"
    );
    assert!(lifecycle.timer_settings().contains("AWS_REGION=us-east-1"), "{log}");
    assert_eq!(served(&node), set, "{log}");

    // A node in no group (or whose address detection fell back to
    // loopback) is looked for again, then stops provisioning. Regression:
    // "nothing to do", exit 0, and a login node without keys or timer.
    for ip in ["10.1.17.99", "127.0.0.1"] {
        let lost = Lifecycle::new();
        let (code, log) = lost.run(&bed, &node, ip, &[], &[]);
        assert_eq!(code, 1, "{ip}: {log}");
        assert_eq!(log.matches("looking again").count(), 6, "{ip}: {log}");
        assert!(log.contains("after 7 looks: it may be a login node"), "{ip}: {log}");
        assert!(!lost.root().exists(), "{ip}: {log}");
    }

    // No region anywhere (no ClusterArn, none set, none from metadata):
    // named as such, with the fix.
    let mut no_region = Lifecycle::new();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("resource_config.json")).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("ClusterConfig");
    std::fs::write(no_region.path("resource_config.json"), config.to_string()).unwrap();
    let (code, log) = no_region.run(&bed, &node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 1, "{log}");
    assert!(
        log.contains("no AWS region") && log.contains("set HOSTKEYCTL_REGION in hostkeyctl.env"),
        "{log}"
    );
    assert!(!log.contains("check HOSTKEYCTL_SECRET_ID"), "{log}");
    no_region.set("HOSTKEYCTL_REGION", Some("us-east-1"));
    let (code, log) = no_region.run(&bed, &node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 0, "{log}");

    // An API-driven cluster: SlurmConfig.NodeType per group, no
    // provisioning_parameters.json, the config where HyperPod says
    // (SAGEMAKER_RESOURCE_CONFIG_PATH, which the step ignored).
    let api = Lifecycle::new();
    std::fs::remove_file(api.path("provisioning_parameters.json")).unwrap();
    let config = fixtures().join("resource_config.api-driven.json").display().to_string();
    let env = [("SAGEMAKER_RESOURCE_CONFIG_PATH", config.as_str())];
    let (code, log) = api.run(&bed, &node, "10.1.18.5", &[], &env);
    assert_eq!((code, log.contains("controller node")), (0, true), "{log}");
    let (code, log) = api.run(&bed, &node, "10.1.18.20", &[], &env);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("login node 10.1.18.20 (instance group login)"), "{log}");
    assert!(api.calls().contains("enable --now hostkeyctl-install.timer"), "{log}");
    provisioning_parameters_beside_the_resource_config(&bed, &node);
    assert_s3_denied_and_a_failing_install_are_named(&bed, &node);
}

/// A base-config cluster whose lifecycle scripts carry no
/// provisioning_parameters.json: the one HyperPod writes beside
/// resource_config.json (/opt/ml/config) names the login group.
fn provisioning_parameters_beside_the_resource_config(bed: &TestBed, node: &Node) {
    let lifecycle = Lifecycle::new();
    let platform = tempfile::tempdir().unwrap();
    for name in ["provisioning_parameters.json", "resource_config.json"] {
        std::fs::rename(lifecycle.path(name), platform.path().join(name)).unwrap();
    }
    let config = platform.path().join("resource_config.json").display().to_string();
    let (code, log) = lifecycle.run(bed, node, LOGIN_IP, &[], &[("SAGEMAKER_RESOURCE_CONFIG_PATH", &config)]);
    let found = log.contains(&format!("login node {LOGIN_IP}"));
    assert_eq!((code, found), (0, true), "{log}");
}

/// The binary from S3 the node may not read, and an install AWS keeps
/// refusing: each stops or retries, saying why.
fn assert_s3_denied_and_a_failing_install_are_named(bed: &TestBed, node: &Node) {
    // The binary from S3, which the node role may not read: stops, naming
    // the permission (regression: no IAM guidance, and the CLI's error alone).
    let mut s3 = Lifecycle::new();
    std::fs::remove_file(
        s3.dir
            .path()
            .join(format!("hostkeyctl/hostkeyctl-{}", std::env::consts::ARCH)),
    )
    .unwrap();
    s3.set("HOSTKEYCTL_BINARY_S3_URI", Some("s3://release-bucket/hostkeyctl"));
    let (code, log) = s3.run(bed, node, LOGIN_IP, &[], &[]);
    assert_eq!(code, 1, "{log}");
    assert!(log.contains("s3:GetObject") && log.contains("docs/iam.md"), "{log}");
    assert!(s3.calls().contains("aws s3 cp"), "{log}");

    // An install that keeps failing (AWS refuses the node's key): five
    // attempts, no wait after the last (regression: one more sleep), and
    // the timer is left to retry.
    let failing = Lifecycle::new();
    let env = [("AWS_SECRET_ACCESS_KEY", "not-the-key")];
    let (code, log) = failing.run(bed, node, LOGIN_IP, &[], &env);
    assert_eq!(code, 0, "{log}");
    assert_eq!(log.matches("; retrying").count(), 4, "{log}");
    let admission = format!("do not register {LOGIN_IP} yet");
    for said in [
        "attempt 5: hostkeyctl install exited 4; giving up here",
        "the timer retries",
        "admit holds it out",
        &admission,
    ] {
        assert!(log.contains(said), "{said}: {log}");
    }
}
