//! Enrolment on the bed (docs/cluster-trust.md): the bindings' conditional
//! writes against the emulator's DynamoDB, the signer function refusing
//! forgeries with nothing signed, `hostkeyctl enroll` on a node and on a
//! login node that serves the canonical set. The six-node cluster is in
//! `enrolment_cluster`.

use hostkeyctl::aws::dynamodb::DynamoBindings;
use hostkeyctl::enrolment::{Binding, Bindings};

use crate::common::bed::{BedOptions, Node, Role, Run, TestBed, private_lines, snapshot};

/// The bindings table, named as the template names it for a stack
/// `hostkeyctl-my-cluster`: the name the policies in iam/ grant.
pub(crate) const TABLE: &str = "hostkeyctl-enrolment-hostkeyctl-my-cluster";
/// The signer's function name, likewise.
pub(crate) const SIGNER: &str = "hostkeyctl-enrolment-hostkeyctl-my-cluster";

/// `hostkeyctl enrolment <words> --table TABLE`, as the admin.
pub(crate) fn enrolment(bed: &TestBed, words: &str) -> Run {
    bed.cli(&format!("enrolment {words}")).args(&["--table", TABLE]).run()
}
use crate::common::support::require;

/// One writer wins from a read; a writer holding a stale read, or a second
/// first enrolment, writes nothing; nor does one that read before a
/// revocation.
#[test]
fn a_binding_is_written_only_over_what_was_read() {
    let bed = TestBed::start(BedOptions::nodes(1));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = runtime.block_on(bed.sdk_config(1));
    create_table(&runtime, &config, TABLE);
    let bindings = DynamoBindings::new(&config, TABLE);
    let first = Binding {
        fingerprints: vec!["SHA256:a".to_owned(), "SHA256:b".to_owned()],
        last_issued_at_ms: 100,
        host_keys: vec!["ssh-ed25519 KEY-A".to_owned(), "ecdsa-sha2-nistp256 KEY-B".to_owned()],
        ..Binding::default()
    };
    let later = Binding {
        last_issued_at_ms: 200,
        ..first.clone()
    };
    let other = Binding {
        fingerprints: vec!["SHA256:thief".to_owned()],
        last_issued_at_ms: 150,
        ..Binding::default()
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
        // An admin revokes it: an enrolment that read it before loses, and
        // the revoked keys are listed; an unknown instance is said so.
        use hostkeyctl::enrolment::admin::BindingsAdmin;
        assert!(bindings.revoke(id).await.unwrap());
        assert!(!bindings.revoke("i-0000000000000ffff").await.unwrap());
        let renewal = Binding {
            last_issued_at_ms: 300,
            ..later.clone()
        };
        assert!(!bindings.put(id, &renewal, Some(&later)).await.unwrap());
        assert!(bindings.get(id).await.unwrap().unwrap().revoked);
        // A write that read the binding before it became a claim does not
        // land over the claim.
        let other_id = "i-0000000000000c002";
        assert!(bindings.put(other_id, &first, None).await.unwrap());
        let claimed = Binding {
            claim: true,
            last_issued_at_ms: 100,
            ..first.clone()
        };
        assert!(bindings.put(other_id, &claimed, Some(&first)).await.unwrap());
        assert!(!bindings.put(other_id, &later, Some(&first)).await.unwrap());
        assert!(bindings.get(other_id).await.unwrap().unwrap().claim);
        assert_eq!(bindings.revoked_keys().await.unwrap(), vec![later.host_keys.clone()]);
        let listed = bindings.list().await.unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed[0].1.revoked && !listed[0].1.claim);
        assert!(listed[1].1.claim && !listed[1].1.revoked);
    });
}

/// The bindings table, as the bed (CloudFormation will make it).
pub(crate) fn create_table(runtime: &tokio::runtime::Runtime, config: &aws_config::SdkConfig, name: &str) {
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

/// The signer function (`HOSTKEYCTL_FUNCTION=enrolment`) of the `kind`
/// cluster `cluster`, signing as iam/enrolment.json, trusting the bed's
/// identity key in place of AWS's (explicitly: the bed's Region is one of
/// AWS's), with the template's reserved concurrency (10). Its ARN.
pub(crate) fn deploy_signer(bed: &TestBed, kind: &str, cluster: &str) -> String {
    deploy_signer_with(bed, kind, cluster, &serde_json::json!({}))
}

/// [`deploy_signer`] with `more` variables.
pub(crate) fn deploy_signer_with(bed: &TestBed, kind: &str, cluster: &str, more: &serde_json::Value) -> String {
    let key = bed.control("POST", "/_bed/iid-key", &serde_json::json!({}));
    let mut variables = serde_json::json!({
        "HOSTKEYCTL_FUNCTION": "enrolment",
        "HOSTKEYCTL_ENROL_CLUSTER": cluster,
        "HOSTKEYCTL_ENROL_CLUSTER_KIND": kind,
        "HOSTKEYCTL_ENROL_CA_SECRET_ID": "hostkeyctl-ca/hp",
        "HOSTKEYCTL_ENROL_TABLE": TABLE,
        "HOSTKEYCTL_ENROL_IID_KEYS_REPLACE": format!("{}={}", key["region"].as_str().unwrap(), key["spki"].as_str().unwrap()),
        // Revocations reach the next answer (production keeps them a
        // minute: enrolment_flood sets that).
        "HOSTKEYCTL_ENROL_CACHE_SECONDS": "0",
    });
    for (k, v) in more.as_object().unwrap() {
        variables[k] = v.clone();
    }
    let arn = format!("arn:aws:lambda:{}:123456789012:function:{SIGNER}", bed.state.region);
    let settings = serde_json::json!({"step_timeout": 60, "reserved_concurrency": 10});
    crate::bed::scheduled::register_function(bed, "signer-task", Role::Enrolment, &arn, variables, settings);
    arn
}

/// What a node sends: `keys_of`'s own keys' proofs over the identity
/// document of `instance`, asking for `asked`.
pub(crate) fn node_request(
    bed: &TestBed,
    keys_of: &Node,
    instance: &str,
    audience: &str,
    asked: &[&str],
) -> serde_json::Value {
    // Milliseconds, as a node's: two requests are never the same time.
    let at = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let mut event = node_request_at(bed, keys_of, instance, audience, at);
    event["asked"] = serde_json::json!(asked);
    event
}

/// [`node_request`] made at `at` (Unix milliseconds), asking for no name.
pub(crate) fn node_request_at(
    bed: &TestBed,
    keys_of: &Node,
    instance: &str,
    audience: &str,
    at: i64,
) -> serde_json::Value {
    let hyperpod = bed.state.hyperpod.as_ref().unwrap();
    let iid = bed.control(
        "POST",
        "/_bed/hyperpod/iid",
        &serde_json::json!({"cluster": hyperpod.cluster, "instance_id": instance}),
    );
    let keys: Vec<ssh_key::PrivateKey> = ["ed25519", "ecdsa", "rsa"]
        .iter()
        .map(|k| ssh_key::PrivateKey::read_openssh_file(keys_of.ssh_dir.join(format!("ssh_host_{k}_key"))).unwrap())
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

/// Invokes the signer as a node: (function error?, payload).
pub(crate) fn invoke(
    bed: &TestBed,
    runtime: &tokio::runtime::Runtime,
    arn: &str,
    event: &serde_json::Value,
) -> (bool, serde_json::Value) {
    runtime.block_on(async {
        let out = aws_sdk_lambda::Client::new(&bed.sdk_config_as(Role::Node, 1).await)
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

/// `ssh-keygen -L` of a certificate file: its text (it must list).
pub(crate) fn listed(file: &std::path::Path) -> String {
    let out = std::process::Command::new(require("ssh-keygen"))
        .arg("-L")
        .arg("-f")
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The principals `ssh-keygen -L` lists.
pub(crate) fn principals_listed(text: &str) -> Vec<String> {
    let after = text.split("Principals:").nth(1).unwrap_or_default();
    after
        .lines()
        .skip(1)
        .take_while(|l| l.starts_with("                "))
        .map(|l| l.trim().to_owned())
        .collect()
}

/// The names AWS reports for the node at `address`, as certified.
pub(crate) fn names_of(address: &str) -> Vec<String> {
    let dns = dns_of(address);
    let short = dns.split('.').next().unwrap().to_owned();
    vec![dns, short, address.to_owned()]
}

/// A bed of `nodes` HyperPod nodes in `groups`, with a KMS CA of
/// `algorithm`, the bindings table and the signer; its ARN.
pub(crate) fn cluster_bed(
    nodes: usize,
    groups: &'static str,
    algorithm: &str,
) -> (TestBed, tokio::runtime::Runtime, String) {
    cluster_bed_with(nodes, groups, algorithm, &serde_json::json!({}))
}

/// [`cluster_bed`], the signer with `more` variables.
pub(crate) fn cluster_bed_with(
    nodes: usize,
    groups: &'static str,
    algorithm: &str,
    more: &serde_json::Value,
) -> (TestBed, tokio::runtime::Runtime, String) {
    let bed = TestBed::start(BedOptions {
        nodes,
        hyperpod_groups: groups,
        ..BedOptions::default()
    });
    let cluster = bed.state.hyperpod.as_ref().unwrap().cluster.clone();
    let runtime = signer_parts(&bed, algorithm);
    let arn = deploy_signer_with(&bed, "hyperpod", &cluster, more);
    (bed, runtime, arn)
}

/// On `bed`: a KMS CA of `algorithm`, the bindings table, and the signer
/// for the cluster `cluster` of `kind`; a runtime, and the signer's ARN.
pub(crate) fn with_signer(
    bed: &TestBed,
    algorithm: &str,
    kind: &str,
    cluster: &str,
) -> (tokio::runtime::Runtime, String) {
    let runtime = signer_parts(bed, algorithm);
    let arn = deploy_signer(bed, kind, cluster);
    (runtime, arn)
}

/// A KMS CA of `algorithm` and the bindings table; a runtime.
fn signer_parts(bed: &TestBed, algorithm: &str) -> tokio::runtime::Runtime {
    bed.cli("ca init")
        .args(&["--ca-secret-id", "hostkeyctl-ca/hp", "--kms", "--algorithm", algorithm])
        .run()
        .ok();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = runtime.block_on(bed.sdk_config(1));
    create_table(&runtime, &config, TABLE);
    runtime
}

/// The instance id HyperPod gives the node at `address`.
pub(crate) fn instance_of(bed: &TestBed, address: &str) -> String {
    let hyperpod = bed.state.hyperpod.as_ref().unwrap();
    hyperpod.nodes.iter().find(|(_, ip)| *ip == address).unwrap().0.clone()
}

/// The private DNS name HyperPod reports for an address.
pub(crate) fn dns_of(address: &str) -> String {
    format!("ip-{}.ec2.internal", address.replace('.', "-"))
}

/// `hostkeyctl enroll` run on `node` as HyperPod's instance `instance`
/// ([`enroll_with`] that instance's IMDS).
pub(crate) fn enroll_as(bed: &TestBed, node: &Node, arn: &str, instance: &str) -> Run {
    enroll_with(bed, node, arn, &imds_of(bed, instance))
}

/// `hostkeyctl enroll` (the node build, as the cluster-node role: the
/// signer's Invoke alone) run on `node` with the IMDS at `imds`: its
/// environment, its own /etc/ssh as both sshd's and the client's
/// directory.
pub(crate) fn enroll_with(bed: &TestBed, node: &Node, arn: &str, imds: &str) -> Run {
    enroll_with_args(bed, node, arn, imds, &[])
}

/// [`enroll_with`], with `extra` arguments.
pub(crate) fn enroll_with_args(bed: &TestBed, node: &Node, arn: &str, imds: &str, extra: &[&str]) -> Run {
    let args = enroll_args(node, arn, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = bed.node_run(node, &args, &enroll_env(bed, imds));
    if run.code == 0 && run.json()["login_node"] == false {
        wait_for_certificate(node);
    }
    run
}

/// The environment of [`enroll_with`]: the cluster-node role's keys and
/// the IMDS at `imds`.
pub(crate) fn enroll_env(bed: &TestBed, imds: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = bed
        .aws_env(Role::ClusterNode)
        .into_iter()
        .filter(|(k, _)| k.starts_with("AWS_ACCESS_KEY_ID") || k.starts_with("AWS_SECRET_ACCESS_KEY"))
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    env.push(("AWS_EC2_METADATA_SERVICE_ENDPOINT".to_owned(), imds.to_owned()));
    env
}

/// The arguments of [`enroll_with`], and `extra`.
pub(crate) fn enroll_args(node: &Node, arn: &str, extra: &[&str]) -> Vec<String> {
    let dir = node.ssh_dir.display().to_string();
    let mut args: Vec<String> = [
        "enroll",
        "--function",
        arn,
        "--ssh-dir",
        &dir,
        "--client-dir",
        &dir,
        "--trust",
        "*.ec2.internal,ip-127-*,127.*",
        "--output",
        "json",
    ]
    .map(str::to_owned)
    .into();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    args
}

/// `enroll` returns once sshd was told to reload (SIGHUP): a login in the
/// next instant may meet the restarting listener. Waits for it to offer
/// the certificate, as a client next in line would.
pub(crate) fn wait_for_certificate(node: &Node) {
    crate::common::bed::wait_until(
        "sshd offers the certificate",
        std::time::Duration::from_secs(10),
        || {
            std::process::Command::new(require("ssh-keyscan"))
                .args(["-c", "-t", "ed25519", &node.address])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("-cert-v01@openssh.com"))
        },
    );
}

/// [`enroll_as`] the instance HyperPod reports at the node's address.
pub(crate) fn enroll(bed: &TestBed, node: &Node, arn: &str) -> Run {
    enroll_as(bed, node, arn, &instance_of(bed, &node.address))
}

/// The IMDS endpoint of HyperPod's instance `instance`.
pub(crate) fn imds_of(bed: &TestBed, instance: &str) -> String {
    let hyperpod = bed.state.hyperpod.as_ref().unwrap();
    let imds = bed.control(
        "POST",
        "/_bed/hyperpod/imds",
        &serde_json::json!({"cluster": hyperpod.cluster, "instance_id": instance}),
    );
    imds["endpoint"].as_str().unwrap().to_owned()
}

/// The ssh_config a node's users have: the node's `ssh_config` (as
/// `/etc/ssh/ssh_config`), and names that resolve (the bed has no DNS:
/// each name's address, as the VPC's DNS).
pub(crate) fn client_config(bed: &TestBed, node: &Node) -> std::path::PathBuf {
    let mut text = format!("Include {}/ssh_config\n", node.ssh_dir.display());
    for other in &bed.state.nodes {
        let names = names_of(&other.address);
        text.push_str(&format!(
            "Host {} {}\n    Hostname {}\n",
            names[0], names[1], other.address
        ));
    }
    let path = node.ssh_dir.join("ssh_config.users");
    std::fs::write(&path, text).unwrap();
    path
}

/// What HyperPod's base-config leaves on every node (its
/// `utils/ssh-to-compute.sh`, with `Match exec` true for every host where
/// it greps slurm.conf), under Ubuntu's `ssh_config`, which includes
/// `ssh_config.d/*.conf` at its top: no checking at all.
pub(crate) fn base_config(node: &Node) {
    std::fs::create_dir_all(node.ssh_dir.join("ssh_config.d")).unwrap();
    for (path, text) in base_config_files(node) {
        std::fs::write(path, text).unwrap();
    }
}

/// The files of [`base_config`], with their text.
pub(crate) fn base_config_files(node: &Node) -> [(std::path::PathBuf, String); 2] {
    let dir = node.ssh_dir.join("ssh_config.d");
    [
        (
            dir.join("initsmhp-ssh.conf"),
            "Match host * exec \"true\"\n    StrictHostKeyChecking no\n    HostbasedAuthentication no\n    CheckHostIP no\n    UserKnownHostsFile /dev/null\n".to_owned(),
        ),
        (
            node.ssh_dir.join("ssh_config"),
            format!("Include {}/*.conf\n\nHost *\n    SendEnv LANG LC_*\n", dir.display()),
        ),
    ]
}

/// What ParallelCluster's cookbook writes as `ssh_config`: no `Include`,
/// and a `Match exec` (its ssh_target_checker.sh: any VPC address) that
/// turns checking off.
pub(crate) const PARALLELCLUSTER_SSH_CONFIG: &str = "Host *\n  UseRoaming no\n  GssapiAuthentication yes\nMatch exec \"true\"\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n";

/// `ssh -G`'s StrictHostKeyChecking for `target` with `config`.
fn strictness(config: &std::path::Path, target: &str) -> String {
    let out = std::process::Command::new(require("ssh"))
        .arg("-G")
        .arg("-F")
        .arg(config)
        .arg(target)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("stricthostkeychecking ").map(str::to_owned))
        .unwrap_or_default()
}

/// `hostkeyctl enroll` on a node, with an RSA CA in KMS: a certificate
/// beside each of its own keys, for exactly AWS's names, signed with
/// `rsa-sha2-512`; the key files unchanged. A client with enroll's trust
/// alone logs in by every name, and a strict client without it is
/// refused. A login node whose keys `hostkeyctl install` manages keeps
/// the canonical set and its sshd untouched, claims its instance (another
/// key set with its identity document is refused), and gains the trust:
/// its users reach the enrolled node strictly, through the `ssh_config`
/// ParallelCluster writes (which turns checking off for every address).
#[test]
fn enroll_certifies_a_nodes_own_keys_and_a_login_node_gains_the_trust() {
    let (bed, runtime, arn) = cluster_bed(2, "", "rsa");
    let (node, login_node) = (&bed.state.nodes[0], &bed.state.nodes[1]);
    base_config(node);
    let keys_before = private_lines(&node.ssh_dir);
    let run = enroll(&bed, node, &arn);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.stdout);
    let report = run.json();
    assert_eq!(
        report["instance_id"],
        instance_of(&bed, &node.address).as_str(),
        "{report}"
    );
    assert_eq!(report["login_node"], false, "{report}");
    for kind in ["ed25519", "ecdsa", "rsa"] {
        let text = listed(&node.ssh_dir.join(format!("ssh_host_{kind}_key-cert.pub")));
        assert_eq!(principals_listed(&text), names_of(&node.address), "{kind}");
        assert!(text.contains("(using rsa-sha2-512)"), "{kind}: {text}");
    }
    assert_eq!(private_lines(&node.ssh_dir), keys_before);
    let bare = bed.dir().join("ssh_config.bare");
    let mut text = String::new();
    for name in names_of(&node.address) {
        text.push_str(&format!(
            "Host {name}\n    Hostname {}\n    StrictHostKeyChecking yes\n",
            node.address
        ));
    }
    std::fs::write(&bare, text).unwrap();
    let config = client_config(&bed, node);
    for (file, works) in [(&bare, false), (&config, true)] {
        for target in names_of(&node.address) {
            let out = login(bed.state.client_key.as_path(), file, &target);
            let said = String::from_utf8_lossy(&out.stderr);
            assert_eq!(
                out.status.success() && !said.contains("WARNING"),
                works,
                "{target}: {said}"
            );
        }
    }

    bed.init_generated("hostkeys/hp");
    bed.install_on(login_node, &["--secret-id", "hostkeys/hp"]).ok();
    std::fs::write(login_node.ssh_dir.join("ssh_config"), PARALLELCLUSTER_SSH_CONFIG).unwrap();
    let from_login = client_config(&bed, login_node);
    assert_eq!(strictness(&from_login, &node.address), "false");
    let keys_and_sshd = |dir: &std::path::Path| -> Vec<_> {
        snapshot(dir)
            .into_iter()
            .filter(|(name, ..)| name.starts_with("ssh_host_") || name == "sshd_config")
            .collect()
    };
    let served = keys_and_sshd(&login_node.ssh_dir);
    let run = enroll(&bed, login_node, &arn);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.stdout);
    assert_eq!(run.json()["login_node"], true, "{}", run.stdout);
    let after = keys_and_sshd(&login_node.ssh_dir);
    let drop_in = login_node.ssh_dir.join("sshd_config.d/50-hostkeyctl-enrolment.conf");
    assert!(!drop_in.exists(), "a login node's sshd got enrolment's drop-in");
    // It claimed its instance for no key: whoever holds its document gets
    // nothing for its names, with keys of their own or with the set's (L1:
    // any login node's role reads the set), and nothing is signed.
    let login_instance = instance_of(&bed, &login_node.address);
    let signed = bed.count("kms:Sign");
    for keys_of in [node, login_node] {
        let forged = node_request(&bed, keys_of, &login_instance, &arn, &[]);
        let (failed, answer) = invoke(&bed, &runtime, &arn, &forged);
        assert!(
            failed && answer.to_string().contains("took the cluster's trust alone"),
            "{answer}"
        );
    }
    assert_eq!(bed.count("kms:Sign"), signed);
    assert_eq!(after, served, "the login node's keys or sshd changed");
    for target in names_of(&node.address) {
        assert_eq!(strictness(&from_login, &target), "true", "{target}");
        let out = login(bed.state.client_key.as_path(), &from_login, &target);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !said.contains("WARNING"), "{target}: {said}");
    }
}

/// A strict, batch `ssh root@target true` with `config` and no user
/// known_hosts.
pub(crate) fn login(key: &std::path::Path, config: &std::path::Path, target: &str) -> std::process::Output {
    std::process::Command::new(require("ssh"))
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
