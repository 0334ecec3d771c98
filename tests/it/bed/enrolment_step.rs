//! The HyperPod lifecycle step with enrolment (`HOSTKEYCTL_ENROL_FUNCTION`
//! and `HOSTKEYCTL_ENROL_TRUST` in hostkeyctl.env): a compute node enrols
//! and gets the renewal timer, and no canonical set; a login node installs
//! the set and takes the cluster's trust alone; bad settings stop
//! provisioning before anything is installed (docs/bootstrap.md,
//! "Enrolment on every node type").

use crate::bed::enrolment::{cluster_bed, instance_of, listed, names_of, principals_listed};
use crate::bed::lifecycle::Lifecycle;
use crate::common::bed::{Node, SECRET, TestBed};

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
    bed.init_generated(SECRET);
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

    a_login_node_gets_its_listener(&bed, &mut lifecycle, login);

    // Settings that cannot work stop provisioning, before the binary.
    for (key, value, said) in [
        (
            "HOSTKEYCTL_ENROL_FUNCTION",
            crate::bed::enrolment::TABLE,
            "is not a Lambda function ARN",
        ),
        (
            "HOSTKEYCTL_ENROL_TRUST",
            "10.1.0.0/16",
            "is not the cluster's host patterns",
        ),
        (
            "HOSTKEYCTL_ENROL_CLUSTER_PORT",
            "22",
            "is not a port of its own for the cluster",
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

/// The step on a login node with the listener's settings: the set, and its
/// own keys certified on its listener for the cluster, run by systemd (the
/// recording stand-in here); the settings kept for the timer.
fn a_login_node_gets_its_listener(bed: &TestBed, lifecycle: &mut Lifecycle, login: &Node) {
    // A login node: the set, and its own keys certified on its listener
    // for the cluster, run by systemd (the recording stand-in here).
    lifecycle.set("HOSTKEYCTL_ENROL_CLUSTER_PORT", Some("2222"));
    lifecycle.set("HOSTKEYCTL_ENROL_LOGIN_HOSTS", Some(&login.address));
    let endpoint = imds(bed, login);
    let env = [
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint.as_str()),
        ("HOSTKEYCTL_ENROL_LISTENER_SERVICE", "systemd"),
    ];
    let (code, log) = lifecycle.run(bed, login, &login.address, &["login"], &env);
    assert_eq!(code, 0, "{log}");
    assert!(log.contains("host keys installed and verified"), "{log}");
    assert!(log.contains("\"login_node\": true"), "{log}");
    assert!(log.contains("\"cluster_listener_port\": 2222"), "{log}");
    assert!(!login.ssh_dir.join("ssh_host_ed25519_key-cert.pub").exists(), "{log}");
    let listener = login.ssh_dir.join("hostkeyctl-cluster");
    let text = listed(&listener.join("ssh_host_ed25519_key-cert.pub"));
    assert_eq!(principals_listed(&text), names_of(&login.address));
    let unit = listener.join("hostkeyctl-cluster-sshd.service");
    let calls = lifecycle.calls();
    for call in [
        "systemctl enable --now hostkeyctl-install.timer".to_owned(),
        format!("systemctl enable {}", unit.display()),
        "systemctl reload-or-restart hostkeyctl-cluster-sshd.service".to_owned(),
        // A start its conditions skipped would not count as one.
        "systemctl is-active --quiet hostkeyctl-cluster-sshd.service".to_owned(),
    ] {
        assert!(calls.contains(&call), "{call}: {calls}");
    }
    let unit_text = std::fs::read_to_string(&unit).unwrap();
    assert!(
        unit_text.contains(&format!(
            "ExecStart=/usr/sbin/sshd -D -f {}/sshd_config\n",
            listener.display()
        )),
        "{unit_text}"
    );
    let settings = std::fs::read_to_string(lifecycle.root().join("etc/default/hostkeyctl-enroll")).unwrap();
    assert!(
        settings.contains(&format!(
            "HOSTKEYCTL_ENROL_CLUSTER_PORT=2222\nHOSTKEYCTL_ENROL_LOGIN_HOSTS={}\n",
            login.address
        )),
        "{settings}"
    );
}
