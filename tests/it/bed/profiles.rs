//! The node-profile matrix (issue 12): `hostkeyctl install` with its
//! defaults on sshd set-ups modelled on the distributions' own (fixtures in
//! testbed/profiles, set-ups in testbed/bed.py `PROFILES`). Each profile
//! node runs in its own mount and network namespace, where `/etc` and `/run`
//! are its own, so install finds the config, the reload and the verify
//! address itself, as on a real node; `systemctl` there is the bed's
//! stand-in.
//!
//! Every profile: `--check` reports drift; a failing reload rolls back
//! byte-identical (exit 3); install converges and verifies; a second run
//! changes nothing; `--check` matches; a real ssh client with the canonical
//! known_hosts logs in; `sshd -T` differs only in host key settings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::bed::{BedOptions, Node, Run, SECRET, TestBed, set_fingerprints, snapshot};
use crate::common::support::require;

pub fn profile_bed(profile: &'static str) -> TestBed {
    TestBed::start(BedOptions {
        nodes: 0,
        profiles: vec![profile],
        ..BedOptions::default()
    })
}

/// `program` run inside the node's namespaces with its environment.
pub fn in_node(bed: &TestBed, node: &Node, program: &Path) -> assert_cmd::Command {
    let ns = node.ns_pid.expect("a profile node");
    let mut cmd = assert_cmd::Command::new(require("nsenter"));
    cmd.arg(format!("--mount=/proc/{ns}/ns/mnt"))
        .arg(format!("--net=/proc/{ns}/ns/net"));
    if node.chroot {
        cmd.arg(format!("--root=/proc/{ns}/root"))
            .arg(format!("--wd=/proc/{ns}/root"));
    }
    cmd.arg("--")
        .arg(program)
        .env_remove("HOSTKEYCTL_OUTPUT")
        .env_remove("AWS_PROFILE")
        .envs(bed.aws_env(crate::common::bed::Role::Node))
        .envs(node.env.clone())
        .timeout(Duration::from_secs(120));
    cmd
}

pub fn run(cmd: &mut assert_cmd::Command) -> Run {
    Run::from(cmd.output().unwrap())
}

/// `hostkeyctl install ARGS` on the node, with nothing but its defaults.
pub fn install(bed: &TestBed, node: &Node, args: &[&str]) -> Run {
    let binary = crate::common::support::node_binary();
    run(in_node(bed, node, &binary).arg("install").args(args))
}

/// `sshd -T` on the node, line by line.
fn sshd_t(bed: &TestBed, node: &Node) -> Vec<String> {
    let out = run(in_node(bed, node, &require("sshd")).arg("-T"));
    out.ok();
    out.stdout.lines().map(str::to_owned).collect()
}

/// The fingerprint a real ssh client gets for `algorithm` from the node,
/// or `None` when the server offers no such key.
fn host_key(bed: &TestBed, node: &Node, algorithm: &str) -> Option<String> {
    // In the bed's directory, which a release node's chroot also sees.
    let known_hosts = tempfile::NamedTempFile::new_in(bed.dir()).unwrap();
    let out = run(in_node(bed, node, &require("ssh"))
        .arg("-i")
        .arg(&bed.state.client_key)
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new"])
        .args(["-o", "ConnectTimeout=5", "-o", "HostKeyAlias=node"])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.path().display()))
        .arg("-o")
        .arg(format!("HostKeyAlgorithms={algorithm}"))
        .args(["-p", &node.port.to_string()])
        .arg(format!("root@{}", node.address))
        .arg("true"));
    if out.stderr.contains("no matching host key type") {
        return None;
    }
    assert_eq!(out.code, 0, "ssh -o HostKeyAlgorithms={algorithm}: {}", out.stderr);
    Some(crate::common::support::ssh_keygen_fingerprint(known_hosts.path()))
}

/// The fingerprints served for ed25519, ECDSA P-256 and RSA (the order of
/// `set_fingerprints`), and ECDSA P-384.
pub fn served(bed: &TestBed, node: &Node) -> Vec<Option<String>> {
    [
        "ssh-ed25519",
        "ecdsa-sha2-nistp256",
        "rsa-sha2-512",
        "ecdsa-sha2-nistp384",
    ]
    .iter()
    .map(|a| host_key(bed, node, a))
    .collect()
}

/// Every file install may touch (keys, configs, a symlinked config's
/// target), by path relative to the node's `/etc`: digest and mode, and
/// whether sshd_config is a link.
pub fn files(node: &Node) -> BTreeMap<String, (u64, u32)> {
    let etc = node.root.join("etc");
    let mut out = BTreeMap::new();
    for dir in ["ssh", "ssh/sshd_config.d", "config-mgmt"] {
        let dir = etc.join(dir);
        if dir.is_dir() {
            for (name, digest, mode) in snapshot(&dir) {
                let rel = dir.join(name).strip_prefix(&etc).unwrap().display().to_string();
                out.insert(rel, (digest, mode));
            }
        }
    }
    let link = node.ssh_dir.join("sshd_config").symlink_metadata().unwrap();
    out.insert(
        "ssh/sshd_config is a link".to_owned(),
        (u64::from(link.is_symlink()), 0),
    );
    out
}

/// Puts a fault into the node's stand-in systemd (None clears it).
fn fault(node: &Node, what: Option<&str>) {
    let path = node.root.join("run/standin-systemd/fault");
    match what {
        Some(w) => std::fs::write(path, w).unwrap(),
        None => {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A real ssh login with `StrictHostKeyChecking=yes` and only the secret's
/// known_hosts lines, for the alias `login.example`.
fn login(bed: &TestBed, node: &Node) -> std::process::Output {
    let lines = bed.cli("known-hosts").secret().args(&["--host", "login.example"]).run();
    lines.ok();
    let known_hosts = bed.dir().join("known_hosts.canonical");
    std::fs::write(&known_hosts, &lines.stdout).unwrap();
    in_node(bed, node, &require("ssh"))
        .arg("-i")
        .arg(&bed.state.client_key)
        .args([
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "ConnectTimeout=5",
        ])
        .args(["-o", "HostKeyAlias=login.example", "-o", "UpdateHostKeys=no"])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .args(["-p", &node.port.to_string()])
        .arg(format!("root@{}", node.address))
        .arg("true")
        .output()
        .unwrap()
}

/// Lines of `sshd -T` that changed, as (keyword, line) removed and added.
fn changed_settings(before: &[String], after: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for line in before {
        if !after.contains(line) {
            out.push(format!("- {line}"));
        }
    }
    for line in after {
        if !before.contains(line) {
            out.push(format!("+ {line}"));
        }
    }
    out
}

/// Whether the profile's node has (the bed's stand-in of) systemd: not the
/// no-systemd one, nor the release nodes (a chroot of another Debian).
fn has_systemd(profile: &str) -> bool {
    !matches!(
        profile,
        "no-systemd" | "debian-11" | "debian-13" | "debian-13-penalties"
    )
}

/// `sshd -T`'s `kexalgorithms` changed only on a node whose policy had no
/// post-quantum exchange, and only by hybrids put before the old list.
fn assert_kex_only_gained_a_hybrid(profile: &str, settings: &[String]) {
    let value = |sign: &str| {
        settings
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{sign} kexalgorithms ")))
            .map(str::to_owned)
    };
    match (value("-"), value("+")) {
        (None, None) => {}
        (Some(before), Some(after)) => {
            assert_eq!(profile, "al2023", "only the crypto policy leaves the hybrid out");
            let (added, kept) = after.split_at(after.find(&before).expect("the old list kept whole"));
            assert!(kept == before && !added.is_empty(), "{profile}: {before} -> {after}");
            assert!(
                added
                    .trim_end_matches(',')
                    .split(',')
                    .all(hostkeyctl::scan::warnings::is_post_quantum),
                "{profile}: {added}"
            );
        }
        other => panic!("{profile}: kexalgorithms {other:?}"),
    }
}

/// The whole matrix for one profile.
fn converge(profile: &'static str) {
    let bed = profile_bed(profile);
    let node = bed.state.profiles[0].clone();
    let settings_before = sshd_t(&bed, &node);
    let files_before = files(&node);
    let served_before = served(&bed, &node);
    let shared = profile == "keys-shared";
    let init = if shared {
        bed.init_from_node(SECRET, &node)
    } else {
        bed.init_generated(SECRET)
    };
    let mut set = set_fingerprints(&init);
    set.push(None); // no P-384 key once converged

    assert_check_and_a_failing_reload_change_nothing(&bed, &node, profile, shared, &files_before, &served_before);

    // Converge, verified against an address sshd really listens on.
    let first = install(&bed, &node, &["--secret-id", SECRET]);
    assert_eq!(first.code, 0, "{profile}: {}\n{}", first.stderr, first.stdout);
    let report = first.json();
    assert_eq!(report["result"], "changed", "{profile}: {report}");
    assert_eq!(report["verified"], true, "{profile}: {report}");
    assert_eq!(report["keys_changed"], !shared, "{profile}: {report}");
    // Regression: where systemctl exists but systemd does not run (Debian
    // 13's chroot, a container), probing the units printed systemctl's
    // complaints, four pairs of them, on every install.
    assert!(
        !first.stderr.contains("System has not been booted"),
        "{profile}: {}",
        first.stderr
    );
    assert_eq!(served(&bed, &node), set, "{profile}: sshd does not serve the set");

    // A second run changes nothing.
    let files_after = files(&node);
    let second = install(&bed, &node, &["--secret-id", SECRET]);
    assert_eq!(second.code, 0, "{profile}: {}", second.stderr);
    assert_eq!(second.json()["result"], "unchanged", "{profile}");
    assert_eq!(second.json()["reloaded"], false, "{profile}");
    assert_eq!(files(&node), files_after, "{profile}: a no-op run wrote");
    let check = install(&bed, &node, &["--secret-id", SECRET, "--check"]);
    assert_eq!(check.code, 0, "{profile}: {}", check.stderr);
    assert_eq!(check.json()["result"], "match", "{profile}");

    // A real client with the canonical known_hosts logs in.
    let out = login(&bed, &node);
    assert!(
        out.status.success(),
        "{profile}: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Only host key settings changed, in what sshd applies and on disk;
    // and the key exchanges only where a crypto policy left out the
    // post-quantum one (issue 57), every one of its list kept, in order.
    let settings = changed_settings(&settings_before, &sshd_t(&bed, &node));
    assert_kex_only_gained_a_hybrid(profile, &settings);
    let other: Vec<&String> = settings
        .iter()
        .filter(|l| !l[2..].starts_with("hostkey ") && !l[2..].starts_with("hostkeyalgorithms "))
        .filter(|l| !l[2..].starts_with("kexalgorithms "))
        .collect();
    assert!(
        other.is_empty(),
        "{profile}: sshd -T changed beyond host keys: {other:?}"
    );
    assert!(
        settings.iter().any(|l| l[2..].starts_with("hostkeyalgorithms ")),
        "{profile}: HostKeyAlgorithms is not pinned: {settings:?}"
    );
    for (path, before) in &files_before {
        let after = files_after.get(path);
        let name = Path::new(path).file_name().unwrap().to_string_lossy().into_owned();
        let allowed = name.starts_with("ssh_host_") || name == "sshd_config";
        assert!(allowed || after == Some(before), "{profile}: {path} changed");
    }
    assert_config_only_gained_the_block(&node, profile);
}

/// `--check` changes nothing and reports what would change; a failing
/// reload rolls back byte-identical, exit 3, sshd serving what it did.
fn assert_check_and_a_failing_reload_change_nothing(
    bed: &TestBed,
    node: &Node,
    profile: &str,
    shared: bool,
    files_before: &BTreeMap<String, (u64, u32)>,
    served_before: &[Option<String>],
) {
    // --check changes nothing and reports what would change.
    let check = install(bed, node, &["--secret-id", SECRET, "--check"]);
    let (code, result) = if shared { (0, "match") } else { (1, "drift") };
    assert_eq!(check.code, code, "{profile}: {}\n{}", check.stderr, check.stdout);
    assert_eq!(
        check.json()["result"],
        result,
        "{profile}: {}\n{}",
        check.stdout,
        check.stderr
    );
    assert_eq!(files(node), *files_before, "{profile}: --check wrote");

    // A failing reload rolls back byte-identical, exit 3.
    let failing = if !has_systemd(profile) {
        // No unit to fail: hostkeyctl signals sshd itself. A reload
        // command that fails stands in for it.
        install(bed, node, &["--secret-id", SECRET, "--reload-command", "exit 1"])
    } else {
        fault(node, Some("reload-fails"));
        let run = install(bed, node, &["--secret-id", SECRET]);
        fault(node, None);
        run
    };
    assert_eq!(failing.code, 3, "{profile}: {}\n{}", failing.stderr, failing.stdout);
    assert_eq!(failing.json()["result"], "rolled_back", "{profile}");
    assert_eq!(
        files(node),
        *files_before,
        "{profile}: the rollback is not byte-identical"
    );
    assert_eq!(
        served(bed, node),
        served_before,
        "{profile}: sshd serves other keys after the rollback"
    );
}

/// sshd_config (through a link, if it is one) is the same text, with
/// hostkeyctl's block on top when the config has no drop-in directory.
fn assert_config_only_gained_the_block(node: &Node, profile: &str) {
    let fixture = match profile {
        "ubuntu-24.04" | "ubuntu-20.04" | "al2023" | "al2" => profile,
        _ => "debian-12",
    };
    let shipped = if node.chroot {
        // The release's own stock sshd_config, as its package installs it.
        std::fs::read_to_string(node.root.join("stock/sshd_config")).unwrap()
    } else {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("testbed/profiles/{fixture}/etc/ssh/sshd_config")),
        )
        .unwrap()
    };
    let now = std::fs::read_to_string(node.ssh_dir.join("sshd_config")).unwrap();
    assert!(now.contains(&shipped), "{profile}: the distribution's text was changed");
    let drop_in: PathBuf = node.ssh_dir.join("sshd_config.d/00-hostkeyctl.conf");
    if profile == "al2" {
        assert!(
            now.starts_with("# BEGIN hostkeyctl"),
            "{profile}: no inline block on top"
        );
        assert!(!drop_in.exists(), "{profile}: a drop-in sshd does not read");
    } else {
        assert!(
            !now.contains("# BEGIN hostkeyctl"),
            "{profile}: the main config was edited"
        );
        assert!(drop_in.exists(), "{profile}: no drop-in");
    }
}

macro_rules! matrix {
    ($($(#[$doc:meta])* $name:ident => $profile:literal,)*) => {
        $(
            $(#[$doc])*
            #[test]
            fn $name() {
                converge($profile);
            }
        )*
    };
}

matrix! {
    /// Debian 12 and Ubuntu 22.04: drop-in directory, `ssh.service`.
    debian_12 => "debian-12",
    /// Regression: socket activation (Ubuntu 22.10 and later). There is no
    /// running service and no pid file until the first connection; install
    /// refused to start. Now it reloads the service if it runs, else lets
    /// the next connection start it on the new files, and verifies.
    ubuntu_24_04_socket_activation => "ubuntu-24.04",
    /// Ubuntu 20.04's default config.
    ubuntu_20_04 => "ubuntu-20.04",
    /// Amazon Linux 2023 and RHEL 9: `sshd.service`, and `50-redhat.conf`
    /// includes the crypto-policies file that sets HostKeyAlgorithms.
    al2023_crypto_policies => "al2023",
    /// Amazon Linux 2: no Include, explicit HostKey lines.
    al2_no_include => "al2",
    /// No systemd at all (a container, another init): the pid file.
    no_systemd_pid_file => "no-systemd",
    /// Regression: IPv6 disabled with the stock listen settings. sshd -T
    /// lists `[::]:22` first; install verified against `[::1]:22`, failed
    /// and rolled back on every run.
    ipv6_disabled => "ipv6-off",
    /// sshd listens on one specific address only.
    listen_address => "listen-address",
    /// sshd listens on port 2222.
    port_2222 => "port-2222",
    /// A Match block with ForceCommand at the end of the main config.
    match_force_command => "match-forcecommand",
    /// sshd_config is a symlink (config management); it stays one.
    symlinked_config => "symlinked-config",
    /// The node already has the canonical keys: only the pin is written.
    keys_already_shared => "keys-shared",
    /// The node lacks an ECDSA key: install creates it.
    missing_key_type => "missing-key-type",
    /// Debian 11's own OpenSSH 8.4p1 (its sshd, ssh and ssh-keygen, in a
    /// chroot of Debian's packages), stock config: close to Ubuntu 20.04's
    /// 8.2 and RHEL 9's 8.7.
    debian_11_openssh_8_4 => "debian-11",
    /// Debian 13's own OpenSSH 10.0p2, stock config: PerSourcePenalties on,
    /// sshd-session, ML-KEM key exchange first, no DSA.
    debian_13_openssh_10_0 => "debian-13",
}

/// `program` (a host binary: the admin's `hostkeyctl`) in the node's
/// network namespace only, as a host beside the node would run it.
pub fn in_net(node: &Node, program: &Path) -> assert_cmd::Command {
    let ns = node.ns_pid.expect("a profile node");
    let mut cmd = assert_cmd::Command::new(require("nsenter"));
    cmd.arg(format!("--net=/proc/{ns}/ns/net"))
        .arg("--")
        .arg(program)
        .env_remove("HOSTKEYCTL_OUTPUT")
        .timeout(Duration::from_secs(120));
    cmd
}

/// Regression: socket activation (Ubuntu 22.10 and later) before the
/// first connection, as when a lifecycle script installs at boot: no
/// service runs and there is no pid file, and install refused to start.
/// It installs now; the verifying connection starts sshd on the new files.
#[test]
fn socket_activated_node_installs_before_its_first_connection() {
    let bed = profile_bed("ubuntu-24.04");
    let node = bed.state.profiles[0].clone();
    let service_state = || {
        let out = run(in_node(&bed, &node, Path::new("systemctl")).args(["is-active", "ssh.service"]));
        out.stdout.trim().to_owned()
    };
    assert_eq!(service_state(), "inactive", "something connected before the test");
    let init = bed.init_generated(SECRET);
    let run = install(&bed, &node, &["--secret-id", SECRET]);
    run.ok();
    let report = run.json();
    assert_eq!(report["result"], "changed", "{report}");
    assert_eq!(report["verified"], true, "{report}");
    assert_eq!(
        service_state(),
        "active",
        "the verifying connection did not start ssh.service"
    );
    let mut set = set_fingerprints(&init);
    set.push(None);
    assert_eq!(served(&bed, &node), set);
}

/// Regression: sshd serves an unmanaged ECDSA P-384 key, and a drop-in
/// that sorts before hostkeyctl's sets HostKeyAlgorithms. The install is
/// stopped at the settings check and rolled back cleanly: exit 3 with the
/// files byte-identical and the P-384 key still served. It was reported as
/// "rollback failed" (exit 5), because the rollback was checked against the
/// managed key files only.
#[test]
fn a_clean_rollback_beside_an_unmanaged_key_type_exits_3() {
    let bed = profile_bed("unmanaged-p384");
    let node = bed.state.profiles[0].clone();
    let before = files(&node);
    let served_before = served(&bed, &node);
    assert!(served_before[3].is_some(), "the profile serves no P-384 key");
    bed.init_generated(SECRET);
    let run = install(&bed, &node, &["--secret-id", SECRET]);
    run.code(3);
    let report = run.json();
    assert_eq!(report["result"], "rolled_back", "{report}");
    assert!(
        report["error"]
            .as_str()
            .unwrap()
            .contains("another HostKeyAlgorithms line"),
        "{report}"
    );
    assert_eq!(files(&node), before);
    assert_eq!(served(&bed, &node), served_before);
}

/// Regression: a run killed between writing and reloading (here by the
/// reload itself) left converged files, and the next run reported
/// "unchanged" without reloading: during a rotation's overlap sshd never
/// served the next keys, which a handshake cannot see. The next run now
/// reloads and verifies, and a client with UpdateHostKeys learns the keys.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_at_the_reload_is_finished_by_the_next() {
    let bed = profile_bed("debian-12");
    let node = bed.state.profiles[0].clone();
    let current = bed.init_generated(SECRET);
    let current_id = current["version_id"].as_str().unwrap().to_owned();
    install(&bed, &node, &["--secret-id", SECRET]).ok();
    // The next set, staged AWSPENDING as a rotation would.
    let next = bed.init_generated("hostkeys/hk-next");
    let document = bed.secret_value("hostkeys/hk-next").await;
    let next_id = bed.put_secret_value(SECRET, &document, "AWSPENDING").await;
    let args = [
        "--secret-id",
        SECRET,
        "--version-id",
        &current_id,
        "--next-version-id",
        &next_id,
    ];

    fault(&node, Some("reload-kills-caller"));
    let killed = install(&bed, &node, &args);
    fault(&node, None);
    killed.code(-1);
    let check = install(&bed, &node, &["--secret-id", SECRET, "--check"]);
    check.code(1);
    let marker = node.root.join("var/lib/hostkeyctl/reload-pending");
    assert!(marker.exists(), "no reload-pending marker after the kill");

    let next_run = install(&bed, &node, &args);
    next_run.ok();
    assert_eq!(next_run.json()["result"], "reloaded", "{}", next_run.stdout);
    assert!(!marker.exists());

    // sshd really serves the next keys: a client learns them.
    let lines = bed.cli("known-hosts").secret().args(&["--host", "login.example"]).run();
    let known_hosts = bed.dir().join("known_hosts.update");
    std::fs::write(&known_hosts, &lines.stdout).unwrap();
    let out = in_node(&bed, &node, &require("ssh"))
        .arg("-i")
        .arg(&bed.state.client_key)
        .args(["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes"])
        .args(["-o", "HostKeyAlias=login.example", "-o", "UpdateHostKeys=yes"])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .arg(format!("root@{}", node.address))
        .arg("true")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let learned = crate::common::support::run_ok(
        std::process::Command::new(require("ssh-keygen"))
            .arg("-lf")
            .arg(&known_hosts),
    );
    for fp in set_fingerprints(&next).into_iter().flatten() {
        assert!(learned.contains(&fp), "the client did not learn {fp}:\n{learned}");
    }
}
