//! `hostkeyctl install` on real sshd nodes started with `-r`, so only a
//! real reload changes the keys they serve.

use std::process::Command;

use crate::common::bed::{
    BedOptions, Node, Run, SECRET, TestBed, offers, private_lines, served, set_fingerprints, snapshot,
};
use crate::common::support::require;

pub(super) fn bed() -> TestBed {
    TestBed::start(BedOptions::nodes(2).no_reexec())
}

/// [`bed`] with node 1's keys adopted as the set (`init`'s report), so
/// that node 2 serves others.
pub(super) fn adopted() -> (TestBed, serde_json::Value) {
    let bed = bed();
    let init = bed.init_from_node(SECRET, &bed.state.nodes[0]);
    (bed, init)
}

pub(super) fn sighups(node: &Node) -> usize {
    let log = std::fs::read_to_string(node.root.join("sshd.log")).unwrap_or_default();
    log.matches("Received SIGHUP").count()
}

pub(super) fn assert_no_leftovers(node: &Node) {
    for dir in [node.ssh_dir.clone(), node.ssh_dir.join("sshd_config.d")] {
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".hostkeyctl"))
            .collect();
        assert!(names.is_empty(), "leftovers in {}: {names:?}", dir.display());
    }
}

#[test]
fn a_fresh_node_converges_and_a_second_run_changes_nothing() {
    let (bed, init) = adopted();
    let node = &bed.state.nodes[1];
    let expected = set_fingerprints(&init);
    assert_ne!(served(node), expected);

    let first = bed.cli("install").on(node).secret().run();
    first.ok();
    let report = first.json();
    assert_eq!(report["result"], "changed", "{report}");
    assert_eq!(report["reloaded"], true);
    assert_eq!(report["verified"], true);
    assert_eq!(served(node), expected, "sshd does not serve the set after install");
    assert_eq!(sighups(node), 1);
    assert_no_leftovers(node);

    let files_before = snapshot(&node.ssh_dir);
    let second = bed.cli("install").on(node).secret().run();
    second.ok();
    assert_eq!(second.json()["result"], "unchanged");
    assert_eq!(second.json()["reloaded"], false);
    assert_eq!(snapshot(&node.ssh_dir), files_before, "a no-op install wrote files");
    assert_eq!(sighups(node), 1, "a no-op install reloaded sshd");
    // --output table: the summary on stdout, no JSON (outside SSM).
    let table = bed.cli("install").on(node).secret().args(&["--output", "table"]).run();
    table.ok();
    assert!(
        table.stdout.starts_with("version ") && table.stdout.contains("nothing to do") && !table.stdout.contains('{'),
        "{}",
        table.stdout
    );

    // The new files keep Debian's conventions.
    for (name, _, mode) in snapshot(&node.ssh_dir) {
        if name.starts_with("ssh_host_") {
            assert_eq!(mode, if name.ends_with(".pub") { 0o644 } else { 0o600 }, "{name}");
        }
    }
    // --check agrees, changing nothing.
    let check = bed.cli("install").on(node).secret().args(&["--check"]).run();
    check.ok();
    assert_eq!(check.json()["result"], "match");
    let other = &bed.state.nodes[0];
    let other_check = bed.cli("install").on(other).secret().args(&["--check"]).run();
    // Node 1 has the keys but not the HostKeyAlgorithms pin yet: fine; what
    // it serves for the managed types matches.
    other_check.ok();
    assert_metrics_follow_the_check(&bed, node);
}

#[test]
fn check_reports_drift_on_a_node_with_other_keys() {
    let bed = bed();
    let init = bed.init_generated(SECRET);
    let fps: Vec<String> = set_fingerprints(&init).into_iter().flatten().collect();
    let node = &bed.state.nodes[0];
    let mut args = vec!["--check"];
    for fp in &fps {
        args.extend(["--expect", fp.as_str()]);
    }
    // --check with --expect alone reads no secret.
    let run = bed.install_on(node, &args);
    run.code(1);
    assert_eq!(run.json()["result"], "drift");
    assert!(run.stderr.contains("expected"), "{}", run.stderr);
}

#[test]
fn unmanaged_key_types_stop_being_served() {
    let (bed, _) = adopted();
    let node = &bed.state.nodes[1];
    // The image baked in an extra ECDSA P-384 host key.
    let extra = node.ssh_dir.join("ssh_host_ecdsa384_key");
    let made = Command::new(require("ssh-keygen"))
        .args(["-q", "-t", "ecdsa", "-b", "384", "-N", "", "-f"])
        .arg(&extra)
        .status()
        .unwrap();
    assert!(made.success());
    let config = std::fs::read_to_string(&node.sshd_config).unwrap();
    std::fs::write(&node.sshd_config, format!("{config}HostKey {}\n", extra.display())).unwrap();
    bed.start_node(&node.name);
    assert!(
        offers(node, "ecdsa-sha2-nistp384", &bed.state.client_key),
        "the extra key is served at first"
    );

    let run = bed.cli("install").on(node).secret().run();
    run.ok();
    assert!(
        !offers(node, "ecdsa-sha2-nistp384", &bed.state.client_key),
        "the unmanaged key is still served"
    );
    assert!(
        offers(node, "ecdsa-sha2-nistp256", &bed.state.client_key),
        "the managed ecdsa key must still be served"
    );
    assert!(extra.exists(), "the key file itself is left alone");
}

#[test]
fn a_config_without_include_gets_an_inline_block() {
    let (bed, init) = adopted();
    let node = &bed.state.nodes[1];
    let config = std::fs::read_to_string(&node.sshd_config).unwrap();
    let without: String = config
        .lines()
        .filter(|l| !l.starts_with("Include"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&node.sshd_config, &without).unwrap();
    bed.start_node(&node.name);

    let run = bed.cli("install").on(node).secret().run();
    run.ok();
    let after = std::fs::read_to_string(&node.sshd_config).unwrap();
    assert!(after.starts_with("# BEGIN hostkeyctl"), "{after}");
    assert!(after.ends_with(&without), "the rest of the config changed");
    assert_eq!(served(node), set_fingerprints(&init));
    let again = bed.cli("install").on(node).secret().run();
    assert_eq!(again.json()["result"], "unchanged");
}

#[test]
fn private_key_bytes_never_reach_stdout_or_stderr() {
    let (bed, _) = adopted();
    let node = &bed.state.nodes[1];
    let secret_lines = private_lines(&bed.state.nodes[0].ssh_dir);
    let old_lines = private_lines(&node.ssh_dir);
    let runs: Vec<Run> = vec![
        bed.cli("install").on(node).secret().args(&["-vvv"]).run(),
        bed.cli("install").on(node).secret().args(&["-vvv"]).run(),
        bed.cli("install")
            .on(&bed.state.nodes[0])
            .secret()
            .args(&["--reload-command", "false", "-vvv"])
            .run(),
        bed.cli("install").on(node).secret().args(&["--check", "-vvv"]).run(),
    ];
    // Regression (hardening finding 7): at trace level with the SDK's
    // sensitive-body logging switched on, GetSecretValue's answer (the
    // private keys) was printed. hostkeyctl now refuses to start then, and
    // filters the SDK's body logging out at any level.
    let trace = |sensitive: bool| {
        // status is the admin's: the node's settings and key stay out.
        let mut env: Vec<(String, String)> = vec![("HOSTKEYCTL_LOG".into(), "trace".into())];
        if sensitive {
            env.push(("LOG_SENSITIVE_BODIES".into(), "true".into()));
        }
        bed.run_env(&["status", "--secret-id", SECRET, "--output", "json"], &env)
    };
    let refused = trace(true);
    refused.code(2);
    assert!(refused.stderr.contains("LOG_SENSITIVE_BODIES"), "{}", refused.stderr);
    let traced = trace(false);
    traced.ok();
    assert!(
        traced.stderr.lines().count() > 20,
        "trace logging is not on: {}",
        traced.stderr
    );
    let runs: Vec<Run> = runs.into_iter().chain([refused, traced]).collect();
    for (i, run) in runs.iter().enumerate() {
        for (j, line) in secret_lines.iter().chain(&old_lines).enumerate() {
            assert!(
                !run.stdout.contains(line.as_str()),
                "key material (line {j}) on stdout of run {i}"
            );
            if let Some(at) = run.stderr.find(line.as_str()) {
                let start = run.stderr[..at].rfind('\n').map_or(0, |n| n + 1);
                let context: String = run.stderr[start..at].chars().take(200).collect();
                panic!("key material (line {j}) on stderr of run {i}, after: {context}");
            }
        }
    }
}

/// What the probe thread of the kill campaign counts.
type ProbeCounters = (
    std::thread::JoinHandle<()>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
);

/// ssh-keyscan for all three key types in a loop until `stop`: probes run,
/// refusals (sshd re-executing), and any answer with fewer keys than banners.
fn keyscan_probe(address: String, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> ProbeCounters {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (probes, refused) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    let probe = {
        let (probes, refused, failures) = (probes.clone(), refused.clone(), failures.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let out = Command::new(require("ssh-keyscan"))
                    .args(["-T", "5", "-t", "rsa,ecdsa,ed25519", &address])
                    .output()
                    .unwrap();
                probes.fetch_add(1, Ordering::Relaxed);
                let keys = String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .count();
                let stderr = String::from_utf8_lossy(&out.stderr).to_string();
                // ssh-keyscan prints each connection's banner on stderr: a
                // banner without a key is sshd answering but serving none.
                let banners = stderr
                    .lines()
                    .filter(|l| l.starts_with("# ") && l.contains("SSH-"))
                    .count();
                if keys == 3 {
                    continue;
                }
                if keys == banners {
                    // Refused or reset before sshd spoke: sshd re-executing
                    // on SIGHUP closes its listener for a moment.
                    refused.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                failures
                    .lock()
                    .unwrap()
                    .push(format!("{keys} keys after {banners} banners: {stderr}"));
            }
        })
    };
    (probe, probes, refused, failures)
}

/// Kills installs with SIGKILL at 30 points spread evenly over a converging
/// install's run (the same points every time: a failure reproduces; the
/// span shrinks after a run that ended before its kill, so a machine whose
/// load falls still kills most runs midway), each
/// followed by a normal run, while a probe keeps asking sshd (in its
/// default re-exec mode, which reads the key files on every connection)
/// for all three keys. The in-memory tier kills a run at every store call;
/// this kills the real one between its file system and sshd steps.
#[test]
fn installs_killed_at_random_points_always_converge_and_sshd_keeps_serving() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    let bed = TestBed::start(BedOptions::nodes(1));
    let node = bed.state.nodes[0].clone();
    let sets = [bed.init_generated("hostkeys/a"), bed.init_generated("hostkeys/b")];

    // The probe: ssh-keyscan for rsa, ecdsa and ed25519 at once.
    let stop = Arc::new(AtomicBool::new(false));
    let (probe, probes, refused, failures) = keyscan_probe(node.address.clone(), stop.clone());

    let env: Vec<(String, String)> = node.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let spawn_install = |secret: &str| {
        std::process::Command::new(crate::common::support::node_binary())
            .envs(bed.aws_env(crate::common::bed::Role::Node))
            .envs(env.iter().cloned())
            .args(["install", "--secret-id", secret, "--quiet"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    // How long one converging install takes here, to spread the kills over it.
    let start = Instant::now();
    let calibrate = bed.cli("install").on(&node).secret_id("hostkeys/a").run();
    calibrate.ok();
    let mut span = start.elapsed();

    let mut killed_midway = 0;
    const ROUNDS: usize = 30;
    // Round r kills at (r + 1/2) / ROUNDS of the calibrated run.
    let points: Vec<f64> = (0..ROUNDS).map(|r| (r as f64 + 0.5) / ROUNDS as f64).collect();
    for (round, point) in points.iter().enumerate() {
        let secret = ["hostkeys/b", "hostkeys/a"][round % 2];
        let mut child = spawn_install(secret);
        let delay = span.mul_f64(*point);
        std::thread::sleep(delay);
        if child.try_wait().unwrap().is_none() {
            killed_midway += 1;
        } else {
            // The run ended before its kill: installs got faster than the
            // calibration (the machine's load fell). Later points are
            // taken on a shorter span, so the kills stay spread over a
            // run rather than after it.
            span = span.mul_f64(0.8);
        }
        let _ = child.kill();
        let _ = child.wait();
        let after = bed.cli("install").on(&node).secret_id(secret).run();
        assert_eq!(
            after.code, 0,
            "round {round}: the run after a kill failed: {}",
            after.stderr
        );
        let result = after.json()["result"].as_str().unwrap().to_owned();
        assert!(
            ["changed", "unchanged", "reloaded"].contains(&result.as_str()),
            "round {round}: {result}"
        );
        let expected = set_fingerprints(&sets[(round + 1) % 2]);
        assert_eq!(served(&node), expected, "round {round}: not converged after the kill");
        assert_no_leftovers(&node);
    }
    stop.store(true, Ordering::Relaxed);
    probe.join().unwrap();
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "the probe saw sshd serve an incomplete set: {failures:?}"
    );
    let probes = probes.load(Ordering::Relaxed);
    assert!(probes >= 50, "the probe ran only {probes} times");
    assert!(
        killed_midway >= ROUNDS / 2,
        "only {killed_midway} of {ROUNDS} installs were killed before they ended"
    );
    eprintln!(
        "crash campaign: {ROUNDS} kills ({killed_midway} mid-install), {probes} probes, {} cut off before the banner during reloads, install span {span:?}",
        refused.load(Ordering::Relaxed)
    );
}

#[test]
fn reload_is_found_from_sshds_pid_file_without_a_command() {
    let (bed, init) = adopted();
    let node = &bed.state.nodes[1];
    let env: Vec<(String, String)> = node
        .env
        .iter()
        .filter(|(k, _)| k.as_str() != "HOSTKEYCTL_RELOAD_COMMAND")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let run = bed.run_env(&["install", "--secret-id", SECRET], &env);
    run.ok();
    assert_eq!(run.json()["reloaded"], true);
    assert_eq!(sighups(node), 1, "sshd was not sent SIGHUP through its PidFile");
    assert_eq!(served(node), set_fingerprints(&init));
}

/// Issue 29: `install --check --metrics-file` writes node_exporter's
/// textfile: it parses as Prometheus's text format, names the result, and
/// says whether the keys converged; a drift flips both, and so does a run
/// that could not start.
fn assert_metrics_follow_the_check(bed: &TestBed, node: &Node) {
    let dir = bed.dir().join("textfile_collector");
    std::fs::create_dir_all(&dir).unwrap();
    let prom = dir.join("hostkeyctl.prom");
    let path = prom.display().to_string();
    let value = |samples: &[(String, serde_json::Value, f64)], name: &str, label: Option<(&str, &str)>| {
        samples
            .iter()
            .find(|(n, labels, _)| n == name && label.is_none_or(|(k, v)| labels[k] == v))
            .map(|(_, _, v)| *v)
            .unwrap_or_else(|| panic!("no {name} {label:?} in {samples:?}"))
    };
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    bed.cli("install")
        .on(node)
        .secret()
        .args(&["--check", "--metrics-file", &path])
        .run()
        .ok();
    let samples = crate::common::support::prometheus_samples(&prom);
    assert_eq!(
        value(&samples, "hostkeyctl_install_result", Some(("result", "match"))),
        1.0
    );
    assert_eq!(
        value(&samples, "hostkeyctl_install_result", Some(("result", "drift"))),
        0.0
    );
    assert_eq!(value(&samples, "hostkeyctl_host_keys_converged", None), 1.0);
    assert!(value(&samples, "hostkeyctl_last_run_timestamp_seconds", None) >= before.floor());
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(std::fs::metadata(&prom).unwrap().permissions().mode() & 0o777, 0o644);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");

    let wrong = "SHA256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
    let drift = bed
        .cli("install")
        .on(node)
        .args(&["--check", "--expect", wrong, "--metrics-file", &path])
        .run();
    drift.code(1);
    let samples = crate::common::support::prometheus_samples(&prom);
    assert_eq!(
        value(&samples, "hostkeyctl_install_result", Some(("result", "drift"))),
        1.0
    );
    assert_eq!(value(&samples, "hostkeyctl_host_keys_converged", None), 0.0);

    // A run that cannot start (neither --secret-id nor --expect) is
    // `refused`, so the series never go stale without a word.
    bed.cli("install")
        .on(node)
        .args(&["--check", "--metrics-file", &path])
        .run()
        .code(2);
    let samples = crate::common::support::prometheus_samples(&prom);
    assert_eq!(
        value(&samples, "hostkeyctl_install_result", Some(("result", "refused"))),
        1.0
    );
    assert_eq!(value(&samples, "hostkeyctl_host_keys_converged", None), 0.0);
}

/// Regression (review of issue 29): under SSM (`AWS_SSM_INSTANCE_ID`),
/// `install --check --expect` loaded the AWS configuration for the
/// compliance report and, with no region, refused the check itself (exit
/// 2). A check by fingerprints needs no AWS: it runs, and the report it
/// could not send is a warning.
#[test]
fn a_check_by_fingerprints_under_ssm_needs_no_aws_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let out = crate::common::support::check_against_nothing(dir.path())
        .env("AWS_SSM_INSTANCE_ID", "i-0123456789abcdef0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(2), "the check was refused: {stderr}");
    assert!(stderr.contains("warning: cannot report SSM compliance"), "{stderr}");
    let report = hostkeyctl::install::InstallReport::from_output(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert!(!report.checks.is_empty(), "the check ran: {report:?}");
}
