//! The quick starts' harness (tests/it/bed/quickstart.rs runs the pages):
//! a page's fenced blocks, its settings with the test bed's values, the
//! role each block signs as, the release served from `dist/`, the admin's
//! desk with its stand-ins, and a root shell on a node.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use crate::common::bed::netfilter::NodeNetfilter;
use crate::common::bed::{Node, TestBed, wait_until};
use crate::common::roles::Role;

/// A fenced block of a page.
#[derive(Debug)]
pub(crate) struct Block {
    /// Its info string: `sh`, `sh settings`, `sh aws`, `json file=X`...
    pub(crate) info: String,
    /// The line of its opening fence.
    pub(crate) line: usize,
    pub(crate) text: String,
}

/// The fenced blocks of `page`.
pub(crate) fn blocks(page: &str) -> Vec<Block> {
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
pub(crate) fn settings(block: &Block, values: &BTreeMap<&str, String>) -> String {
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
pub(crate) fn role_of(text: &str) -> Option<Role> {
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
pub(crate) fn python3() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 is on the PATH")
}

/// An executable file.
pub(crate) fn script(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `dist/` over HTTP on loopback, stopped on drop.
pub(crate) struct Release {
    child: Child,
    pub(crate) url: String,
}

impl Release {
    pub(crate) fn serve() -> Release {
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
pub(crate) struct Desk {
    /// The nodes' netfilter (one namespace for all of them): where the
    /// step keeps the metadata service to root, never the test machine's.
    pub(crate) netfilter: NodeNetfilter,
    dir: tempfile::TempDir,
}

impl Desk {
    /// The desk beside `bed`: its buckets are the bed's (where the SSM
    /// agent's downloads read).
    pub(crate) fn new(bed: &TestBed) -> Desk {
        let dir = tempfile::Builder::new()
            .prefix("hostkeyctl-quickstart-")
            .tempdir()
            .unwrap();
        for sub in ["home", "work", "admin-bin", "node-bin"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        std::os::unix::fs::symlink(bed.dir().join("s3"), dir.path().join("s3")).unwrap();
        let desk = Desk {
            netfilter: match &bed.state.netns {
                Some(netns) => NodeNetfilter::of_bed(netns, &dir.path().join("node-bin")),
                None => NodeNetfilter::new(&dir.path().join("node-bin")),
            },
            dir,
        };
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

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// What the nodes' systemctl was asked.
    pub(crate) fn systemctl(&self) -> String {
        std::fs::read_to_string(self.path("systemctl.log")).unwrap_or_default()
    }
}

/// What a root shell on `node` has: the PATH (the stand-ins first) and the
/// environment (the node's, its role's credentials, and the bed's names
/// the uploaded `hostkeyctl.env` refers to).
pub(crate) fn node_shell(bed: &TestBed, desk: &Desk, node: &Node) -> (String, BTreeMap<String, String>) {
    let mut env: BTreeMap<String, String> = node.env.clone().into_iter().collect();
    env.extend(bed.aws_env(Role::Node).into_iter().map(|(k, v)| (k.to_owned(), v)));
    env.insert("HOSTKEYCTL_BED_NODE".to_owned(), node.name.clone());
    env.insert("HOSTKEYCTL_BED_IP".to_owned(), node.address.clone());
    env.insert("HOSTKEYCTL_BED_S3".to_owned(), desk.path("s3").display().to_string());
    let path = format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", desk.path("node-bin").display());
    (path, env)
}

/// `bash SCRIPT ARGS...` as root on `node`, in its shell ([`node_shell`],
/// no other environment): whether it exited 0, and what it printed.
pub(crate) fn bash_on(
    bed: &TestBed,
    desk: &Desk,
    node: &Node,
    script: &Path,
    args: &[&std::ffi::OsStr],
) -> (bool, String) {
    let (path, env) = node_shell(bed, desk, node);
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .env_clear()
        .env("PATH", path)
        .envs(env)
        .output()
        .unwrap();
    (out.status.success(), text_of(&out))
}

/// A run's stdout, then its stderr, as text.
fn text_of(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The Session Manager targets of the bed's HyperPod login nodes, each
/// with the environment a session's shell has on it.
pub(crate) fn sessions(bed: &TestBed, desk: &Desk, cluster: &str) -> serde_json::Value {
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
    // What HyperPod wrote on each node at its creation (/opt/ml/config):
    // the base-config layout, this node's address in the login group.
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/hyperpod");
    for node in &bed.state.nodes {
        let config = desk.path("configs").join(&node.name);
        std::fs::create_dir_all(&config).unwrap();
        let text = std::fs::read_to_string(fixtures.join("resource_config.json")).unwrap();
        std::fs::write(
            config.join("resource_config.json"),
            text.replace("10.1.17.20", &node.address),
        )
        .unwrap();
        std::fs::copy(
            fixtures.join("provisioning_parameters.json"),
            config.join("provisioning_parameters.json"),
        )
        .unwrap();
    }
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
pub(crate) fn page_script(bed: &TestBed, desk: &Desk, page: &str, values: &BTreeMap<&str, String>) -> String {
    let bed_lines = format!(
        "HOSTKEYCTL_ROOT={}/$HOSTKEYCTL_BED_NODE\nHOSTKEYCTL_SELF_IP=$HOSTKEYCTL_BED_IP\nHOSTKEYCTL_RETRY_SECONDS=0\nHOSTKEYCTL_RESOURCE_CONFIG={}/$HOSTKEYCTL_BED_NODE/resource_config.json\n",
        bed.dir().join("nodes").display(),
        desk.path("configs").display()
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
            "find {s3}/ -name hostkeyctl.env | while read -r f; do grep -q '^HOSTKEYCTL_ROOT=' \"$f\" || printf '%s' {lines} >> \"$f\"; done\n",
            s3 = desk.path("s3").display(),
            lines = shlex::try_quote(&bed_lines).unwrap()
        ));
    }
    assert!(ran > 3, "the page has {ran} runnable blocks");
    out
}

/// Runs `page` against `bed`; returns its output, failing with it.
pub(crate) fn run_page(bed: &TestBed, desk: &Desk, page: &str, values: &BTreeMap<&str, String>) -> String {
    let text = page_script(bed, desk, page, values);
    // Every node's files go under its root: nothing of the page may land
    // on the machine running the test.
    let host_bin = Path::new("/usr/local/bin/hostkeyctl");
    let host_had = host_bin.exists();
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
    let log = text_of(&out);
    assert!(
        host_had || !host_bin.exists(),
        "the page installed {} on the test machine",
        host_bin.display()
    );
    assert!(out.status.success(), "the page failed ({}):\n{log}", out.status);
    log
}

pub(crate) fn read_page(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/quickstart").join(name)).unwrap()
}

/// The page's own value of a setting (`export NAME=VALUE  # ...`).
pub(crate) fn page_setting(page: &str, name: &str) -> String {
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
pub(crate) fn custom_action(page: &str, step: &str) -> (String, Vec<String>) {
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
