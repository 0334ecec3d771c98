//! The HyperPod lifecycle step with enrolment (`HOSTKEYCTL_ENROL_FUNCTION`
//! and `HOSTKEYCTL_ENROL_TRUST` in hostkeyctl.env): a compute node enrols
//! and gets the renewal timer, and no canonical set; a login node installs
//! the set and takes the cluster's trust alone; bad settings stop
//! provisioning before anything is installed (docs/bootstrap.md,
//! "Enrolment on every node type").

use crate::bed::enrolment::{cluster_bed, instance_of, listed, names_of, principals_listed};
use crate::bed::lifecycle::Lifecycle;
use crate::common::bed::{Node, TestBed};

/// The node's own IMDS endpoint (the step's environment on a node).
fn imds(bed: &TestBed, node: &Node) -> String {
    let answer = bed.control(
        "POST",
        "/_bed/hyperpod/imds",
        &serde_json::json!({
            "cluster": bed.state.hyperpod.as_ref().unwrap().cluster,
            "instance_id": instance_of(bed, &node.address),
        }),
    );
    answer["endpoint"].as_str().unwrap().to_owned()
}

#[test]
fn the_lifecycle_step_enrols_every_node_type() {
    let (bed, _runtime, arn) = cluster_bed(2, "", "ecdsa");
    let (compute, login) = (&bed.state.nodes[0], &bed.state.nodes[1]);
    bed.init_generated("hostkeys/hk");
    let mut lifecycle = Lifecycle::new();
    lifecycle.set("HOSTKEYCTL_ENROL_FUNCTION", Some(&arn));
    lifecycle.set("HOSTKEYCTL_ENROL_TRUST", Some("*.ec2.internal,ip-127-*,127.*"));
    // A misspelt setting is named, not ignored in silence.
    lifecycle.set("HOSTKEYCTL_ENROLL_TRUST", Some("10.1.*"));

    let endpoint = imds(&bed, compute);
    let env = [("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint.as_str())];
    let (code, log) = lifecycle.run(&bed, compute, &compute.address, &["compute"], &env);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("compute node") && log.contains("[hostkeyctl lifecycle] enrolled"),
        "{log}"
    );
    assert!(
        log.contains("WARNING: HOSTKEYCTL_ENROLL_TRUST in hostkeyctl.env is no setting of this step"),
        "{log}"
    );
    for kind in ["ed25519", "ecdsa", "rsa"] {
        let text = listed(&compute.ssh_dir.join(format!("ssh_host_{kind}_key-cert.pub")));
        assert_eq!(principals_listed(&text), names_of(&compute.address), "{kind}");
    }
    let root = lifecycle.root();
    let known = std::fs::read_to_string(root.join("etc/ssh/ssh_known_hosts")).unwrap();
    assert!(
        known.contains("@cert-authority *.ec2.internal,ip-127-*,127.* ecdsa-sha2-nistp256 "),
        "{known}"
    );
    let settings = std::fs::read_to_string(root.join("etc/default/hostkeyctl-enroll")).unwrap();
    assert!(
        settings.contains(&format!("HOSTKEYCTL_ENROL_FUNCTION={arn}\n")),
        "{settings}"
    );
    for unit in ["hostkeyctl-enroll.service", "hostkeyctl-enroll.timer"] {
        assert!(root.join("etc/systemd/system").join(unit).is_file(), "{unit}");
    }
    let calls = lifecycle.calls();
    assert!(
        calls.contains("systemctl enable --now hostkeyctl-enroll.timer"),
        "{calls}"
    );
    assert!(
        !calls.contains("hostkeyctl-install.timer"),
        "a compute node got the install timer: {calls}"
    );
    assert!(
        !root.join("etc/default/hostkeyctl").exists(),
        "a compute node got the set's settings"
    );

    // Again (the timer's work): a renewal, and no file rewritten.
    let (code, log) = lifecycle.run(&bed, compute, &compute.address, &["compute"], &env);
    assert_eq!(code, 0, "{log}");
    assert!(
        log.contains("[hostkeyctl lifecycle] enrolled") && !log.contains("wrote "),
        "{log}"
    );

    // A login node: the set, then the trust alone.
    let endpoint = imds(&bed, login);
    let env = [("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint.as_str())];
    let (code, log) = lifecycle.run(&bed, login, &login.address, &["login"], &env);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("host keys installed and verified"), "{log}");
    assert!(log.contains("\"login_node\": true"), "{log}");
    assert!(!login.ssh_dir.join("ssh_host_ed25519_key-cert.pub").exists(), "{log}");
    assert!(
        lifecycle
            .calls()
            .contains("systemctl enable --now hostkeyctl-install.timer")
    );

    // Settings that cannot work stop provisioning, before the binary.
    for (key, value, said) in [
        (
            "HOSTKEYCTL_ENROL_FUNCTION",
            "hostkeyctl-enrolment",
            "is not a Lambda function ARN",
        ),
        (
            "HOSTKEYCTL_ENROL_TRUST",
            "10.1.0.0/16",
            "is not the cluster's host patterns",
        ),
    ] {
        let mut bad = Lifecycle::new();
        bad.set("HOSTKEYCTL_ENROL_FUNCTION", Some(&arn));
        bad.set("HOSTKEYCTL_ENROL_TRUST", Some("*.ec2.internal"));
        bad.set(key, Some(value));
        let (code, log) = bad.run(&bed, compute, &compute.address, &["compute"], &env);
        assert_eq!(code, 1, "{log}");
        assert!(log.contains(said), "{log}");
        assert!(!bad.root().exists(), "{key}: something was installed");
    }
}
