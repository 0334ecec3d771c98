//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `hostkeyctl` binary built by cargo for this test run.
pub fn hostkeyctl() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("hostkeyctl").expect("hostkeyctl binary is built");
    // Never inherit a developer's AWS or output settings.
    cmd.env_remove("HOSTKEYCTL_OUTPUT").env_remove("AWS_PROFILE");
    // Nor the host's connection budget (/run/hostkeyctl/pacing): a bed's
    // role sets the bed's own (TestBed::aws_env), others keep it in the
    // process.
    cmd.env("HOSTKEYCTL_PACING_DIR", "");
    cmd
}

/// [`hostkeyctl`] with no AWS configuration from the host at all (no
/// region, credentials, endpoint, config files or instance metadata), its
/// state under `dir`.
pub fn hostkeyctl_without_aws(dir: &Path) -> assert_cmd::Command {
    let mut cmd = hostkeyctl();
    cmd.env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("AWS_CONFIG_FILE", dir.join("no-config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.join("no-credentials"))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("HOSTKEYCTL_STATE_DIR", dir.join("state"));
    cmd
}

/// `install --check` of a fingerprint against the key files in `dir`
/// (none) and an sshd that is not there (127.0.0.1:9), with no AWS
/// configuration: a check that cannot ask anything.
pub fn check_against_nothing(dir: &Path) -> assert_cmd::Command {
    let mut cmd = hostkeyctl_without_aws(dir);
    cmd.args([
        "install",
        "--check",
        "--expect",
        "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ])
    .arg("--ssh-dir")
    .arg(dir)
    .args(["--verify-address", "127.0.0.1:9", "--verify-timeout", "1"]);
    cmd
}

/// The directory holding the `hostkeyctl` the login nodes run: cargo's own
/// build, or the one `HOSTKEYCTL_NODE_BIN_DIR` names (`make dist-check`
/// runs the node tests again with the shipped node build there).
pub fn node_bin_dir() -> PathBuf {
    match std::env::var_os("HOSTKEYCTL_NODE_BIN_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            assert!(
                dir.join("hostkeyctl").is_file(),
                "HOSTKEYCTL_NODE_BIN_DIR={} holds no hostkeyctl",
                dir.display()
            );
            dir
        }
        None => assert_cmd::cargo::cargo_bin("hostkeyctl").parent().unwrap().to_owned(),
    }
}

/// The `hostkeyctl` the login nodes run (see [`node_bin_dir`]).
pub fn node_binary() -> PathBuf {
    node_bin_dir().join("hostkeyctl")
}

/// The committed fixtures directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Finds a tool the test needs, or fails with how to get it. A missing part
/// is a failure, never a silent pass.
pub fn require(tool: &str) -> PathBuf {
    for dir in ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/sbin", "/bin"] {
        let candidate = Path::new(dir).join(tool);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "{tool} is not installed: run `make test` (it installs openssh-server, openssh-client and haproxy) or `apt-get install openssh-server openssh-client haproxy`"
    );
}

/// Runs a command and returns its stdout, failing the test with its stderr
/// if it exits non-zero.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// `ssh-keygen -lf FILE`'s fingerprint (second field).
pub fn ssh_keygen_fingerprint(file: &Path) -> String {
    let out = run_ok(Command::new(require("ssh-keygen")).arg("-lf").arg(file));
    out.split_whitespace().nth(1).expect("fingerprint field").to_owned()
}

/// The key type and base64 of a public key line, without the comment.
pub fn key_part(line: &str) -> String {
    line.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

/// Makes sure sshd's privilege separation directory exists (sshd -t needs it).
pub fn ensure_privsep_dir() {
    std::fs::create_dir_all("/run/sshd").expect("create /run/sshd (tests run as root)");
}

/// The first line an SSH server at `host:port` sends: its banner.
pub fn banner(host: &str, port: u16) -> String {
    use std::io::BufRead;
    let stream = std::net::TcpStream::connect((host, port)).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(stream).read_line(&mut line).unwrap();
    line.trim_end().to_owned()
}

/// The samples of a Prometheus textfile as Prometheus's own client library
/// parses them (`prometheus_client.parser`): (name, labels, value).
pub fn prometheus_samples(file: &std::path::Path) -> Vec<(String, serde_json::Value, f64)> {
    let script = "import json, sys\n\
from prometheus_client.parser import text_string_to_metric_families as parse\n\
text = open(sys.argv[1]).read()\n\
print(json.dumps([[s.name, s.labels, s.value] for f in parse(text) for s in f.samples]))";
    let out = run_ok(std::process::Command::new("python3").args(["-c", script]).arg(file));
    let samples: Vec<(String, serde_json::Value, f64)> = serde_json::from_str(&out).unwrap();
    samples
}

/// The one item of the JSON array `rows` whose `key` is `value` (a
/// report's node or result), or a panic that shows the array.
pub fn row<'a>(rows: &'a serde_json::Value, key: &str, value: &str) -> &'a serde_json::Value {
    let items = rows.as_array().unwrap_or_else(|| panic!("not an array: {rows}"));
    items
        .iter()
        .find(|r| r[key] == value)
        .unwrap_or_else(|| panic!("no {key} {value} in {rows}"))
}

/// `(item[a], item[b])` of each item of the JSON array `rows`, as text.
pub fn pairs(rows: &serde_json::Value, a: &str, b: &str) -> Vec<(String, String)> {
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_else(|| panic!("no {k} in {v}")).to_owned();
    rows.as_array()
        .unwrap_or_else(|| panic!("not an array: {rows}"))
        .iter()
        .map(|r| (text(r, a), text(r, b)))
        .collect()
}
