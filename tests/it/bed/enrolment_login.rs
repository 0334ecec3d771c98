//! Login nodes that serve the canonical set gain a certificate like every
//! other node, on a listener of their own for the cluster
//! (`enroll --login-node --cluster-port`, docs/cluster-trust.md, "Login
//! nodes"): the cluster reaches them strictly by every name, and users
//! behind the load balancer (port 22) still meet the set alone, with no
//! certificate offered.

use crate::bed::enrolment::{cluster_bed, enroll_with_args, imds_of, instance_of, listed, names_of, principals_listed};
use crate::bed::enrolment_cluster::pairs;
use crate::common::bed::{Node, Run, SECRET, TestBed, snapshot, wait_until};
use crate::common::support::require;

const PORT: &str = "2222";

/// The certificate types `ssh-keyscan -c` sees at `address`:`port`.
fn certificates_offered(address: &str, port: &str) -> Vec<String> {
    let out = std::process::Command::new(require("ssh-keyscan"))
        .args(["-c", "-p", port, address])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

/// Strict logins from each of `from` to each of `to` by every name
/// ([`pairs`]): each succeeds with no warning.
fn strict_logins(bed: &TestBed, from: &[&Node], to: &[&Node]) {
    let failed = pairs(bed, from, to);
    assert!(failed.is_empty(), "{failed:#?}");
}

/// A strict user with the set's lines for `node` logs in on its port 22
/// (what the load balancer forwards to).
fn set_user_logs_in(bed: &TestBed, node: &Node) {
    let lines = bed.cli("known-hosts").secret().args(&["--host", &node.address]).run();
    lines.ok();
    let known_hosts = bed.dir().join("set_known_hosts");
    std::fs::write(&known_hosts, &lines.stdout).unwrap();
    let out = std::process::Command::new(require("ssh"))
        .args(["-F", "/dev/null", "-i"])
        .arg(&bed.state.client_key)
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o"])
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .arg(format!("root@{}", node.address))
        .arg("true")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The listener's configuration copies (`config-*`) in `dir`.
fn copies_in(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().starts_with("config-"))
        .collect()
}

/// Runs `enrol` while the node's main config starts with `include` (its
/// arguments), which names a directory `odd dir` holding `tight.conf`:
/// `MaxSessions 7` and a `Match` block; the config is put back after.
fn with_an_include(node: &Node, include: &str, enrol: impl FnOnce() -> Run) -> Run {
    let main = node.ssh_dir.join("sshd_config");
    let odd = node.ssh_dir.join("odd dir");
    std::fs::create_dir_all(&odd).unwrap();
    std::fs::write(
        odd.join("tight.conf"),
        "MaxSessions 7\nMatch User nobody\n    ForceCommand /bin/false\n",
    )
    .unwrap();
    let text = std::fs::read_to_string(&main).unwrap();
    let include = include.replace("DIR", &node.ssh_dir.display().to_string());
    std::fs::write(&main, format!("Include {include}\n{text}")).unwrap();
    let run = enrol();
    std::fs::write(&main, text).unwrap();
    run
}

/// Stops the login nodes' listeners when the test ends, however it ends.
struct Listeners(Vec<std::path::PathBuf>);

impl Drop for Listeners {
    fn drop(&mut self) {
        for pid_file in &self.0 {
            if let Ok(pid) = std::fs::read_to_string(pid_file) {
                let _ = std::process::Command::new("kill").arg(pid.trim()).status();
            }
        }
    }
}

/// The listener's pid, once its pid file names one (sshd rewrites the
/// file as it comes back from a SIGHUP).
fn listener_pid(node: &Node) -> String {
    let file = node.root.join("run/hostkeyctl-cluster-sshd.pid");
    let mut pid = String::new();
    wait_until("the listener's pid file", std::time::Duration::from_secs(10), || {
        pid = std::fs::read_to_string(&file).unwrap_or_default().trim().to_owned();
        !pid.is_empty()
    });
    pid
}

/// `enroll` on `node` with the login nodes' route (`route`), as a login
/// node with its listener run directly when `login_node`.
fn enrol(bed: &TestBed, arn: &str, node: &Node, route: &[&str], login_node: bool) -> Run {
    let mut args = route.to_vec();
    if login_node {
        args.extend(["--login-node", "--listener-service", "direct"]);
    }
    let imds = imds_of(bed, &instance_of(bed, &node.address));
    enroll_with_args(bed, node, arn, &imds, &args)
}

/// The set's keys and the main sshd's configuration, as files.
fn keys_and_sshd(node: &Node) -> Vec<(String, u64, u32)> {
    snapshot(&node.ssh_dir)
        .into_iter()
        .filter(|(name, ..)| name.starts_with("ssh_host_") || name.starts_with("sshd_config"))
        .collect()
}

/// The login node's listener offers its certificates, for exactly AWS's
/// names, and its main sshd none.
fn serves_its_certificates_on_the_listener_alone(node: &Node) {
    wait_until(
        "the listener offers its certificates",
        std::time::Duration::from_secs(10),
        || certificates_offered(&node.address, PORT).len() == 2,
    );
    let dir = node.ssh_dir.join("hostkeyctl-cluster");
    for kind in ["ed25519", "ecdsa"] {
        let text = listed(&dir.join(format!("ssh_host_{kind}_key-cert.pub")));
        assert_eq!(principals_listed(&text), names_of(&node.address), "{kind}");
    }
    assert!(
        certificates_offered(&node.address, "22").is_empty(),
        "the main sshd offers a certificate"
    );
}

/// `sshd -T -C connection` of the listener's configuration on `node`.
fn listener_settings(node: &Node, connection: &str) -> String {
    let out = std::process::Command::new("/usr/sbin/sshd")
        .args(["-T", "-C", connection, "-f"])
        .arg(node.ssh_dir.join("hostkeyctl-cluster/sshd_config"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two login nodes serving the set, and a compute node. Each login node
/// enrols with a listener for the cluster on its own port:
/// - its own keys there, certified for exactly AWS's names; the set's keys
///   and the main sshd untouched;
/// - the main sshd (what the load balancer forwards to) offers no
///   certificate, and a strict user with the set's lines logs in there;
/// - every node reaches every other strictly by every name and address,
///   the login nodes on the listener, through the login-hosts route;
/// - a renewal reloads the listener (same pid, a SIGHUP in its log) and
///   keeps one copy of the configuration; a change to the main config
///   reaches the listener, `Match` blocks of a quoted `Include` too;
/// - a main config the copy cannot follow is refused, named, and the
///   listener stopped until a run that checks; so is
///   the listener of a node whose main sshd does not run.
#[test]
fn login_nodes_serve_the_cluster_a_certificate_on_their_own_listener_and_users_the_set_alone() {
    let (bed, _runtime, arn) = cluster_bed(3, "", "ecdsa");
    let nodes = &bed.state.nodes;
    let (compute, logins) = (&nodes[0], &nodes[1..]);
    let _stop = Listeners(
        logins
            .iter()
            .map(|n| n.root.join("run/hostkeyctl-cluster-sshd.pid"))
            .collect(),
    );
    bed.init_generated(SECRET);
    for node in logins {
        bed.install_on(node, &["--secret-id", SECRET]).ok();
    }
    let login_hosts: Vec<String> = logins.iter().flat_map(|n| names_of(&n.address)).collect();
    let login_hosts = login_hosts.join(",");
    let route = ["--login-hosts", login_hosts.as_str(), "--cluster-port", PORT];
    enrol(&bed, &arn, compute, &route, false).ok();
    for node in logins {
        let before = keys_and_sshd(node);
        let run = enrol(&bed, &arn, node, &route, true);
        run.ok();
        let report = run.json();
        assert_eq!(report["login_node"], true, "{report}");
        assert_eq!(report["cluster_listener_port"], 2222, "{report}");
        serves_its_certificates_on_the_listener_alone(node);
        assert_eq!(keys_and_sshd(node), before, "the set or the main sshd changed");
        // What the load balancer forwards to (TCP, port 22): the set alone
        // (the bed's balancer also fronts the compute node, so each login
        // node is asked directly).
        set_user_logs_in(&bed, node);
    }
    let all: Vec<&Node> = nodes.iter().collect();
    strict_logins(&bed, &all, &all);

    // A renewal reloads the listener in place (its pid, a new
    // certificate); an edit of the main config reaches it, a Match block in
    // a quoted Include of a directory with a space too.
    let login_a = &logins[0];
    let pid = listener_pid(login_a);
    let hups = || {
        let log = std::fs::read_to_string(login_a.ssh_dir.join("hostkeyctl-cluster/sshd.log")).unwrap_or_default();
        log.matches("Received SIGHUP").count()
    };
    let before = hups();
    let renewed = with_an_include(login_a, "\"DIR/odd dir/*.conf\"", || {
        enrol(&bed, &arn, login_a, &route, true)
    });
    renewed.ok();
    wait_until("the listener reloads", std::time::Duration::from_secs(10), || {
        hups() > before
    });
    assert_eq!(listener_pid(login_a), pid, "the listener restarted");
    let dir = login_a.ssh_dir.join("hostkeyctl-cluster");
    assert_eq!(copies_in(&dir).len(), 1, "older copies of the configuration stayed");
    let settings = listener_settings(login_a, "user=nobody,host=x,addr=127.0.0.1");
    assert!(settings.contains("\nmaxsessions 7\n"), "{settings}");
    assert!(settings.contains("\nforcecommand /bin/false\n"), "{settings}");
    let listen = format!("\nlistenaddress {}:2222\n", login_a.address);
    assert!(settings.contains(&listen) && !settings.contains(":22\n"), "{settings}");

    // An Include the copy cannot follow as sshd would is refused, named,
    // and the listener stopped (it would no longer match the main sshd);
    // the next good run starts it again.
    let refused = with_an_include(login_a, "DIR/*/tight.conf", || enrol(&bed, &arn, login_a, &route, true));
    assert_eq!(refused.code, 3, "{}\n{}", refused.stderr, refused.stdout);
    for said in [
        "a wildcard in a directory",
        "the listener is stopped until a run succeeds",
    ] {
        assert!(refused.stderr.contains(said), "{said}: {}", refused.stderr);
    }
    wait_until("the listener stops", std::time::Duration::from_secs(10), || {
        certificates_offered(&login_a.address, PORT).is_empty()
    });
    enrol(&bed, &arn, login_a, &route, true).ok();
    serves_its_certificates_on_the_listener_alone(login_a);

    // The listener never runs without the main sshd: with the main sshd's
    // pid file naming no sshd, a run stops it.
    let login_b = &logins[1];
    let main_pid = login_b.root.join("run/sshd.pid");
    let held = std::fs::read_to_string(&main_pid).unwrap();
    std::fs::write(&main_pid, "999999999\n").unwrap();
    let stopped = enrol(&bed, &arn, login_b, &route, true);
    std::fs::write(&main_pid, held).unwrap();
    assert_eq!(stopped.code, 3, "{}\n{}", stopped.stderr, stopped.stdout);
    assert!(
        stopped.stderr.contains("the main sshd does not run"),
        "{}",
        stopped.stderr
    );
    wait_until("the listener stops", std::time::Duration::from_secs(10), || {
        certificates_offered(&login_b.address, PORT).is_empty()
    });
    enrol(&bed, &arn, login_b, &route, true).ok();
    serves_its_certificates_on_the_listener_alone(login_b);
    strict_logins(&bed, &[compute, &logins[1]], &[login_a]);
    revoking_a_login_node_revokes_its_own_keys_alone(&bed, &arn, &route, compute, login_a, login_b);
}

/// The base64 of each public key file `pattern` matches in `dir`.
fn public_keys(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("ssh_host_") && name.ends_with("_key.pub")
        })
        .map(|e| {
            let line = std::fs::read_to_string(e.path()).unwrap();
            line.split_whitespace().nth(1).unwrap().to_owned()
        })
        .collect()
}

/// L2: a compromised login node is revoked (with a rotation of the set:
/// docs/security.md): its own cluster keys are revoked, never the set
/// that every login node serves; the other login node is still reached
/// strictly, and users behind the load balancer meet the set on both.
fn revoking_a_login_node_revokes_its_own_keys_alone(
    bed: &TestBed,
    arn: &str,
    route: &[&str],
    compute: &Node,
    kept: &Node,
    revoked: &Node,
) {
    let instance = instance_of(bed, &revoked.address);
    crate::bed::enrolment::enrolment(bed, &format!("revoke --instance {instance}")).ok();
    enrol(bed, arn, compute, route, false).ok();
    enrol(bed, arn, kept, route, true).ok();
    serves_its_certificates_on_the_listener_alone(kept);
    let listed = std::fs::read_to_string(compute.ssh_dir.join("ssh_known_hosts")).unwrap();
    let revoked_lines: Vec<&str> = listed.lines().filter(|l| l.starts_with("@revoked ")).collect();
    let own = public_keys(&revoked.ssh_dir.join("hostkeyctl-cluster"));
    assert_eq!(own.len(), 2);
    for key in &own {
        assert!(
            revoked_lines.iter().any(|l| l.contains(key.as_str())),
            "{key}: {listed}"
        );
    }
    let set = public_keys(&revoked.ssh_dir);
    assert_eq!(set.len(), 3, "the set's public files");
    for key in set {
        assert!(!listed.contains(&key), "a key of the set is revoked: {listed}");
    }
    assert_eq!(revoked_lines.len(), own.len(), "{listed}");
    strict_logins(bed, &[compute], &[kept]);
    let refused = pairs(bed, &[compute], &[revoked]);
    assert_eq!(refused.len(), names_of(&revoked.address).len(), "{refused:#?}");
    for node in [kept, revoked] {
        set_user_logs_in(bed, node);
    }
}
