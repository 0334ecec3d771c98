//! The test bed from Rust: starts `testbed/bed.py up` for one test and tears
//! it down when the [`TestBed`] is dropped, even when the test panics.
//!
//! Every bed gets its own network index (127.K.0.x) and emulator port, so
//! tests run in parallel. The supervisor tears everything down when its
//! stdin closes, and its children die with it (PR_SET_PDEATHSIG), so a test
//! process killed outright leaves nothing behind either.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

mod look;
pub mod netfilter;
mod options;
mod run;

use serde::Deserialize;
use serde_json::Value;

pub use crate::common::roles::Role;
use crate::common::support::require;
pub use look::*;
pub use options::BedOptions;
pub use run::*;

/// The bed's login nodes as targets: `Role=login` in cluster `hp`.
pub const TARGETS: [&str; 4] = ["--target", "tag:Role=login", "--target", "tag:Cluster=hp"];

/// One login node of the bed.
#[derive(Clone, Debug, Deserialize)]
pub struct Node {
    /// Name tag, e.g. `hp-login-1`.
    pub name: String,
    /// Loopback address sshd listens on (port 22).
    pub address: String,
    /// sshd port.
    pub port: u16,
    /// EC2 instance id in the emulator (empty for profile nodes).
    pub instance_id: String,
    /// The process holding a profile node's mount and network namespaces.
    #[serde(default)]
    pub ns_pid: Option<u32>,
    /// A release node: commands run in its chroot (another OpenSSH's
    /// userland), where the bed's directory and the bin dir keep their paths.
    #[serde(default)]
    pub chroot: bool,
    /// The node's root (its `/`).
    pub root: PathBuf,
    /// Its `/etc/ssh`.
    pub ssh_dir: PathBuf,
    /// Its sshd_config.
    pub sshd_config: PathBuf,
    /// sshd's pid file.
    pub pid_file: PathBuf,
    /// The environment the SSM agent gives commands on this node.
    pub env: HashMap<String, String>,
}

/// The load balancer.
#[derive(Clone, Debug, Deserialize)]
pub struct Lb {
    /// Listen address (the ip target group's load balancer).
    pub address: String,
    /// The instance target group's load balancer's listen address (none
    /// from a bed before it had one).
    #[serde(default)]
    pub instance_address: String,
    /// Listen port.
    pub port: u16,
    /// HAProxy's pid.
    pub pid: u32,
}

/// A network load balancer of the bed (`hp-login`: IP targets,
/// `hp-login-i`: instance targets) and its target group.
#[derive(Clone, Debug, Deserialize)]
pub struct Elb {
    /// Its target group's ARN.
    pub target_group_arn: String,
}

/// The bed's HyperPod cluster.
#[derive(Clone, Debug, Deserialize)]
pub struct HyperPod {
    /// Its name.
    pub cluster: String,
    /// Each node's instance id and its address.
    pub nodes: HashMap<String, String>,
    /// Each node's instance id and its instance group.
    pub groups: HashMap<String, String>,
}

/// An instance that is not a login node of the cluster.
#[derive(Clone, Debug, Deserialize)]
pub struct Noise {
    /// Its instance id.
    pub instance_id: String,
    /// What it is.
    pub kind: String,
    /// running or stopped.
    pub state: String,
}

/// An access key of the bed's emulated IAM.
#[derive(Clone, Debug, Deserialize)]
pub struct Credentials {
    /// AWS_ACCESS_KEY_ID.
    pub access_key_id: String,
    /// AWS_SECRET_ACCESS_KEY.
    pub secret_access_key: String,
}

/// What `bed.py up` reports once everything answers.
#[derive(Clone, Debug, Deserialize)]
pub struct BedState {
    /// The emulator's endpoint URL.
    pub endpoint: String,
    /// The region.
    pub region: String,
    /// The load balancer, when there are nodes.
    pub lb: Option<Lb>,
    /// The login nodes.
    pub nodes: Vec<Node>,
    /// The profile nodes, in the order asked for.
    #[serde(default)]
    pub profiles: Vec<Node>,
    /// Noise instances.
    pub noise: Vec<Noise>,
    /// Virtual instance ids.
    #[serde(rename = "virtual")]
    pub virtual_ids: Vec<String>,
    /// The supervisor's pid.
    pub supervisor_pid: u32,
    /// The load balancers and target groups (`ip`, `instance`).
    #[serde(default)]
    pub elb: HashMap<String, Elb>,
    /// A client key whose public half every node authorises for root.
    pub client_key: PathBuf,
    /// An access key per role (and `bed-root`).
    pub credentials: HashMap<String, Credentials>,
    /// Whether the emulator enforces the policies.
    pub iam: bool,
    /// The HyperPod cluster, when there are nodes.
    #[serde(default)]
    pub hyperpod: Option<HyperPod>,
    /// A bare bed's nodes' netfilter namespace (their SSM commands'
    /// `iptables`).
    #[serde(default)]
    pub netns: Option<String>,
}

/// A running test bed.
pub struct TestBed {
    child: Child,
    stdin: Option<ChildStdin>,
    dir: tempfile::TempDir,
    /// What is running where.
    pub state: BedState,
}

/// Appends the running test's name to `$HOSTKEYCTL_BED_STARTS`, when set:
/// how `make test` measures how many tests start a bed (libtest names
/// each test's thread after the test). One short append per line.
fn record_start() {
    use std::io::Write as _;
    let Some(path) = std::env::var_os("HOSTKEYCTL_BED_STARTS") else {
        return;
    };
    let name = std::thread::current().name().unwrap_or("?").to_owned();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot record a bed start in {}: {e}", Path::new(&path).display()));
    file.write_all(format!("{name}\n").as_bytes()).unwrap();
}

impl TestBed {
    /// Starts a bed, failing the test with the bed's log if it cannot.
    pub fn start(options: BedOptions) -> TestBed {
        require("sshd");
        require("haproxy");
        record_start();
        let dir = tempfile::Builder::new().prefix("hostkeyctl-bed-").tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/bed.py");
        let log = std::fs::File::create(dir.path().join("bed.log")).unwrap();
        let mut cmd = Command::new("python3");
        cmd.arg(&script)
            .arg("up")
            .arg("--dir")
            .arg(dir.path())
            .arg("--nodes")
            .arg(options.nodes.to_string())
            .arg("--virtual")
            .arg(options.virtual_instances.to_string())
            .arg("--watch-stdin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        if options.bare {
            cmd.arg("--bare");
        } else {
            cmd.arg("--bin-dir").arg(crate::common::support::node_bin_dir());
        }
        if options.no_reexec {
            cmd.arg("--no-reexec");
        }
        cmd.arg("--hyperpod-workers").arg(options.hyperpod_workers.to_string());
        if !options.hyperpod_groups.is_empty() {
            cmd.arg("--hyperpod-groups").arg(options.hyperpod_groups);
        }
        if options.no_ssm {
            cmd.arg("--no-ssm");
        }
        cmd.arg("--held").arg(options.held.to_string());
        if let Some(release) = options.release {
            cmd.arg("--release").arg(release);
        }
        if options.crypto_policy {
            cmd.arg("--crypto-policy");
        }
        cmd.arg("--lb-check-interval").arg(options.lb_check_interval);
        cmd.arg("--lb-balance").arg(options.lb_balance);
        if options.parallelcluster_tags {
            cmd.args(["--login-tags", "parallelcluster"]);
        }
        for profile in &options.profiles {
            cmd.arg("--profile").arg(profile);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run python3 {}: {e}; install Python 3", script.display()));
        let stdin = child.stdin.take();
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        if read.is_err() || line.trim().is_empty() {
            let _ = child.wait();
            let log = std::fs::read_to_string(dir.path().join("bed.log")).unwrap_or_default();
            panic!("the test bed did not start (run `make deps` to install its parts):\n{log}");
        }
        let state: BedState = serde_json::from_str(&line).unwrap();
        let bed = TestBed {
            child,
            stdin,
            dir,
            state,
        };
        if options.documents {
            let deploy = bed.cli("ssm-document deploy").run();
            deploy.ok();
        }
        bed
    }

    /// The bed's working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `hostkeyctl` pointed at the bed's AWS emulator, signing as `role`.
    pub fn hostkeyctl_as(&self, role: Role) -> assert_cmd::Command {
        let mut cmd = crate::common::support::hostkeyctl();
        cmd.envs(self.aws_env(role));
        cmd
    }

    /// The access key of `role`.
    pub fn credentials(&self, role: Role) -> &Credentials {
        self.state
            .credentials
            .get(role.key())
            .unwrap_or_else(|| panic!("bed.json has no credentials for {}", role.key()))
    }

    /// The AWS environment that points the SDK at the emulator and signs
    /// as `role`.
    pub fn aws_env(&self, role: Role) -> Vec<(&'static str, String)> {
        let key = self.credentials(role);
        vec![
            ("AWS_ENDPOINT_URL", self.state.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID", key.access_key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY", key.secret_access_key.clone()),
            ("AWS_REGION", self.state.region.clone()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_owned()),
            ("AWS_CONFIG_FILE", "/dev/null".to_owned()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".to_owned()),
            // The bed's connection budget (scan::pacing), shared with the
            // nodes' runs: all of them connect from loopback.
            ("HOSTKEYCTL_PACING_DIR", self.dir().join("pacing").display().to_string()),
        ]
    }

    /// The emulator's record of IAM decisions: `allowed` and `denied`, each
    /// user name -> action -> count.
    pub fn iam_usage(&self) -> Value {
        self.control("GET", "/_bed/iam", &Value::Null)
    }

    /// An SDK configuration for the emulator, with `max_attempts` tries,
    /// signing as the bed itself (allowed everything: for what a test sets
    /// up, reads or tampers with on purpose, never for hostkeyctl).
    pub async fn sdk_config(&self, max_attempts: u32) -> aws_config::SdkConfig {
        self.sdk_config_as(Role::BedRoot, max_attempts).await
    }

    /// An SDK configuration for the emulator signing as `role`.
    pub async fn sdk_config_as(&self, role: Role, max_attempts: u32) -> aws_config::SdkConfig {
        let key = self.credentials(role);
        let credentials = aws_sdk_ssm::config::Credentials::new(
            key.access_key_id.clone(),
            key.secret_access_key.clone(),
            None,
            None,
            "test-bed",
        );
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(self.state.region.clone()))
            .endpoint_url(&self.state.endpoint)
            .credentials_provider(credentials)
            .retry_config(
                aws_config::retry::RetryConfig::standard()
                    .with_max_attempts(max_attempts)
                    .with_initial_backoff(Duration::from_millis(10)),
            )
            .load()
            .await
    }

    /// `hostkeyctl sign` of `hostkeys/hk` with the CA `hostkeyctl-ca/ca` for
    /// `principals`, plus `extra`, as the signer role: its JSON report.
    pub fn sign_hk(&self, principals: &[&str], extra: &[&str]) -> Value {
        let mut args = vec![
            "sign",
            "--output",
            "json",
            "--secret-id",
            SECRET,
            "--ca-secret-id",
            "hostkeyctl-ca/ca",
        ];
        for p in principals {
            args.extend(["--principal", p]);
        }
        args.extend_from_slice(extra);
        let run = self.run(&args);
        assert_eq!(run.code, 0, "sign: {}\n{}", run.stderr, run.stdout);
        run.json()
    }

    /// The AWSCURRENT value of secret `name`, read as the bed (for a test
    /// that builds or tampers with a document).
    pub async fn secret_value(&self, name: &str) -> String {
        let sm = aws_sdk_secretsmanager::Client::new(&self.sdk_config(1).await);
        let out = sm.get_secret_value().secret_id(name).send().await.unwrap();
        out.secret_string().unwrap().to_owned()
    }

    /// Stores `text` as a new version of secret `name` staged `stage`, as
    /// the bed; returns its version id.
    pub async fn put_secret_value(&self, name: &str, text: &str, stage: &str) -> String {
        let sm = aws_sdk_secretsmanager::Client::new(&self.sdk_config(1).await);
        let out = sm
            .put_secret_value()
            .secret_id(name)
            .secret_string(text)
            .version_stages(stage)
            .send()
            .await
            .unwrap();
        out.version_id().unwrap().to_owned()
    }

    /// Calls the emulator's control API (`/_bed/...`).
    pub fn control(&self, method: &str, path: &str, body: &Value) -> Value {
        let authority = self.state.endpoint.trim_start_matches("http://");
        let mut stream = TcpStream::connect(authority).unwrap();
        let body = body.to_string();
        write!(
            stream,
            "{method} {path} HTTP/1.0\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let (head, payload) = response.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
            "{method} {path}: {response}"
        );
        serde_json::from_str(payload).unwrap()
    }

    /// Switches faults on (fields of `Faults` in testbed/emulator.py).
    pub fn set_faults(&self, faults: Value) {
        self.control("POST", "/_bed/faults", &faults);
    }

    /// API calls counted since the bed was ready (or the last reset).
    pub fn counts(&self) -> HashMap<String, u64> {
        serde_json::from_value(self.control("GET", "/_bed/counts", &Value::Null)).unwrap()
    }

    /// How many calls of `action` (`kms:Sign`) the emulator has answered.
    pub fn count(&self, action: &str) -> u64 {
        self.counts().get(action).copied().unwrap_or(0)
    }

    /// Every command sent so far, with its parameters.
    pub fn commands(&self) -> Vec<Value> {
        serde_json::from_value(self.control("GET", "/_bed/commands", &Value::Null)).unwrap()
    }

    /// Launches a held node (`BedOptions::held`): its instance id. State
    /// Manager applies the associations that target it, in the background.
    pub fn launch_node(&self, name: &str) -> String {
        let answer = self.control("POST", "/_bed/nodes/launch", &serde_json::json!({ "name": name }));
        answer["instance_id"].as_str().unwrap().to_owned()
    }

    /// Fires every association's schedule now, and waits for the runs.
    pub fn run_associations(&self) -> Vec<Value> {
        self.control("POST", "/_bed/associations/run", &Value::Null);
        self.settle_associations()
    }

    /// Waits until no association run is in progress: every association,
    /// with each instance's last status and every run's invocations.
    pub fn settle_associations(&self) -> Vec<Value> {
        serde_json::from_value(self.control("POST", "/_bed/associations/settle", &Value::Null)).unwrap()
    }

    /// Stops a node's sshd.
    pub fn stop_node(&self, name: &str) {
        self.control("POST", "/_bed/nodes/stop", &serde_json::json!({ "name": name }));
    }

    /// (Re)starts a node's sshd and waits for its banner.
    pub fn start_node(&self, name: &str) {
        self.control("POST", "/_bed/nodes/start", &serde_json::json!({ "name": name }));
    }

    /// Pids of every process the bed runs: supervisor, sshd per node, HAProxy.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.state.supervisor_pid];
        for node in &self.state.nodes {
            if let Ok(pid) = std::fs::read_to_string(&node.pid_file) {
                pids.push(pid.trim().parse().unwrap());
            }
        }
        pids.extend(self.state.lb.as_ref().map(|lb| lb.pid));
        pids
    }
}

impl Drop for TestBed {
    fn drop(&mut self) {
        // Closing stdin tells the supervisor to tear everything down.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
