//! Enrolment's pieces on the bed (work in progress, issue 46): the
//! bindings' conditional writes against the emulator's DynamoDB.

use hostkeyctl::aws::dynamodb::DynamoBindings;
use hostkeyctl::enrolment::{Binding, Bindings};

use crate::common::bed::{BedOptions, TestBed};

/// One writer wins from a read; a writer holding a stale read, or a second
/// first enrolment, writes nothing.
#[test]
fn a_binding_is_written_only_over_what_was_read() {
    let bed = TestBed::start(BedOptions {
        nodes: 1,
        ..BedOptions::default()
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = runtime.block_on(bed.sdk_config(1));
    runtime.block_on(async {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        };
        aws_sdk_dynamodb::Client::new(&config)
            .create_table()
            .table_name("hostkeyctl-enrolment")
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("instance_id")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("instance_id")
                    .key_type(KeyType::Hash)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    });
    let bindings = DynamoBindings::new(&config, "hostkeyctl-enrolment");
    let first = Binding {
        fingerprints: vec!["SHA256:a".to_owned(), "SHA256:b".to_owned()],
        last_issued_at: 100,
    };
    let later = Binding {
        last_issued_at: 200,
        ..first.clone()
    };
    let other = Binding {
        fingerprints: vec!["SHA256:thief".to_owned()],
        last_issued_at: 150,
    };
    runtime.block_on(async {
        let id = "i-0000000000000c001";
        assert_eq!(bindings.get(id).await.unwrap(), None);
        assert!(bindings.put(id, &first, None).await.unwrap());
        // A second first enrolment (a thief racing the node) loses.
        assert!(!bindings.put(id, &other, None).await.unwrap());
        assert_eq!(bindings.get(id).await.unwrap(), Some(first.clone()));
        assert!(bindings.put(id, &later, Some(&first)).await.unwrap());
        // A writer that read `first` before `later` was written loses.
        assert!(!bindings.put(id, &other, Some(&first)).await.unwrap());
        assert_eq!(bindings.get(id).await.unwrap(), Some(later.clone()));
    });
}

/// The bindings table, as the bed (CloudFormation will make it).
fn create_table(runtime: &tokio::runtime::Runtime, config: &aws_config::SdkConfig, name: &str) {
    use aws_sdk_dynamodb::types::{AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType};
    runtime.block_on(async {
        aws_sdk_dynamodb::Client::new(config)
            .create_table()
            .table_name(name)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("instance_id")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("instance_id")
                    .key_type(KeyType::Hash)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    });
}

/// The signer function (`HOSTKEYCTL_FUNCTION=enrolment`), signing as
/// iam/enrolment.json, trusting the bed's identity key. Its ARN.
fn deploy_signer(bed: &TestBed) -> String {
    let (dir, bootstrap) = crate::bed::scheduled::function_task(bed, "signer-task");
    let key = bed.control("POST", "/_bed/iid-key", &serde_json::json!({}));
    let mut env: serde_json::Map<String, serde_json::Value> = bed
        .aws_env(crate::common::bed::Role::Enrolment)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), serde_json::Value::String(v)))
        .collect();
    env.insert("HOME".to_owned(), serde_json::json!(dir.display().to_string()));
    let variables = serde_json::json!({
        "HOSTKEYCTL_FUNCTION": "enrolment",
        "HOSTKEYCTL_ENROL_CLUSTER": bed.state.hyperpod.as_ref().unwrap().cluster,
        "HOSTKEYCTL_ENROL_CA_SECRET_ID": "hostkeyctl-ca/hp",
        "HOSTKEYCTL_ENROL_TABLE": "hostkeyctl-enrolment",
        "HOSTKEYCTL_ENROL_IID_KEYS": format!("{}={}", key["region"].as_str().unwrap(), key["spki"].as_str().unwrap()),
    });
    let arn = format!(
        "arn:aws:lambda:{}:123456789012:function:hostkeyctl-enrolment",
        bed.state.region
    );
    bed.control(
        "POST",
        "/_bed/lambda/register",
        &serde_json::json!({"arn": arn, "bootstrap": bootstrap, "variables": variables, "env": env, "step_timeout": 60}),
    );
    arn
}

/// What node `node` sends: its own keys' proofs over its identity document.
fn node_request(bed: &TestBed, node: &crate::common::bed::Node, audience: &str, at: i64) -> serde_json::Value {
    let hyperpod = bed.state.hyperpod.as_ref().unwrap();
    let instance = hyperpod
        .nodes
        .iter()
        .find(|(_, ip)| **ip == node.address)
        .map(|(id, _)| id.clone())
        .unwrap();
    let iid = bed.control(
        "POST",
        "/_bed/hyperpod/iid",
        &serde_json::json!({"cluster": hyperpod.cluster, "instance_id": instance}),
    );
    let keys: Vec<ssh_key::PrivateKey> = ["ed25519", "ecdsa", "rsa"]
        .iter()
        .map(|k| ssh_key::PrivateKey::read_openssh_file(node.ssh_dir.join(format!("ssh_host_{k}_key"))).unwrap())
        .collect();
    let request = hostkeyctl::enrolment::proof::request(
        iid["document"].as_str().unwrap(),
        iid["signature"].as_str().unwrap(),
        &keys,
        at,
        audience,
    )
    .unwrap();
    serde_json::json!({ "request": request, "asked": [] })
}

/// Invokes the signer as the bed: (function error?, payload).
fn invoke(
    bed: &TestBed,
    runtime: &tokio::runtime::Runtime,
    arn: &str,
    event: &serde_json::Value,
) -> (bool, serde_json::Value) {
    runtime.block_on(async {
        let out = aws_sdk_lambda::Client::new(&bed.sdk_config_as(crate::common::bed::Role::Node, 1).await)
            .invoke()
            .function_name(arn)
            .payload(aws_sdk_lambda::primitives::Blob::new(event.to_string()))
            .send()
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(out.payload().unwrap().as_ref()).unwrap();
        (out.function_error().is_some(), body)
    })
}

/// A HyperPod node's own keys, certified by the KMS CA for the names
/// AWS reports for it (checked by real `ssh-keygen -L`); the same request
/// again is a replay and signs nothing.
#[test]
fn the_signer_certifies_a_nodes_own_keys_for_awss_names_and_refuses_a_replay() {
    let bed = TestBed::start(BedOptions {
        nodes: 1,
        ..BedOptions::default()
    });
    bed.cli("ca init")
        .args(&["--ca-secret-id", "hostkeyctl-ca/hp", "--kms"])
        .run()
        .ok();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = runtime.block_on(bed.sdk_config(1));
    create_table(&runtime, &config, "hostkeyctl-enrolment");
    let arn = deploy_signer(&bed);
    let node = &bed.state.nodes[0];
    let now = i64::try_from(hostkeyctl::certificate::now_unix()).unwrap();
    let event = node_request(&bed, node, &arn, now);
    let (failed, answer) = invoke(&bed, &runtime, &arn, &event);
    assert!(!failed, "{answer}");
    let dns = format!("ip-{}.ec2.internal", node.address.replace('.', "-"));
    let short = dns.split('.').next().unwrap().to_owned();
    let certificates = answer["certificates"].as_array().unwrap();
    assert_eq!(certificates.len(), 3, "{answer}");
    for (i, line) in certificates.iter().enumerate() {
        let file = bed.dir().join(format!("enrolled-{i}-cert.pub"));
        std::fs::write(&file, line.as_str().unwrap()).unwrap();
        let listed = std::process::Command::new(crate::common::support::require("ssh-keygen"))
            .arg("-L")
            .arg("-f")
            .arg(&file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&listed.stdout);
        assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
        for name in [&dns, &short, &node.address] {
            assert!(text.contains(&format!("\n                {name}\n")), "{name}: {text}");
        }
    }
    let (failed, answer) = invoke(&bed, &runtime, &arn, &event);
    assert!(failed && answer.to_string().contains("a replay"), "{answer}");
}

/// A bed with a KMS CA, the bindings table and the signer; its ARN.
fn cluster_bed(nodes: usize) -> (TestBed, tokio::runtime::Runtime, String) {
    let bed = TestBed::start(BedOptions {
        nodes,
        ..BedOptions::default()
    });
    bed.cli("ca init")
        .args(&["--ca-secret-id", "hostkeyctl-ca/hp", "--kms"])
        .run()
        .ok();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = runtime.block_on(bed.sdk_config(1));
    create_table(&runtime, &config, "hostkeyctl-enrolment");
    let arn = deploy_signer(&bed);
    (bed, runtime, arn)
}

/// The instance id HyperPod gives the node at `address`.
fn instance_of(bed: &TestBed, address: &str) -> String {
    let hyperpod = bed.state.hyperpod.as_ref().unwrap();
    hyperpod.nodes.iter().find(|(_, ip)| *ip == address).unwrap().0.clone()
}

/// The private DNS name HyperPod reports for an address.
fn dns_of(address: &str) -> String {
    format!("ip-{}.ec2.internal", address.replace('.', "-"))
}

/// `hostkeyctl enroll` run on `node` (its environment, its IMDS, its own
/// /etc/ssh as both sshd's and the client's directory).
fn enroll(bed: &TestBed, node: &crate::common::bed::Node, arn: &str) -> crate::common::bed::Run {
    enroll_as(bed, node, arn, &instance_of(bed, &node.address))
}

/// [`enroll`] for the node that is now instance `instance`.
fn enroll_as(bed: &TestBed, node: &crate::common::bed::Node, arn: &str, instance: &str) -> crate::common::bed::Run {
    let hyperpod = bed.state.hyperpod.as_ref().unwrap();
    let imds = bed.control(
        "POST",
        "/_bed/hyperpod/imds",
        &serde_json::json!({"cluster": hyperpod.cluster, "instance_id": instance}),
    );
    let env = [(
        "AWS_EC2_METADATA_SERVICE_ENDPOINT".to_owned(),
        imds["endpoint"].as_str().unwrap().to_owned(),
    )];
    let dir = node.ssh_dir.display().to_string();
    // The node build, as the node role: its one grant on the signer.
    bed.node_run(
        node,
        &[
            "enroll",
            "--function",
            arn,
            "--ssh-dir",
            &dir,
            "--client-dir",
            &dir,
            "--trust",
            "*.ec2.internal",
            "--trust",
            "127.*",
            "--output",
            "json",
        ],
        &env,
    )
}

/// The ssh_config a node's users have: enroll's drop-in, and names that
/// resolve (the bed has no DNS: each name's address, as the VPC's DNS).
fn client_config(bed: &TestBed, node: &crate::common::bed::Node) -> std::path::PathBuf {
    let mut text = format!("Include {}/ssh_config.d/*.conf\n", node.ssh_dir.display());
    for other in &bed.state.nodes {
        text.push_str(&format!(
            "Host {}\n    Hostname {}\n",
            dns_of(&other.address),
            other.address
        ));
    }
    let path = node.ssh_dir.join("ssh_config.users");
    std::fs::write(&path, text).unwrap();
    path
}

/// `hostkeyctl enroll` on a node: its identity from its IMDS (IMDSv2), its
/// own keys' proofs, the signer function; a certificate beside each key
/// that `ssh-keygen -L` verifies. The node's key files are unchanged; a
/// client with enroll's trust alone logs in by name and by address, and a
/// strict client without it is refused.
#[test]
fn enroll_writes_a_certificate_beside_each_of_the_nodes_own_keys() {
    let (bed, _runtime, arn) = cluster_bed(1);
    let node = &bed.state.nodes[0];
    let keys_before = crate::common::bed::private_lines(&node.ssh_dir);
    let run = enroll(&bed, node, &arn);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.stdout);
    let report = run.json();
    assert_eq!(
        report["instance_id"],
        instance_of(&bed, &node.address).as_str(),
        "{report}"
    );
    for kind in ["ed25519", "ecdsa", "rsa"] {
        let listed = std::process::Command::new(crate::common::support::require("ssh-keygen"))
            .arg("-L")
            .arg("-f")
            .arg(node.ssh_dir.join(format!("ssh_host_{kind}_key-cert.pub")))
            .output()
            .unwrap();
        assert!(
            listed.status.success(),
            "{kind}: {}",
            String::from_utf8_lossy(&listed.stderr)
        );
        assert!(
            String::from_utf8_lossy(&listed.stdout).contains(&node.address),
            "{kind}"
        );
    }
    assert_eq!(crate::common::bed::private_lines(&node.ssh_dir), keys_before);
    let dns = dns_of(&node.address);
    let bare = bed.dir().join("ssh_config.bare");
    std::fs::write(
        &bare,
        format!(
            "Host {dns}\n    Hostname {}\n    StrictHostKeyChecking yes\n",
            node.address
        ),
    )
    .unwrap();
    let config = client_config(&bed, node);
    for (file, works) in [(&bare, false), (&config, true)] {
        for target in [dns.as_str(), node.address.as_str()] {
            let out = login(bed.state.client_key.as_path(), file, target);
            let said = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.success() && !said.contains("WARNING"),
                works,
                "{target}: {said}"
            );
        }
    }
}

/// Six nodes, each with its own keys, enrolled: from every node to every
/// other, by name and by address, strict (30 ordered pairs x 2): every
/// login succeeds with no warning.
#[test]
fn six_enrolled_nodes_reach_each_other_strictly_by_name_and_address() {
    let (bed, _runtime, arn) = cluster_bed(6);
    for node in &bed.state.nodes {
        let run = enroll(&bed, node, &arn);
        assert_eq!(run.code, 0, "{}: {}", node.name, run.stderr);
    }
    let failed = all_pairs(&bed);
    assert!(failed.is_empty(), "{failed:#?}");
    replace_a_node(&bed, &arn);
    // The shipped policies were enough: the signer and the nodes were never refused.
    let usage = bed.iam_usage();
    for user in ["hostkeyctl-enrolment", "hostkeyctl-node"] {
        assert!(usage["denied"].get(user).is_none(), "{user} was refused: {usage}");
    }
    assert!(
        usage["allowed"]["hostkeyctl-enrolment"]["kms:Sign"].as_u64() >= Some(21),
        "{usage}"
    );
}

/// HyperPod replaces the last node: a new instance at the same address,
/// with new keys and nothing of hostkeyctl's. Before its enrolment every
/// other node refuses it (strict, batch: never a prompt); after it, the 60
/// logins succeed again, and no other node's files changed.
fn replace_a_node(bed: &TestBed, arn: &str) {
    let node = bed.state.nodes.last().unwrap();
    let others: Vec<_> = bed.state.nodes.iter().filter(|n| n.address != node.address).collect();
    let before: Vec<_> = others
        .iter()
        .map(|n| crate::common::bed::snapshot(&n.ssh_dir))
        .collect();
    for entry in std::fs::read_dir(&node.ssh_dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("ssh_host_") || name.starts_with("ssh_known_hosts") {
            std::fs::remove_file(&path).unwrap();
        }
    }
    for dir in ["sshd_config.d", "ssh_config.d"] {
        let _ = std::fs::remove_dir_all(node.ssh_dir.join(dir));
        std::fs::create_dir_all(node.ssh_dir.join(dir)).unwrap();
    }
    for kind in ["ed25519", "ecdsa", "rsa"] {
        let status = std::process::Command::new(crate::common::support::require("ssh-keygen"))
            .args(["-q", "-t", kind, "-N", ""])
            .arg("-f")
            .arg(node.ssh_dir.join(format!("ssh_host_{kind}_key")))
            .status()
            .unwrap();
        assert!(status.success());
    }
    let reload = node.env.get("HOSTKEYCTL_RELOAD_COMMAND").unwrap();
    assert!(
        std::process::Command::new("sh")
            .args(["-c", reload])
            .status()
            .unwrap()
            .success()
    );
    let successor = "i-0a0000000000fffff".to_owned();
    bed.control(
        "POST",
        "/_bed/hyperpod/replace",
        &serde_json::json!({
            "cluster": bed.state.hyperpod.as_ref().unwrap().cluster,
            "instance_id": instance_of(bed, &node.address),
            "successor": successor,
            "address": node.address,
        }),
    );
    let new_key = ssh_key::PublicKey::read_openssh_file(node.ssh_dir.join("ssh_host_ed25519_key.pub"))
        .unwrap()
        .fingerprint(ssh_key::HashAlg::Sha256)
        .to_string();
    crate::common::bed::wait_until("sshd serves the new keys", std::time::Duration::from_secs(10), || {
        crate::common::bed::keyscan(&node.address, 22, "ssh-ed25519").as_deref() == Some(new_key.as_str())
    });
    for from in &others {
        let out = login(
            bed.state.client_key.as_path(),
            &client_config(bed, from),
            &dns_of(&node.address),
        );
        assert!(
            !out.status.success(),
            "{} accepted the replaced node before its enrolment",
            from.name
        );
    }
    let run = enroll_as(bed, node, arn, &successor);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let failed = all_pairs(bed);
    assert!(failed.is_empty(), "after the replacement: {failed:#?}");
    let after: Vec<_> = others
        .iter()
        .map(|n| crate::common::bed::snapshot(&n.ssh_dir))
        .collect();
    assert_eq!(before, after, "another node's files changed");
}

/// Every ordered pair of distinct nodes, by name and by address, from the
/// first node's users' config: the failures (pair, stderr).
fn all_pairs(bed: &TestBed) -> Vec<String> {
    let mut failed = Vec::new();
    for from in &bed.state.nodes {
        let config = client_config(bed, from);
        for to in bed.state.nodes.iter().filter(|n| n.address != from.address) {
            for target in [dns_of(&to.address), to.address.clone()] {
                let out = login(bed.state.client_key.as_path(), &config, &target);
                let said = String::from_utf8_lossy(&out.stderr).into_owned();
                if !out.status.success() || said.contains("WARNING") {
                    failed.push(format!("{} -> {target}: {said}", from.name));
                }
            }
        }
    }
    failed
}

/// A strict, batch `ssh root@target true` with `config` and no user
/// known_hosts.
fn login(key: &std::path::Path, config: &std::path::Path, target: &str) -> std::process::Output {
    std::process::Command::new(crate::common::support::require("ssh"))
        .arg("-F")
        .arg(config)
        .arg("-i")
        .arg(key)
        .args([
            "-o",
            "BatchMode=yes",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "ConnectTimeout=5",
        ])
        .arg(format!("root@{target}"))
        .arg("true")
        .output()
        .unwrap()
}
