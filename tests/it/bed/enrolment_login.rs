//! Login nodes that serve the canonical set gain a certificate like every
//! other node (docs/cluster-trust.md, "Login nodes"): for the set's keys,
//! each for its own names, through a rotation's overlap and promotion,
//! while users who know the set's plain keys see nothing change.

use crate::bed::enrolment::{
    PARALLELCLUSTER_SSH_CONFIG, base_config, cluster_bed, enroll, instance_of, invoke, listed, names_of, node_request,
    principals_listed,
};
use crate::bed::enrolment_cluster::all_pairs;
use crate::common::bed::{Node, TestBed, private_lines};
use crate::common::support::require;

/// The certificate files a run of enroll reports.
fn certificates(run: &crate::common::bed::Run) -> Vec<String> {
    let report = run.json();
    assert_eq!(report["login_node"], true, "{report}");
    let mut files: Vec<String> = report["certificates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect();
    files.sort();
    files
}

/// `ssh-keygen -l` of a key file's public half: its SHA-256 fingerprint.
fn fingerprint_of(path: &std::path::Path) -> String {
    let key = ssh_key::PublicKey::read_openssh_file(path).unwrap();
    key.fingerprint(ssh_key::HashAlg::Sha256).to_string()
}

/// The login node enrols: one certificate per key it holds, each for its
/// own names (AWS's), of the key beside which it lies; its keys unchanged.
fn enrol_login_node(bed: &TestBed, node: &Node, arn: &str, keys: usize) {
    let before = private_lines(&node.ssh_dir);
    let run = enroll(bed, node, arn);
    assert_eq!(run.code, 0, "{}: {}\n{}", node.name, run.stderr, run.stdout);
    let files = certificates(&run);
    assert_eq!(files.len(), keys, "{files:?}");
    for file in &files {
        assert!(file.ends_with("-enrolment-cert.pub"), "{file}");
        let text = listed(std::path::Path::new(file));
        assert_eq!(principals_listed(&text), names_of(&node.address), "{file}");
        let key = file.trim_end_matches("-enrolment-cert.pub");
        let subject = fingerprint_of(std::path::Path::new(&format!("{key}.pub")));
        assert!(text.contains(&subject), "{file} does not certify {key}: {text}");
    }
    assert_eq!(private_lines(&node.ssh_dir), before, "{}: its keys changed", node.name);
}

/// Two login nodes serving one set and a compute node: the login nodes
/// are certified on the set's keys, each for its own names; every node
/// reaches every other strictly by every name; install's next run keeps
/// the certificates; users who know the set's keys (or learn them on
/// first use) see the set, never a prompt; another key set with a login
/// node's identity document gets nothing signed. Through a rotation: the
/// overlap certifies both sets, the promotion needs no enrolment to keep
/// the logins working, and the next enrolment moves the binding on.
#[test]
fn login_nodes_serving_the_set_are_certified_for_their_own_names_through_a_rotation() {
    let (bed, runtime, arn) = cluster_bed(3, "", "ecdsa");
    let (compute, logins) = (&bed.state.nodes[0], &bed.state.nodes[1..]);
    let current = bed.init_generated("hostkeys/hp")["version_id"]
        .as_str()
        .unwrap()
        .to_owned();
    for node in logins {
        bed.install_on(node, &["--secret-id", "hostkeys/hp"]).ok();
    }
    base_config(compute);
    base_config(&logins[1]);
    std::fs::write(logins[0].ssh_dir.join("ssh_config"), PARALLELCLUSTER_SSH_CONFIG).unwrap();
    let run = enroll(&bed, compute, &arn);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for node in logins {
        enrol_login_node(&bed, node, &arn, 3);
        // The timer's next install: enrolment's certificates are not
        // foreign to it, and stay served.
        bed.install_on(node, &["--secret-id", "hostkeys/hp"]).ok();
    }
    let failed = all_pairs(&bed);
    assert!(failed.is_empty(), "{failed:#?}");
    users_see_the_set(&bed, logins);

    // Another key set with a login node's document: refused, nothing signed.
    let signed = bed.counts().get("kms:Sign").copied().unwrap_or(0);
    let instance = instance_of(&bed, &logins[0].address);
    let forged = node_request(&bed, compute, &instance, &arn, &[]);
    let event = serde_json::json!({"login": true, "request": forged["request"], "certify": []});
    let (failed, answer) = invoke(&bed, &runtime, &arn, &event);
    assert!(failed && answer.to_string().contains("proves none of"), "{answer}");
    let (failed, answer) = invoke(&bed, &runtime, &arn, &forged);
    assert!(
        failed && answer.to_string().contains("enrolled other host keys"),
        "{answer}"
    );
    assert_eq!(
        bed.counts().get("kms:Sign").copied().unwrap_or(0),
        signed,
        "a forgery was signed"
    );

    // The next set, staged as a rotation does, served beside the current.
    bed.init_generated("hostkeys/hp-next");
    let document = runtime.block_on(bed.secret_value("hostkeys/hp-next"));
    let next = runtime.block_on(bed.put_secret_value("hostkeys/hp", &document, "AWSPENDING"));
    for node in logins {
        let overlap = [
            "--secret-id",
            "hostkeys/hp",
            "--version-id",
            &current,
            "--next-version-id",
            &next,
        ];
        bed.install_on(node, &overlap).ok();
        enrol_login_node(&bed, node, &arn, 6);
    }
    let failed = all_pairs(&bed);
    assert!(failed.is_empty(), "during the overlap: {failed:#?}");
    // Promoted: the next set's certificates serve it, with no enrolment.
    for node in logins {
        bed.install_on(node, &["--secret-id", "hostkeys/hp", "--version-id", &next])
            .ok();
    }
    let failed = all_pairs(&bed);
    assert!(failed.is_empty(), "after the promotion: {failed:#?}");
    for node in logins {
        enrol_login_node(&bed, node, &arn, 3);
        let stale: Vec<_> = std::fs::read_dir(&node.ssh_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|f| f.starts_with("hostkeyctl_next_"))
            .collect();
        assert!(stale.is_empty(), "{}: {stale:?}", node.name);
    }
    let failed = all_pairs(&bed);
    assert!(failed.is_empty(), "after the renewal: {failed:#?}");
}

/// Users behind the load balancer: a strict client with the set's
/// known_hosts lines and no CA logs in to each login node with no
/// warning; a first-time client records the set's key.
fn users_see_the_set(bed: &TestBed, logins: &[Node]) {
    let set: Vec<String> = ["ed25519", "ecdsa", "rsa"]
        .iter()
        .map(|k| fingerprint_of(&logins[0].ssh_dir.join(format!("ssh_host_{k}_key.pub"))))
        .collect();
    for node in logins {
        let lines = bed
            .cli("known-hosts")
            .args(&["--secret-id", "hostkeys/hp", "--host", &node.address])
            .run();
        lines.ok();
        let known = bed.dir().join(format!("known_hosts.{}", node.name));
        std::fs::write(&known, &lines.stdout).unwrap();
        let first = bed.dir().join(format!("known_hosts.first.{}", node.name));
        std::fs::write(&first, "").unwrap();
        for (file, checking) in [(&known, "yes"), (&first, "accept-new")] {
            let out = std::process::Command::new(require("ssh"))
                .args(["-F", "/dev/null", "-i"])
                .arg(&bed.state.client_key)
                .args(["-o", "BatchMode=yes", "-o", "GlobalKnownHostsFile=/dev/null"])
                .arg("-o")
                .arg(format!("UserKnownHostsFile={}", file.display()))
                .arg("-o")
                .arg(format!("StrictHostKeyChecking={checking}"))
                .arg(format!("root@{}", node.address))
                .arg("true")
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && !said.contains("WARNING"),
                "{} ({checking}): {said}",
                node.name
            );
        }
        let recorded = std::fs::read_to_string(&first).unwrap();
        let key =
            ssh_key::PublicKey::from_openssh(recorded.split_whitespace().skip(1).collect::<Vec<_>>().join(" ").trim())
                .unwrap();
        let fp = key.fingerprint(ssh_key::HashAlg::Sha256).to_string();
        assert!(
            set.contains(&fp),
            "{}: a first-time client recorded {fp}, not a key of the set",
            node.name
        );
    }
}
