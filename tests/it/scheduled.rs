//! Scheduled rotation on the bed (issue 28): Secrets Manager's schedule,
//! the emulator's RotateSecret driving the real `bootstrap` through a
//! stand-in for the Lambda runtime API, the function's role enforced, real
//! sshd and a real `ssh` with `UpdateHostKeys`.

use serde_json::{Value, json};

use crate::common::bed::{BedOptions, Role, TARGETS, TestBed, served};
use crate::rotate::{set_of, stages};

/// The function's ARN on the bed (the emulator's account).
fn function_arn(bed: &TestBed) -> String {
    format!(
        "arn:aws:lambda:{}:123456789012:function:hostkeyctl-rotation",
        bed.state.region
    )
}

/// The rotation function as CloudFormation would make it: the zip's
/// `bootstrap` (HOSTKEYCTL_LAMBDA_BOOTSTRAP) or this crate's binary so named, `rotate`'s options in HOSTKEYCTL_ROTATE_ARGS,
/// signing as iam/rotation-lambda.json.
fn deploy_function(bed: &TestBed, pull: bool) -> String {
    let dir = bed.dir().join("lambda-task");
    std::fs::create_dir_all(&dir).unwrap();
    // The shipped zip's bootstrap under make test (scripts/test.sh), else
    // this build's binary under that name.
    let bootstrap = match std::env::var_os("HOSTKEYCTL_LAMBDA_BOOTSTRAP") {
        Some(shipped) => std::path::PathBuf::from(shipped),
        None => {
            let copy = dir.join("bootstrap");
            std::fs::copy(assert_cmd::cargo::cargo_bin("hostkeyctl"), &copy).unwrap();
            copy
        }
    };
    let mut options = vec!["--max-concurrency", "100%"];
    options.extend(TARGETS);
    if pull {
        options.push("--pull");
    }
    let mut env: serde_json::Map<String, Value> = bed
        .aws_env(Role::RotationLambda)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::String(v)))
        .collect();
    env.insert(
        "HOSTKEYCTL_ROTATE_ARGS".to_owned(),
        json!(serde_json::to_string(&options).unwrap()),
    );
    env.insert("HOME".to_owned(), json!(dir.display().to_string()));
    env.insert("PATH".to_owned(), json!("/usr/bin:/bin"));
    let arn = function_arn(bed);
    bed.control(
        "POST",
        "/_bed/lambda/register",
        &json!({"arn": arn, "bootstrap": bootstrap, "env": env, "step_timeout": 300}),
    );
    arn
}

/// `schedule show --output json`.
fn schedule(bed: &TestBed) -> Value {
    let run = bed.run(&["schedule", "show", "--output", "json", "--secret-id", "hostkeys/hk"]);
    run.ok();
    run.json()
}

/// Advances the bed's clock by an interval and waits for the rotation it
/// starts: the `n`-th to end. Returns its record.
fn next_interval(bed: &TestBed, n: usize) -> Value {
    let started = bed.control("POST", "/_bed/clock", &json!({"days": 30}));
    assert_eq!(started["started"].as_array().unwrap().len(), 1, "{started}");
    let ended = bed.control("POST", "/_bed/rotations/wait", &json!({"count": n, "timeout": 300}));
    ended.as_array().unwrap()[n - 1].clone()
}

/// The nodes' timers: the plain install (docs/bootstrap.md).
fn timer(bed: &TestBed) {
    for node in &bed.state.nodes {
        let run = bed.install_on(node, &["--secret-id", "hostkeys/hk"]);
        assert_eq!(run.code, 0, "timer install on {}: {}", node.name, run.stderr);
    }
}

/// `count` logins through the balancer, learning with UpdateHostKeys;
/// the ones that failed or warned.
fn logins(bed: &TestBed, known_hosts: &std::path::Path, count: usize) -> Vec<String> {
    (0..count)
        .map(|_| bed.ssh_lb(known_hosts, &["UpdateHostKeys=yes"]))
        .filter(|o| !o.status.success() || String::from_utf8_lossy(&o.stderr).contains("WARNING"))
        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        .collect()
}

fn every_node_serves_current(bed: &TestBed, what: &str) {
    let current = set_of(bed, stages(bed)["AWSCURRENT"].as_str().unwrap());
    for n in &bed.state.nodes {
        assert_eq!(served(n), current, "{what}: {} is off the stages", n.name);
    }
}

/// Deploys the function and turns the schedule on: a set is announced,
/// Secrets Manager checks the configuration (testSecret alone), and the
/// nodes offer the announced set. Returns its version.
fn enable(bed: &TestBed, pull: bool) -> String {
    let arn = deploy_function(bed, pull);
    let run = bed.run(&[
        "schedule",
        "enable",
        "--output",
        "json",
        "--secret-id",
        "hostkeys/hk",
        "--function",
        &arn,
        "--every",
        "rate(30 days)",
    ]);
    run.ok();
    let enabled = run.json();
    let announced = enabled["announced_version"].as_str().unwrap().to_owned();
    assert_eq!(enabled["rotation"]["enabled"], true, "{enabled}");
    assert_eq!(enabled["rotation"]["schedule"], "rate(30 days)", "{enabled}");
    // RotateImmediately false: the configuration check (testSecret alone)
    // passed and nothing moved.
    let check = bed.control("POST", "/_bed/rotations/wait", &json!({"count": 1, "timeout": 120}));
    assert_eq!(check[0]["status"], "succeeded", "{check}");
    assert_eq!(check[0]["steps"].as_array().unwrap().len(), 1, "{check}");
    if pull {
        timer(bed);
    } else {
        let mut push = vec!["push", "--secret-id", "hostkeys/hk", "--max-concurrency", "100%"];
        push.extend(TARGETS);
        bed.run(&push).ok();
    }

    announced
}

/// A step fails (finishSecret's move of AWSCURRENT is refused): AWSCURRENT
/// does not move, AWSPENDING comes off, the nodes stay on the stages, and
/// clients see nothing.
fn failed_rotation(bed: &TestBed, known_hosts: &std::path::Path, ended: usize, before: &Value) {
    // The third call and hostkeyctl's four retries of it (five attempts:
    // --max-attempts).
    let refused: Vec<Value> = (3..=7)
        .map(|n| json!({"action": "UpdateSecretVersionStage", "n": n}))
        .collect();
    bed.set_faults(json!({ "fail_at": refused }));
    let failed = next_interval(bed, ended);
    bed.control("POST", "/_bed/faults/reset", &json!({}));
    assert_eq!(failed["status"], "failed", "{failed}");
    let steps = failed["steps"].as_array().unwrap();
    assert_eq!(steps.last().unwrap()["step"], "finishSecret", "{failed}");
    let after = stages(bed);
    assert_eq!(after["AWSCURRENT"], before["AWSCURRENT"], "AWSCURRENT moved early");
    assert!(after.get("AWSPENDING").is_none(), "{after}");
    timer(bed);
    every_node_serves_current(bed, "after the failed rotation");
    assert!(logins(bed, known_hosts, 20).is_empty(), "after the failure");
}

/// A fleet goes through three scheduled rotations (and, on the pull fleet,
/// a failed one between): a client that logs in once an interval never
/// sees a warning, DescribeSecret shows what Security Hub reads, and the
/// function's role is never refused.
fn three_rotations(pull: bool) {
    let bed = TestBed::start(BedOptions {
        no_ssm: pull,
        ..BedOptions::default()
    });
    bed.init_from_node("hostkeys/hk", &bed.state.nodes[0]);
    timer(&bed);
    // The client's known_hosts holds AWSCURRENT alone: every later key it
    // learns through UpdateHostKeys.
    let lb = bed.state.lb.clone().unwrap();
    let known_hosts = bed.dir().join("known_hosts");
    let lines = bed.run(&["known-hosts", "--secret-id", "hostkeys/hk", "--host", &lb.address]);
    lines.ok();
    std::fs::write(&known_hosts, &lines.stdout).unwrap();

    let announced = enable(&bed, pull);
    let mut ended = 1;
    let mut last_rotated = Value::Null;
    for n in 1..=3 {
        let what = format!("rotation {n}");
        // Once an interval, the client logs in and learns the announced set.
        assert!(logins(&bed, &known_hosts, 1).is_empty(), "{what}: before");
        let before = stages(&bed);
        let next = schedule(&bed)["announced_version"].as_str().unwrap().to_owned();
        let next_set = set_of(&bed, &next);
        if n == 1 {
            assert_eq!(next, announced);
        }
        if pull && n == 2 {
            ended += 1;
            failed_rotation(&bed, &known_hosts, ended, &before);
        }
        ended += 1;
        let record = next_interval(&bed, ended);
        assert_eq!(record["status"], "succeeded", "{what}: {record}");
        assert_eq!(
            record["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["step"].clone())
                .collect::<Vec<_>>(),
            ["createSecret", "setSecret", "testSecret", "finishSecret"],
            "{what}"
        );
        let after = stages(&bed);
        assert_eq!(after["AWSCURRENT"], record["token"], "{what}: {after}");
        assert_eq!(after["AWSPREVIOUS"], before["AWSCURRENT"], "{what}");
        assert_eq!(set_of(&bed, after["AWSCURRENT"].as_str().unwrap()), next_set, "{what}");
        if pull {
            timer(&bed);
        }
        every_node_serves_current(&bed, &what);
        let shown = schedule(&bed);
        assert_eq!(shown["rotation"]["enabled"], true, "{shown}");
        assert!(shown["rotation"]["last_rotated"].is_string(), "{shown}");
        assert_ne!(shown["rotation"]["last_rotated"], last_rotated, "{what}: {shown}");
        last_rotated = shown["rotation"]["last_rotated"].clone();
        let failures = logins(&bed, &known_hosts, 20);
        assert!(
            failures.is_empty(),
            "{what}: {} warned or failed: {failures:?}",
            failures.len()
        );
    }
    let usage = bed.iam_usage();
    assert!(
        usage["denied"].get("hostkeyctl-rotation-lambda").is_none(),
        "the function's role was refused: {usage}"
    );
    assert!(usage["allowed"]["hostkeyctl-rotation-lambda"].is_object(), "{usage}");
    // Security Hub's reading: SecretsManager.1 and .4.
    let status = bed
        .run(&["status", "--output", "json", "--secret-id", "hostkeys/hk"])
        .json();
    assert_eq!(status["schedule"]["enabled"], true, "{status}");
    assert_eq!(status["schedule"]["last_rotated"], last_rotated, "{status}");
    if pull {
        on_demand_then_off(&bed, ended);
    }
}

/// `schedule rotate` starts a rotation now (RotateSecret without
/// settings); `schedule disable` turns the schedule off (CancelRotateSecret)
/// and the announced set stays announced. Both as the rotation role.
fn on_demand_then_off(bed: &TestBed, ended: usize) {
    let before = schedule(bed);
    bed.run(&["schedule", "rotate", "--secret-id", "hostkeys/hk", "--output", "json"])
        .ok();
    let all = bed.control(
        "POST",
        "/_bed/rotations/wait",
        &json!({"count": ended + 1, "timeout": 300}),
    );
    assert_eq!(all[ended]["status"], "succeeded", "{all}");
    assert_eq!(stages(bed)["AWSCURRENT"], all[ended]["token"]);
    assert_ne!(schedule(bed)["announced_version"], before["announced_version"]);
    let run = bed.run(&["schedule", "disable", "--secret-id", "hostkeys/hk", "--output", "json"]);
    run.ok();
    let off = run.json();
    assert_eq!(off["rotation"]["enabled"], false, "{off}");
    assert!(off["rotation"].get("next_rotation").is_none(), "{off}");
    assert!(off["announced_version"].is_string(), "{off}");
    // Turned off, the clock starts nothing.
    let started = bed.control("POST", "/_bed/clock", &json!({"days": 60}));
    assert_eq!(started["started"], json!([]), "{started}");
    assert!(
        bed.iam_usage()["denied"].get("hostkeyctl-rotation").is_none(),
        "the rotation role was refused"
    );
}

#[test]
fn a_pull_fleet_goes_through_three_scheduled_rotations_and_a_failed_one() {
    three_rotations(true);
}

#[test]
fn a_push_fleet_goes_through_three_scheduled_rotations() {
    three_rotations(false);
}
