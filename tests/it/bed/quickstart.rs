//! The quick starts (docs/quickstart/*.md), run as an admin would: every
//! `sh` block of the page, in order, in one shell, on the bed. What the
//! bed substitutes, and nothing else:
//!
//! - the values of the page's `sh settings` block (the bed's region,
//!   cluster, load balancer, lifecycle bucket and release URL); the page
//!   must set exactly the names the bed knows;
//! - the release: `make dist`'s `dist/`, served over HTTP on loopback;
//! - the credentials of each block: the role docs/iam.md names for its
//!   `hostkeyctl` commands (one role per block), the emulator enforcing
//!   the policies;
//! - `aws s3 cp` and `aws ssm start-session` (testbed/standin_aws.py: the
//!   bucket is a directory, a session runs its command on the node), and
//!   on the nodes `sudo` (the session already runs as root) and a
//!   recording `systemctl`;
//! - the lifecycle step's node-local lines (where the node's root is, its
//!   address), appended to the `hostkeyctl.env` the page uploaded.
//!
//! `sh aws` blocks are AWS-side steps no bed runs: scripts/check_quickstarts.py
//! checks them against the AWS CLI's models (make lint-aws). The end
//! state is asserted here: the page's own audit exits 0, and 20 strict
//! logins through the load balancer with the known_hosts the page hands
//! users succeed.

use std::collections::BTreeMap;
use std::path::Path;

use crate::bed::quickstart_page::{Desk, Release, bash_on, custom_action, read_page, run_page, sessions};
use crate::common::bed::{BedOptions, Node, TestBed, served};

/// HyperPod: from no secret and three running login nodes, each serving
/// its own keys, to the page's audit passing and strict logins through
/// the load balancer, with nothing but the page's commands.
#[test]
fn the_hyperpod_quick_start_takes_running_nodes_to_one_identity() {
    let bed = TestBed::start(BedOptions::nodes(3).no_ssm().without_documents().bare());
    assert_bare(&bed);
    let before: Vec<_> = bed.state.nodes.iter().map(served).collect();
    assert!(
        before[0] != before[1] && before[1] != before[2],
        "the nodes start with their own keys"
    );
    let release = Release::serve();
    let desk = Desk::new(&bed);
    let cluster = bed.state.hyperpod.as_ref().unwrap().cluster.clone();
    std::fs::write(desk.path("sessions.json"), sessions(&bed, &desk, &cluster).to_string()).unwrap();
    let lb = bed.state.lb.clone().unwrap();
    let values = BTreeMap::from([
        ("AWS_REGION", bed.state.region.clone()),
        ("CLUSTER", cluster),
        ("LOGIN_GROUP", "login-group".to_owned()),
        ("LIFECYCLE", "s3://bed-lifecycle/lifecycle".to_owned()),
        ("NLB", lb.address.clone()),
        // The stack's template bucket: `sh aws` blocks only (no bed runs them).
        ("BUCKET", "bed-bucket".to_owned()),
        ("RELEASE", release.url.clone()),
    ]);
    let log = run_page(&bed, &desk, &read_page("hyperpod.md"), &values);
    eprintln!("{log}");

    // Every running node ran the step through its session, which found it
    // a login node in its configs, and said so on its last line.
    let ends = log
        .lines()
        .filter(|l| l.starts_with("hostkeyctl-step ") && l.ends_with(": exit 0"))
        .count();
    assert_eq!(ends, bed.state.nodes.len(), "{log}");
    assert!(log.contains("instance group login-group"), "{log}");
    // The keys, the timer.
    let after: Vec<_> = bed.state.nodes.iter().map(served).collect();
    assert!(
        after.iter().all(|s| *s == after[0]),
        "the nodes differ: {after:?}\n{log}"
    );
    let systemctl = desk.systemctl();
    for node in &bed.state.nodes {
        assert!(
            systemctl.contains(&format!(
                "{} systemctl enable --now hostkeyctl-install.timer",
                node.name
            )),
            "{} got no timer: {systemctl}",
            node.name
        );
    }

    assert_all_run_the_release(&bed);
    // What users get: 20 strict logins through the load balancer.
    twenty_strict_logins(&bed, &desk.path("work/hostkeyctl-release/hostkeyctl_known_hosts"));
    // And what they do not: the metadata service, whose role reads the set.
    assert!(desk.netfilter.metadata_as(65534).starts_with("refused:"));

    // The page's lifecycle_script.py line is the one docs/bootstrap.md
    // gives (whose arguments bed::bootstrap runs).
    let call = "ExecuteBashScript(\"./hostkeyctl/install_hostkeyctl.sh\").run(";
    let args_of = |text: &str| {
        let rest = &text[text.find(call).expect("the lifecycle line") + call.len()..];
        rest[..rest.find(')').unwrap()].split_whitespace().collect::<String>()
    };
    let bootstrap = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/bootstrap.md")).unwrap();
    assert_eq!(args_of(&read_page("hyperpod.md")), args_of(&bootstrap));

    // A node HyperPod creates runs the uploaded step from its lifecycle
    // script, which finds the node type in the configs, in both layouts.
    for layout in [
        ConfigLayout::SlurmConfigPerGroup,
        ConfigLayout::ProvisioningBesideResource,
    ] {
        node_created(&bed, &desk, &bed.state.nodes[0], layout, &after[0]);
    }
}

/// Where a node's configs say it is a login node: the API-driven
/// cluster's per-group `SlurmConfig` in resource_config.json, or
/// provisioning_parameters.json beside it in /opt/ml/config (where
/// upstream's node detector reads it).
#[derive(Clone, Copy, Debug)]
enum ConfigLayout {
    SlurmConfigPerGroup,
    ProvisioningBesideResource,
}

/// `node` made anew (keys of its own), then the step from the bucket, run
/// as the lifecycle script runs it (no node type: the configs say), with
/// the configs of `layout` naming this node's address: it serves `set`.
fn node_created(bed: &TestBed, desk: &Desk, node: &Node, layout: ConfigLayout, set: &[Option<String>]) {
    crate::common::bed::change_ed25519_key_by_hand(node);
    assert_ne!(served(node), set, "the new node serves its own keys");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/hyperpod");
    let config = desk.path(&format!("config-{layout:?}"));
    std::fs::create_dir_all(&config).unwrap();
    let (resource, login_ip) = match layout {
        ConfigLayout::SlurmConfigPerGroup => ("resource_config.api-driven.json", "10.1.18.20"),
        ConfigLayout::ProvisioningBesideResource => ("resource_config.json", "10.1.17.20"),
    };
    let text = std::fs::read_to_string(fixtures.join(resource)).unwrap();
    std::fs::write(
        config.join("resource_config.json"),
        text.replace(login_ip, &node.address),
    )
    .unwrap();
    if let ConfigLayout::ProvisioningBesideResource = layout {
        std::fs::copy(
            fixtures.join("provisioning_parameters.json"),
            config.join("provisioning_parameters.json"),
        )
        .unwrap();
    }
    let step = desk.path("s3/bed-lifecycle/lifecycle/hostkeyctl/install_hostkeyctl.sh");
    let resource_config = config.join("resource_config.json");
    let (ok, log) = bash_on(bed, desk, node, &step, &["".as_ref(), resource_config.as_os_str()]);
    assert!(ok, "{layout:?}: the step failed:\n{log}");
    assert!(log.contains("login node"), "{layout:?}: {log}");
    assert_eq!(served(node), set, "{layout:?}: the created node serves the set:\n{log}");
}

/// No node has hostkeyctl: the page must bring it.
fn assert_bare(bed: &TestBed) {
    for node in &bed.state.nodes {
        let local = node.root.join("usr/local/bin/hostkeyctl");
        assert!(!local.exists(), "{} starts with {}", node.name, local.display());
    }
}

/// Every node (those running at the start, and the one launched later)
/// runs the release's node build, which the page put there.
fn assert_all_run_the_release(bed: &TestBed) {
    use sha2::Digest;
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/hostkeyctl-x86_64");
    let want = hex::encode(sha2::Sha256::digest(std::fs::read(dist).unwrap()));
    for node in &bed.state.nodes {
        let local = node.root.join("usr/local/bin/hostkeyctl");
        let got = std::fs::read(&local).map(|b| hex::encode(sha2::Sha256::digest(b)));
        assert_eq!(
            got.ok().as_deref(),
            Some(want.as_str()),
            "{}: {}",
            node.name,
            local.display()
        );
    }
}

/// The node a test holds back: booted, launched in EC2 only now, as an
/// Auto Scaling group's (or a login pool's) next instance.
fn launch_held(bed: &TestBed) -> Node {
    let mut node = bed.state.nodes.last().unwrap().clone();
    node.instance_id = bed.launch_node(&node.name);
    node
}

/// 20 strict logins through the load balancer with `known_hosts`: every
/// one succeeds.
fn twenty_strict_logins(bed: &TestBed, known_hosts: &Path) {
    let failed: Vec<String> = (0..20)
        .map(|_| bed.ssh_lb(known_hosts, &["UpdateHostKeys=no"]))
        .filter(|o| !o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of 20 strict logins failed: {failed:?}",
        failed.len()
    );
}

/// The audit, as the auditor, of every node with `targets`: exit 0.
fn audit_passes(bed: &TestBed, secret: &str, targets: &[&str]) {
    let mut args = vec!["audit", "--secret-id", secret, "--output", "json"];
    for t in targets {
        args.extend(["--target", t]);
    }
    let run = bed.run(&args);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
}

/// EC2: three running login nodes pushed to, a fourth that comes online
/// later converged by the association the page deploys.
#[test]
fn the_ec2_quick_start_converges_running_and_new_nodes() {
    let bed = TestBed::start(BedOptions::nodes(4).held(1).bare());
    assert_bare(&bed);
    let release = Release::serve();
    let desk = Desk::new(&bed);
    let lb = bed.state.lb.clone().unwrap();
    let values = BTreeMap::from([
        ("AWS_REGION", bed.state.region.clone()),
        ("CLUSTER", "hp".to_owned()),
        ("LOGIN_TAG", "Role=login".to_owned()),
        ("CLUSTER_TAG", "Cluster=hp".to_owned()),
        ("INSTANCE_ROLE_NAME", "bed-login-role".to_owned()),
        ("NLB", lb.address.clone()),
        // The stack's template bucket: `sh aws` blocks only (no bed runs them).
        ("BUCKET", "bed-bucket".to_owned()),
        ("RELEASE", release.url.clone()),
    ]);
    let log = run_page(&bed, &desk, &read_page("ec2.md"), &values);
    eprintln!("{log}");
    let new = launch_held(&bed);
    // State Manager runs the association on a new instance in the
    // background: its run is awaited before the node is asked.
    // Both associations ran on it, one at a time in either order: the
    // setup one put the build there and installed the keys; the converge
    // one succeeded after it, or, before it, said what was missing.
    let runs = bed.settle_associations();
    let of = |document: &str| {
        runs.iter()
            .find(|a| a["Name"] == document)
            .unwrap_or_else(|| panic!("{runs:?}"))
    };
    let setup = of("hostkeyctl-Setup");
    assert_eq!(setup["Instances"][&new.instance_id], "Success", "{setup}");
    let converge = of("hostkeyctl-Converge");
    if converge["Instances"][&new.instance_id] != "Success" {
        let said = converge["Runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["Invocations"][&new.instance_id]["Error"].as_str())
            .any(|e| e.contains("hostkeyctl is not on this node"));
        assert!(said, "{converge}");
    }
    assert_all_run_the_release(&bed);
    let set = served(&bed.state.nodes[0]);
    assert_eq!(served(&new), set, "the node that came online later serves the set");
    audit_passes(&bed, "hostkeys/hp", &["tag:Role=login", "tag:Cluster=hp"]);
    twenty_strict_logins(&bed, &desk.path("work/hostkeyctl-release/hostkeyctl_known_hosts"));
}

/// ParallelCluster: a login pool tagged only with ParallelCluster's own
/// tags, pushed to and audited under the shipped policies (IAM enforced),
/// and the pool's next node configured by the page's custom action.
#[test]
fn the_parallelcluster_quick_start_reaches_a_pool_by_its_own_tags() {
    let bed = TestBed::start(BedOptions::nodes(4).held(1).parallelcluster_tags().bare());
    assert_bare(&bed);
    let release = Release::serve();
    let desk = Desk::new(&bed);
    let lb = bed.state.lb.clone().unwrap();
    let step = "s3://bed-bucket/hostkeyctl";
    let values = BTreeMap::from([
        ("AWS_REGION", bed.state.region.clone()),
        ("CLUSTER", "hp".to_owned()),
        ("STEP", step.to_owned()),
        ("NLB", lb.address.clone()),
        // The stack's template bucket: `sh aws` blocks only (no bed runs them).
        ("BUCKET", "bed-bucket".to_owned()),
        ("RELEASE", release.url.clone()),
    ]);
    let page = read_page("parallelcluster.md");
    let log = run_page(&bed, &desk, &page, &values);
    eprintln!("{log}");

    // The pool launches a node: ParallelCluster runs the action as root.
    let new = launch_held(&bed);
    let (script, args) = custom_action(&page, step);
    let script = desk.path("s3").join(script.strip_prefix("s3://").unwrap());
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    let (ok, action) = bash_on(&bed, &desk, &new, &script, &args);
    assert!(ok, "the custom action failed:\n{action}");
    let set = served(&bed.state.nodes[0]);
    assert_eq!(served(&new), set, "the pool's new node serves the set:\n{action}");
    assert!(
        desk.systemctl().contains("enable --now hostkeyctl-install.timer"),
        "{action}"
    );
    assert_all_run_the_release(&bed);
    let targets = [
        "tag:parallelcluster:node-type=LoginNode",
        "tag:parallelcluster:cluster-name=hp",
    ];
    audit_passes(&bed, "hostkeys/hp", &targets);
    twenty_strict_logins(&bed, &desk.path("work/hostkeyctl-release/hostkeyctl_known_hosts"));
}
