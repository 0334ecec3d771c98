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
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::common::bed::{BedOptions, Node, TestBed, served, wait_until};
use crate::common::roles::Role;

/// A fenced block of a page.
#[derive(Debug)]
struct Block {
    /// Its info string: `sh`, `sh settings`, `sh aws`, `json file=X`...
    info: String,
    /// The line of its opening fence.
    line: usize,
    text: String,
}

/// The fenced blocks of `page`.
fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in page.lines().enumerate() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => {
                open = Some(Block {
                    info: info.trim().to_owned(),
                    line: i + 1,
                    text: String::new(),
                })
            }
            (Some(_), Some("")) => out.push(open.take().unwrap()),
            (Some(block), _) => {
                block.text.push_str(line);
                block.text.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a fenced block is not closed");
    out
}

/// The page's settings block with the bed's values: each `export NAME=...`
/// line whose name the bed knows gets its value; every name the bed knows
/// must be set, and the page may set no other but derived ones.
fn settings(block: &Block, values: &BTreeMap<&str, String>) -> String {
    let mut seen = Vec::new();
    let mut out = String::new();
    for line in block.text.lines() {
        let Some((name, value)) = line.strip_prefix("export ").and_then(|l| l.split_once('=')) else {
            panic!("settings line {line:?} is not `export NAME=VALUE`");
        };
        match values.get(name) {
            Some(bed) => {
                seen.push(name);
                out.push_str(&format!("export {name}={}\n", shlex::try_quote(bed).unwrap()));
            }
            None => {
                assert!(
                    value.contains('$'),
                    "the page sets {name}, which the bed does not know: {line}"
                );
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    for name in values.keys() {
        assert!(seen.contains(name), "the page's settings do not set {name}");
    }
    out
}

/// The role of a block's `hostkeyctl` commands (one per block), or none.
fn role_of(text: &str) -> Option<Role> {
    let joined = text.replace("\\\n", " ");
    let roles: Vec<Role> = joined
        .lines()
        .filter_map(|l| {
            let words = shlex::split(l.trim_start_matches("$(").trim())?;
            let at = words.iter().position(|w| w == "hostkeyctl")?;
            let args: Vec<&str> = words[at + 1..].iter().map(String::as_str).collect();
            (!args.is_empty() && !args[0].starts_with('-')).then(|| Role::for_command(&args))
        })
        .collect();
    if let Some(first) = roles.first() {
        assert!(roles.iter().all(|r| r == first), "a block mixes roles: {text}");
    }
    roles.first().copied()
}

/// The `python3` this test runs with (first on its PATH): the one that has
/// the bed's packages.
fn python3() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 is on the PATH")
}

/// An executable file.
fn script(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `dist/` over HTTP on loopback, stopped on drop.
struct Release {
    child: Child,
    url: String,
}

impl Release {
    fn serve() -> Release {
        let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("dist");
        assert!(
            dist.join("SHA256SUMS").is_file() && dist.join("hostkeyctl-contrib.tar.gz").is_file(),
            "the quick starts download the release from dist/: run `make dist` first"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                "127.0.0.1",
                &port.to_string(),
                "--directory",
            ])
            .arg(&dist)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until("the release server", Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        Release {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where a page runs: the admin's home and working directory, the
/// stand-ins, the bucket.
struct Desk {
    dir: tempfile::TempDir,
}

impl Desk {
    fn new() -> Desk {
        let desk = Desk {
            dir: tempfile::Builder::new()
                .prefix("hostkeyctl-quickstart-")
                .tempdir()
                .unwrap(),
        };
        for sub in ["home", "work", "admin-bin", "node-bin", "s3", "roots"] {
            std::fs::create_dir_all(desk.path(sub)).unwrap();
        }
        let standin = Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/standin_aws.py");
        for bin in ["admin-bin", "node-bin"] {
            script(
                &desk.path(bin).join("aws"),
                // The tests' own Python, which has botocore (testbed/requirements.txt).
                &format!("#!/bin/sh\nexec {} {} \"$@\"\n", python3().display(), standin.display()),
            );
        }
        script(&desk.path("node-bin/sudo"), "#!/bin/sh\nexec \"$@\"\n");
        script(
            &desk.path("node-bin/systemctl"),
            &format!(
                "#!/bin/sh\necho \"$HOSTKEYCTL_BED_NODE systemctl $*\" >> {}\n",
                desk.path("systemctl.log").display()
            ),
        );
        desk
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// What the nodes' systemctl was asked.
    fn systemctl(&self) -> String {
        std::fs::read_to_string(self.path("systemctl.log")).unwrap_or_default()
    }
}

/// What a root shell on `node` has: the PATH (the stand-ins first) and the
/// environment (the node's, its role's credentials, and the bed's names
/// the uploaded `hostkeyctl.env` refers to).
fn node_shell(bed: &TestBed, desk: &Desk, node: &Node) -> (String, BTreeMap<String, String>) {
    let mut env: BTreeMap<String, String> = node.env.clone().into_iter().collect();
    env.extend(bed.aws_env(Role::Node).into_iter().map(|(k, v)| (k.to_owned(), v)));
    env.insert("HOSTKEYCTL_BED_NODE".to_owned(), node.name.clone());
    env.insert("HOSTKEYCTL_BED_IP".to_owned(), node.address.clone());
    env.insert("HOSTKEYCTL_BED_S3".to_owned(), desk.path("s3").display().to_string());
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", desk.path("node-bin").display());
    (path, env)
}

/// The Session Manager targets of the bed's HyperPod login nodes, each
/// with the environment a session's shell has on it.
fn sessions(bed: &TestBed, desk: &Desk, cluster: &str) -> serde_json::Value {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let arn = runtime.block_on(async {
        let config = bed.sdk_config_as(Role::BedRoot, 3).await;
        let described = aws_sdk_sagemaker::Client::new(&config)
            .describe_cluster()
            .cluster_name(cluster)
            .send()
            .await
            .unwrap();
        described.cluster_arn().unwrap().to_owned()
    });
    let id = arn.rsplit_once("cluster/").unwrap().1;
    let hyperpod = bed.state.hyperpod.as_ref().unwrap();
    let mut map = serde_json::Map::new();
    for (instance, ip) in &hyperpod.nodes {
        let Some(node) = bed.state.nodes.iter().find(|n| &n.address == ip) else {
            continue;
        };
        let (path, env) = node_shell(bed, desk, node);
        map.insert(
            format!("sagemaker-cluster:{id}_login-group-{instance}"),
            json!({ "path": path, "env": env }),
        );
    }
    serde_json::Value::Object(map)
}

/// The page as one script: the settings replaced, each block announced,
/// signed as its role, and the bed's lines added to an uploaded
/// `hostkeyctl.env` after each block.
fn page_script(bed: &TestBed, desk: &Desk, page: &str, values: &BTreeMap<&str, String>) -> String {
    let bed_lines = format!(
        "HOSTKEYCTL_ROOT={}/$HOSTKEYCTL_BED_NODE\nHOSTKEYCTL_SELF_IP=$HOSTKEYCTL_BED_IP\nHOSTKEYCTL_RETRY_SECONDS=0\n",
        desk.path("roots").display()
    );
    let mut out = String::from("set -euo pipefail\n");
    let mut ran = 0;
    for block in blocks(page) {
        let text = match block.info.as_str() {
            "sh settings" => settings(&block, values),
            "sh" => block.text.clone(),
            _ => continue,
        };
        ran += 1;
        out.push_str(&format!("echo '### block at line {}' >&2\n", block.line));
        for (k, v) in role_of(&text).map(|r| bed.aws_env(r)).unwrap_or_default() {
            out.push_str(&format!("export {k}={}\n", shlex::try_quote(&v).unwrap()));
        }
        out.push_str(&text);
        out.push_str(&format!(
            "find {s3} -name hostkeyctl.env | while read -r f; do grep -q '^HOSTKEYCTL_ROOT=' \"$f\" || printf '%s' {lines} >> \"$f\"; done\n",
            s3 = desk.path("s3").display(),
            lines = shlex::try_quote(&bed_lines).unwrap()
        ));
    }
    assert!(ran > 3, "the page has {ran} runnable blocks");
    out
}

/// Runs `page` against `bed`; returns its output, failing with it.
fn run_page(bed: &TestBed, desk: &Desk, page: &str, values: &BTreeMap<&str, String>) -> String {
    let text = page_script(bed, desk, page, values);
    let out = Command::new("bash")
        .arg("-c")
        .arg(&text)
        .env_clear()
        .env("HOME", desk.path("home"))
        .env(
            "PATH",
            format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", desk.path("admin-bin").display()),
        )
        .env("HOSTKEYCTL_BED_S3", desk.path("s3"))
        .env("HOSTKEYCTL_BED_SESSIONS", desk.path("sessions.json"))
        .env("HOSTKEYCTL_PACING_DIR", bed.dir().join("pacing"))
        .current_dir(desk.path("work"))
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the page failed ({}):\n{log}", out.status);
    log
}

fn read_page(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/quickstart").join(name)).unwrap()
}

/// HyperPod: from no secret and three running login nodes, each serving
/// its own keys, to the page's audit passing and strict logins through
/// the load balancer, with nothing but the page's commands.
#[test]
fn the_hyperpod_quick_start_takes_running_nodes_to_one_identity() {
    let bed = TestBed::start(BedOptions {
        nodes: 3,
        no_ssm: true,
        documents: false,
        ..BedOptions::default()
    });
    let before: Vec<_> = bed.state.nodes.iter().map(served).collect();
    assert!(
        before[0] != before[1] && before[1] != before[2],
        "the nodes start with their own keys"
    );
    let release = Release::serve();
    let desk = Desk::new();
    let cluster = bed.state.hyperpod.as_ref().unwrap().cluster.clone();
    std::fs::write(desk.path("sessions.json"), sessions(&bed, &desk, &cluster).to_string()).unwrap();
    let lb = bed.state.lb.clone().unwrap();
    let values = BTreeMap::from([
        ("AWS_REGION", bed.state.region.clone()),
        ("CLUSTER", cluster),
        ("LOGIN_GROUP", "login-group".to_owned()),
        ("LIFECYCLE", "s3://bed-lifecycle/lifecycle".to_owned()),
        ("NLB", lb.address.clone()),
        ("RELEASE", release.url.clone()),
    ]);
    let log = run_page(&bed, &desk, &read_page("hyperpod.md"), &values);
    eprintln!("{log}");

    // Every running node ran the step through its session: the keys, the timer.
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

    // What users get: 20 strict logins through the load balancer.
    twenty_strict_logins(&bed, &desk.path("work/hostkeyctl-release/hostkeyctl_known_hosts"));

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
    let (path, env) = node_shell(bed, desk, node);
    let out = Command::new("bash")
        .arg(&step)
        .arg("")
        .arg(config.join("resource_config.json"))
        .env_clear()
        .env("PATH", path)
        .envs(env)
        .output()
        .unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{layout:?}: the step failed:\n{log}");
    assert!(log.contains("login node"), "{layout:?}: {log}");
    assert_eq!(served(node), set, "{layout:?}: the created node serves the set:\n{log}");
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
    let bed = TestBed::start(BedOptions {
        nodes: 4,
        held: 1,
        ..BedOptions::default()
    });
    let release = Release::serve();
    let desk = Desk::new();
    let lb = bed.state.lb.clone().unwrap();
    let values = BTreeMap::from([
        ("AWS_REGION", bed.state.region.clone()),
        ("CLUSTER", "hp".to_owned()),
        ("LOGIN_TAG", "Role=login".to_owned()),
        ("CLUSTER_TAG", "Cluster=hp".to_owned()),
        ("NLB", lb.address.clone()),
        ("RELEASE", release.url.clone()),
    ]);
    let log = run_page(&bed, &desk, &read_page("ec2.md"), &values);
    eprintln!("{log}");
    let new = launch_held(&bed);
    let set = served(&bed.state.nodes[0]);
    assert_eq!(served(&new), set, "the node that came online later serves the set");
    audit_passes(&bed, "hostkeys/hp", &["tag:Role=login", "tag:Cluster=hp"]);
    twenty_strict_logins(&bed, &desk.path("work/hostkeyctl-release/hostkeyctl_known_hosts"));
}

/// The page's own value of a setting (`export NAME=VALUE  # ...`).
fn page_setting(page: &str, name: &str) -> String {
    let block = blocks(page).into_iter().find(|b| b.info == "sh settings").unwrap();
    let line = block
        .text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("export {name}=")))
        .unwrap_or_else(|| panic!("the page sets no {name}"));
    line.split_whitespace().next().unwrap().to_owned()
}

/// The custom action of the page's ParallelCluster configuration
/// (`OnNodeConfigured`'s `Script` and `Args`), with the page's example
/// bucket replaced by the bed's.
fn custom_action(page: &str, step: &str) -> (String, Vec<String>) {
    let example = page_setting(page, "STEP");
    let block = blocks(page)
        .into_iter()
        .find(|b| b.info == "yaml parallelcluster")
        .expect("the page's cluster configuration");
    let text = block.text.replace(&example, step);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| *l == "OnNodeConfigured:")
        .expect("OnNodeConfigured");
    let script = lines[at + 1].strip_prefix("Script: ").expect("Script").to_owned();
    assert_eq!(lines[at + 2], "Args:");
    let args = lines[at + 3..]
        .iter()
        .map_while(|l| l.strip_prefix("- "))
        .map(str::to_owned)
        .collect();
    (script, args)
}

/// ParallelCluster: a login pool tagged only with ParallelCluster's own
/// tags, pushed to and audited under the shipped policies (IAM enforced),
/// and the pool's next node configured by the page's custom action.
#[test]
fn the_parallelcluster_quick_start_reaches_a_pool_by_its_own_tags() {
    let bed = TestBed::start(BedOptions {
        nodes: 4,
        held: 1,
        parallelcluster_tags: true,
        ..BedOptions::default()
    });
    let release = Release::serve();
    let desk = Desk::new();
    let lb = bed.state.lb.clone().unwrap();
    let step = "s3://bed-bucket/hostkeyctl";
    let values = BTreeMap::from([
        ("AWS_REGION", bed.state.region.clone()),
        ("CLUSTER", "hp".to_owned()),
        ("STEP", step.to_owned()),
        ("NLB", lb.address.clone()),
        ("RELEASE", release.url.clone()),
    ]);
    let page = read_page("parallelcluster.md");
    let log = run_page(&bed, &desk, &page, &values);
    eprintln!("{log}");

    // The pool launches a node: ParallelCluster runs the action as root.
    let new = launch_held(&bed);
    let (script, args) = custom_action(&page, step);
    let script = desk.path("s3").join(script.strip_prefix("s3://").unwrap());
    let (path, env) = node_shell(&bed, &desk, &new);
    let out = Command::new("bash")
        .arg(&script)
        .args(&args)
        .env_clear()
        .env("PATH", path)
        .envs(env)
        .output()
        .unwrap();
    let action = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the custom action failed:\n{action}");
    let set = served(&bed.state.nodes[0]);
    assert_eq!(served(&new), set, "the pool's new node serves the set:\n{action}");
    assert!(
        desk.systemctl().contains("enable --now hostkeyctl-install.timer"),
        "{action}"
    );
    let targets = [
        "tag:parallelcluster:node-type=LoginNode",
        "tag:parallelcluster:cluster-name=hp",
    ];
    audit_passes(&bed, "hostkeys/hp", &targets);
    twenty_strict_logins(&bed, &desk.path("work/hostkeyctl-release/hostkeyctl_known_hosts"));
}
