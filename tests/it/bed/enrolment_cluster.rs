//! A HyperPod cluster of six nodes (1 controller, 2 login, 3 compute),
//! each with its own keys, enrolled with a P-256 CA in KMS: every node
//! reaches every other strictly by each of its names; a replaced compute
//! node is refused until it enrols, and no other node changes
//! (docs/cluster-trust.md).

use crate::bed::enrolment::{
    base_config, client_config, enroll, enroll_as, enrolment, imds_of, instance_of, login, names_of,
};
use crate::common::bed::{Node, Role, TestBed, keyscan, served, snapshot, wait_until};
use crate::common::support::require;
use aws_sdk_sagemaker::operation::update_cluster_software::builders::UpdateClusterSoftwareFluentBuilder;
use aws_sdk_sagemaker::types::{
    CapacitySizeConfig, DeploymentConfiguration, NodeUnavailabilityType, RollingDeploymentPolicy,
    UpdateClusterSoftwareInstanceGroupSpecification,
};

/// Six nodes enrolled: from every node to every other, by private DNS
/// name, host name and address, strict (30 ordered pairs x 3): every
/// login succeeds with no warning. Then a compute node is replaced.
#[test]
fn six_enrolled_nodes_reach_each_other_strictly_by_every_name() {
    let groups = "controller-machine=1,login-group=2,worker-group=3";
    let (bed, _, arn) = crate::bed::enrolment::cluster_bed(6, groups, "ecdsa");
    let hyperpod = bed.state.hyperpod.as_ref().unwrap();
    let mut layout: Vec<&str> = bed
        .state
        .nodes
        .iter()
        .map(|n| hyperpod.groups[&instance_of(&bed, &n.address)].as_str())
        .collect();
    layout.dedup();
    assert_eq!(layout, ["controller-machine", "login-group", "worker-group"]);
    for node in &bed.state.nodes {
        base_config(node);
        let run = enroll(&bed, node, &arn);
        assert_eq!(run.code, 0, "{}: {}", node.name, run.stderr);
    }
    every_pair_logs_in(&bed, "all enrolled");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    a_rolling_patch_re_enrols_every_worker(&bed, &runtime, &arn);
    // Its 90 logins are the patched workers' too.
    replace_a_compute_node(&bed, &arn);
    // The shipped policies were enough: the signer and the nodes were never refused.
    let usage = bed.iam_usage();
    for user in ["hostkeyctl-enrolment", "hostkeyctl-cluster-node"] {
        assert!(usage["denied"].get(user).is_none(), "{user} was refused: {usage}");
    }
    assert!(
        usage["allowed"]["hostkeyctl-enrolment"]["kms:Sign"].as_u64() >= Some(21),
        "{usage}"
    );
    // The nodes enrolled with the signer's Invoke alone.
    assert!(
        usage["allowed"]["hostkeyctl-cluster-node"]["lambda:InvokeFunction"].as_u64() >= Some(7),
        "{usage}"
    );
}

/// HyperPod patches the worker group, one node at a time, through
/// `UpdateClusterSoftware` (the root volume replaced, the lifecycle
/// scripts run again): each node comes back under its instance id with new
/// host keys and nothing of hostkeyctl's, on a new image, and its
/// lifecycle step's `enroll` is accepted with no admin step. A user of a
/// patched node (its identity document, other keys) then gets nothing.
fn a_rolling_patch_re_enrols_every_worker(bed: &TestBed, runtime: &tokio::runtime::Runtime, arn: &str) {
    let hyperpod = bed.state.hyperpod.as_ref().unwrap();
    let workers: Vec<&Node> = bed
        .state
        .nodes
        .iter()
        .filter(|n| hyperpod.groups[&instance_of(bed, &n.address)] == "worker-group")
        .collect();
    assert_eq!(workers.len(), 3);
    // The first node's patch waits for the test, which meanwhile asks for
    // a second update.
    let gate = tempfile::tempdir().unwrap();
    let release = gate.path().join("release");
    let before = patch_steps(bed, &workers, arn, &release);
    let config = runtime.block_on(bed.sdk_config_as(Role::BedRoot, 1));
    let sagemaker = aws_sdk_sagemaker::Client::new(&config);
    let update = one_at_a_time(&sagemaker, &hyperpod.cluster);
    // SageMaker's refusals (its API reference, UpdateClusterSoftware's errors).
    let refused = |call: UpdateClusterSoftwareFluentBuilder| {
        let error = runtime.block_on(call.send()).unwrap_err();
        error
            .as_service_error()
            .map(|e| e.meta().code().unwrap_or_default().to_owned())
    };
    let elsewhere = update.clone().cluster_name("no-such-cluster");
    assert_eq!(refused(elsewhere).as_deref(), Some("ResourceNotFound"));
    let unknown = update.clone().instance_groups(
        UpdateClusterSoftwareInstanceGroupSpecification::builder()
            .instance_group_name("no-such-group")
            .build(),
    );
    assert_eq!(refused(unknown).as_deref(), Some("ValidationException"));
    runtime.block_on(update.clone().send()).unwrap();
    assert_eq!(refused(update).as_deref(), Some("ConflictException"));
    std::fs::write(&release, "").unwrap();
    let done = || {
        let cluster = runtime.block_on(sagemaker.describe_cluster().cluster_name(&hyperpod.cluster).send());
        cluster.unwrap().cluster_status().map(|s| s.as_str()) == Some("InService")
    };
    wait_until("the patch ends", std::time::Duration::from_secs(120), done);
    patched_one_at_a_time(bed);
    for (node, keys) in workers.iter().zip(&before) {
        let instance = instance_of(bed, &node.address);
        let call = sagemaker
            .describe_cluster_node()
            .cluster_name(&hyperpod.cluster)
            .node_id(&instance);
        let described = runtime.block_on(call.send()).unwrap();
        let details = described.node_details().unwrap();
        let status = details.instance_status().unwrap().status();
        assert_eq!(status.map(|s| s.as_str()), Some("Running"));
        assert_eq!(details.current_image_id(), Some("ami-0bed000000000002"));
        crate::bed::enrolment::wait_for_certificate(node);
        assert_ne!(&served(node), keys, "{}: the patch kept its keys", node.name);
    }
    let patched = instance_of(bed, &workers[0].address);
    let thief = crate::bed::enrolment::node_request(bed, &bed.state.nodes[0], &patched, arn, &[]);
    let (failed, answer) = crate::bed::enrolment::invoke(bed, runtime, arn, &thief);
    assert!(
        failed && answer.to_string().contains("enrolled other host keys"),
        "{answer}"
    );
}

/// Tells the emulator what a patch runs on each worker: its root volume
/// replaced (new keys, the image's ssh configuration; the first waits for
/// `release` before) and its lifecycle step's `enroll`. The keys each
/// served before.
fn patch_steps(bed: &TestBed, workers: &[&Node], arn: &str, release: &std::path::Path) -> Vec<Vec<Option<String>>> {
    let wait = format!("while [ ! -e {} ]; do sleep 0.1; done; ", release.display());
    let mut before = Vec::new();
    for (i, node) in workers.iter().enumerate() {
        let instance = instance_of(bed, &node.address);
        let enroll = crate::bed::enrolment::enroll_args(node, arn, &[]);
        let enroll: Vec<&str> = enroll.iter().map(String::as_str).collect();
        let env = crate::bed::enrolment::enroll_env(bed, &imds_of(bed, &instance));
        let gate = if i == 0 { wait.as_str() } else { "" };
        let body = serde_json::json!({
            "cluster": bed.state.hyperpod.as_ref().unwrap().cluster,
            "instance_id": instance,
            "root_volume": format!("{gate}{} && {}", new_instance_script(node), image_config_script(node)),
            "on_create": bed.node_script(node, &enroll, &env),
        });
        bed.control("POST", "/_bed/hyperpod/node-steps", &body);
        before.push(served(node));
    }
    before
}

/// `UpdateClusterSoftware` of the worker group, one node at a time.
fn one_at_a_time(sagemaker: &aws_sdk_sagemaker::Client, cluster: &str) -> UpdateClusterSoftwareFluentBuilder {
    let policy = RollingDeploymentPolicy::builder()
        .maximum_batch_size(
            CapacitySizeConfig::builder()
                .r#type(NodeUnavailabilityType::InstanceCount)
                .value(1)
                .build(),
        )
        .build();
    sagemaker
        .update_cluster_software()
        .cluster_name(cluster)
        .instance_groups(
            UpdateClusterSoftwareInstanceGroupSpecification::builder()
                .instance_group_name("worker-group")
                .build(),
        )
        .deployment_config(
            DeploymentConfiguration::builder()
                .rolling_update_policy(policy)
                .wait_interval_in_seconds(0)
                .build(),
        )
}

/// The emulator's record of the patch: each worker's step (new keys, its
/// enroll) succeeded, one batch after another.
fn patched_one_at_a_time(bed: &TestBed) {
    let patches = bed.control("GET", "/_bed/hyperpod/patches", &serde_json::json!({}));
    let patches = patches.as_array().unwrap();
    assert_eq!(patches.len(), 3, "{patches:#?}");
    for (i, patch) in patches.iter().enumerate() {
        assert_eq!(patch["status"], "Running", "{patches:#?}");
        assert_eq!(patch["batch"], i, "{patches:#?}");
        if i > 0 {
            let after = patches[i - 1]["ended"].as_f64() <= patch["started"].as_f64();
            assert!(after, "{patches:#?}");
        }
    }
}

/// HyperPod replaces the last compute node: a new instance at the same
/// address, with new keys and nothing of hostkeyctl's. Before its
/// enrolment every other node refuses it (strict, batch: never a prompt);
/// after it, the 90 logins succeed again, and no other node's files
/// changed.
fn replace_a_compute_node(bed: &TestBed, arn: &str) {
    let node = bed.state.nodes.last().unwrap();
    let old = instance_of(bed, &node.address);
    assert_eq!(bed.state.hyperpod.as_ref().unwrap().groups[&old], "worker-group");
    let others: Vec<&Node> = bed.state.nodes.iter().filter(|n| n.address != node.address).collect();
    let before: Vec<_> = others.iter().map(|n| snapshot(&n.ssh_dir)).collect();
    new_keys_and_nothing_else(node);
    base_config(node);
    let successor = "i-0a0000000000fffff".to_owned();
    bed.control(
        "POST",
        "/_bed/hyperpod/replace",
        &serde_json::json!({
            "cluster": bed.state.hyperpod.as_ref().unwrap().cluster,
            "instance_id": old,
            "successor": successor,
            "address": node.address,
        }),
    );
    let new_key = ssh_key::PublicKey::read_openssh_file(node.ssh_dir.join("ssh_host_ed25519_key.pub"))
        .unwrap()
        .fingerprint(ssh_key::HashAlg::Sha256)
        .to_string();
    wait_until("sshd serves the new keys", std::time::Duration::from_secs(10), || {
        keyscan(&node.address, 22, "ssh-ed25519").as_deref() == Some(new_key.as_str())
    });
    for from in &others {
        for target in names_of(&node.address) {
            let out = login(bed.state.client_key.as_path(), &client_config(bed, from), &target);
            assert!(
                !out.status.success(),
                "{} accepted the replaced node at {target} before its enrolment",
                from.name
            );
        }
    }
    let run = enroll_as(bed, node, arn, &successor);
    assert_eq!(run.code, 0, "{}", run.stderr);
    every_pair_logs_in(bed, "after the replacement");
    let after: Vec<_> = others.iter().map(|n| snapshot(&n.ssh_dir)).collect();
    assert_eq!(before, after, "another node's files changed");
}

/// The node as a new instance: new host keys, none of hostkeyctl's files,
/// sshd reloaded onto them.
fn new_keys_and_nothing_else(node: &Node) {
    let status = std::process::Command::new("sh")
        .args(["-c", &new_instance_script(node)])
        .status()
        .unwrap();
    assert!(status.success());
}

/// [`new_keys_and_nothing_else`] as one `sh` command line.
fn new_instance_script(node: &Node) -> String {
    let quote = |word: &str| shlex::try_quote(word).unwrap().into_owned();
    format!(
        "cd {dir} && rm -f ssh_host_* ssh_known_hosts* ssh_config && rm -rf sshd_config.d ssh_config.d \
         && mkdir sshd_config.d ssh_config.d \
         && for kind in ed25519 ecdsa rsa; do {keygen} -q -t $kind -N '' -f ssh_host_${{kind}}_key || exit 1; done \
         && sh -c {reload}",
        dir = quote(&node.ssh_dir.display().to_string()),
        keygen = quote(&require("ssh-keygen").display().to_string()),
        reload = quote(node.env.get("HOSTKEYCTL_RELOAD_COMMAND").unwrap()),
    )
}

/// What the image's root volume holds of ssh's configuration
/// ([`crate::bed::enrolment::base_config`]), as one `sh` command line.
fn image_config_script(node: &Node) -> String {
    let quote = |word: &str| shlex::try_quote(word).unwrap().into_owned();
    let files = crate::bed::enrolment::base_config_files(node);
    let writes: Vec<String> = files
        .iter()
        .map(|(path, text)| format!("printf %s {} > {}", quote(text), quote(&path.display().to_string())))
        .collect();
    writes.join(" && ")
}

/// Every ordered pair of distinct nodes logs in strictly, by each of the
/// target's names, from the source node's users' config; a failure says
/// `when` and lists each pair that did not, with ssh's stderr.
#[track_caller]
pub(crate) fn every_pair_logs_in(bed: &TestBed, when: &str) {
    let nodes: Vec<&Node> = bed.state.nodes.iter().collect();
    let failed = pairs(bed, &nodes, &nodes);
    assert!(failed.is_empty(), "{when}: {failed:#?}");
}

/// The logins from each of `from` to each of `to`, as
/// [`every_pair_logs_in`] makes them: the failures (pair, stderr).
pub(crate) fn pairs(bed: &TestBed, from: &[&Node], to: &[&Node]) -> Vec<String> {
    let mut failed = Vec::new();
    for from in from {
        let config = client_config(bed, from);
        for to in to.iter().filter(|n| n.address != from.address) {
            for target in names_of(&to.address) {
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

/// An admin revokes an enrolled node (`hostkeyctl enrolment revoke`, as
/// the admin role): its next enrolment is refused, every other node lists
/// its keys as `@revoked` at its renewal, and from then on they refuse
/// it although its certificates are still valid; the others still reach
/// each other. An instance with no binding is named, exit 3.
#[test]
fn a_revoked_node_is_refused_by_the_others_after_their_renewal() {
    let (bed, _runtime, arn) = crate::bed::enrolment::cluster_bed(3, "", "ed25519");
    for node in &bed.state.nodes {
        let run = enroll(&bed, node, &arn);
        assert_eq!(run.code, 0, "{}: {}", node.name, run.stderr);
    }
    let [first, second, gone] = [&bed.state.nodes[0], &bed.state.nodes[1], &bed.state.nodes[2]];
    let target = names_of(&gone.address)[0].clone();
    let reach = |from: &Node, to: &str| login(bed.state.client_key.as_path(), &client_config(&bed, from), to);
    let out = reach(first, &target);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let instance = instance_of(&bed, &gone.address);
    let run = enrolment(&bed, &format!("revoke --instance {instance}"));
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let run = enrolment(&bed, "revoke --instance i-0fffffffffffffff0");
    assert_eq!(run.code, 3, "{}", run.stdout);
    assert_eq!(
        run.json()["unknown"],
        serde_json::json!(["i-0fffffffffffffff0"]),
        "{}",
        run.stdout
    );
    let listed = enrolment(&bed, "list --output json");
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let revoked: Vec<_> = listed.json()["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["revoked"] == true)
        .map(|b| b["instance_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(revoked, std::slice::from_ref(&instance));

    let run = enroll(&bed, gone, &arn);
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert!(run.stderr.contains("is revoked"), "{}", run.stderr);
    for node in [first, second] {
        let run = enroll(&bed, node, &arn);
        assert_eq!(run.code, 0, "{}: {}", node.name, run.stderr);
        let known = std::fs::read_to_string(node.ssh_dir.join("ssh_known_hosts")).unwrap();
        assert_eq!(known.matches("@revoked ").count(), 3, "{known}");
    }
    for name in names_of(&gone.address) {
        let out = reach(first, &name);
        assert!(!out.status.success(), "{name}: the revoked node was accepted");
    }
    assert!(reach(first, &names_of(&second.address)[0]).status.success());
    assert!(reach(second, &names_of(&first.address)[2]).status.success());
    let usage = bed.iam_usage();
    for user in ["hostkeyctl-admin", "hostkeyctl-enrolment", "hostkeyctl-cluster-node"] {
        assert!(usage["denied"].get(user).is_none(), "{user} was refused: {usage}");
    }
}
