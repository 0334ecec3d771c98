//! Scheduled rotation on the bed: Secrets Manager's schedule, the
//! emulator's RotateSecret (its own staging of the token as AWSPENDING on
//! an empty version included) driving the real `bootstrap` through a
//! stand-in for the Lambda runtime API, the function's role enforced, real
//! sshd, a real `ssh` with `UpdateHostKeys`, and real `ssh-keygen -Q`.

use serde_json::{Value, json};

use crate::bed::rotate::{set_of, stages};
use crate::common::bed::{BedOptions, Role, SECRET, TARGETS, TestBed, served};
use crate::common::support::require;

/// The function's ARN on the bed (the emulator's account).
fn function_arn(bed: &TestBed) -> String {
    format!(
        "arn:aws:lambda:{}:123456789012:function:hostkeyctl-rotation",
        bed.state.region
    )
}

/// The rotation function: the zip's `bootstrap` (HOSTKEYCTL_LAMBDA_BOOTSTRAP)
/// or this crate's binary so named, `rotate`'s options in
/// HOSTKEYCTL_ROTATE_ARGS, signing as iam/rotation-lambda.json. With
/// `secret`, pinned to it as the CloudFormation template pins it; else
/// `schedule enable` pins it.
/// A function's task directory under the bed, and its `bootstrap`: the
/// zip's (HOSTKEYCTL_LAMBDA_BOOTSTRAP) or this crate's binary so named.
pub(crate) fn function_task(bed: &TestBed, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = bed.dir().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let bootstrap = match std::env::var_os("HOSTKEYCTL_LAMBDA_BOOTSTRAP") {
        Some(shipped) => std::path::PathBuf::from(shipped),
        None => {
            let copy = dir.join("bootstrap");
            std::fs::copy(assert_cmd::cargo::cargo_bin("hostkeyctl"), &copy).unwrap();
            copy
        }
    };
    (dir, bootstrap)
}

/// Registers the crate's binary as the Lambda function `arn`, with its
/// configuration's `variables`, run in the task directory `task` with
/// what Lambda gives the process: `role`'s credentials, HOME and PATH.
/// `settings` add to the registration (`step_timeout`,
/// `reserved_concurrency`).
pub(crate) fn register_function(bed: &TestBed, task: &str, role: Role, arn: &str, variables: Value, settings: Value) {
    let (dir, bootstrap) = function_task(bed, task);
    let mut env: serde_json::Map<String, Value> = bed
        .aws_env(role)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::String(v)))
        .collect();
    env.insert("HOME".to_owned(), json!(dir.display().to_string()));
    env.insert("PATH".to_owned(), json!("/usr/bin:/bin"));
    let mut registration = json!({"arn": arn, "bootstrap": bootstrap, "variables": variables, "env": env});
    for (k, v) in settings.as_object().unwrap() {
        registration[k] = v.clone();
    }
    bed.control("POST", "/_bed/lambda/register", &registration);
}

pub(crate) fn deploy_function(bed: &TestBed, pull: bool, extra: &[&str], secret: Option<&str>) -> String {
    let mut options = vec!["--max-concurrency", "100%"];
    options.extend(TARGETS);
    if pull {
        options.push("--pull");
    }
    options.extend_from_slice(extra);
    let mut variables = json!({"HOSTKEYCTL_ROTATE_ARGS": serde_json::to_string(&options).unwrap()});
    if let Some(secret) = secret {
        variables["HOSTKEYCTL_SECRET_ARN"] = json!(secret);
    }
    let arn = function_arn(bed);
    register_function(
        bed,
        "lambda-task",
        Role::RotationLambda,
        &arn,
        variables,
        json!({"step_timeout": 300}),
    );
    arn
}

/// `schedule show --output json`.
pub(crate) fn schedule(bed: &TestBed) -> Value {
    let run = bed.cli("schedule show").json().secret().run();
    run.ok();
    run.json()
}

/// The secret's ARN.
fn arn_of(bed: &TestBed, name: &str) -> String {
    let status = bed.cli("status").json().secret_id(name).run().json();
    status["arn"].as_str().unwrap().to_owned()
}

/// Waits for the `n`-th rotation to end and returns its record.
pub(crate) fn ended(bed: &TestBed, n: usize) -> Value {
    let all = bed.control("POST", "/_bed/rotations/wait", &json!({"count": n, "timeout": 300}));
    all.as_array().unwrap()[n - 1].clone()
}

/// Advances the bed's clock by an interval and waits for the rotation it
/// starts: the `n`-th to end. Returns its record.
pub(crate) fn next_interval(bed: &TestBed, n: usize) -> Value {
    let started = bed.control("POST", "/_bed/clock", &json!({"days": 30}));
    assert_eq!(started["started"].as_array().unwrap().len(), 1, "{started}");
    ended(bed, n)
}

/// The nodes' timers: the plain install (docs/bootstrap.md), on every
/// node but the ones `stopped` names.
fn timer_except(bed: &TestBed, stopped: &[usize]) {
    for (i, node) in bed.state.nodes.iter().enumerate().filter(|(i, _)| !stopped.contains(i)) {
        let run = bed.cli("install").on(node).secret().run();
        assert_eq!(run.code, 0, "timer install on {} ({i}): {}", node.name, run.stderr);
    }
}

fn timer(bed: &TestBed) {
    timer_except(bed, &[]);
}

/// `count` logins through the balancer, learning with UpdateHostKeys;
/// the ones that failed or warned.
fn logins(bed: &TestBed, known_hosts: &std::path::Path, count: usize, options: &[&str]) -> Vec<String> {
    (0..count)
        .map(|_| bed.ssh_lb(known_hosts, options))
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

/// Turns the schedule on: `schedule enable` pins the function to the
/// secret (when the stack did not), announces a set unless one is, and
/// Secrets Manager checks the configuration (testSecret alone). The nodes
/// then offer the announced set. Returns its version.
fn enable(bed: &TestBed, arn: &str, pull: bool, checks_before: usize, stopped: &[usize]) -> String {
    let run = bed
        .cli("schedule enable")
        .json()
        .secret()
        .args(&["--function", arn, "--schedule", "rate(30 days)"])
        .run();
    run.ok();
    let enabled = run.json();
    assert!(enabled["done"].as_str().unwrap().contains("function "), "{enabled}");
    let announced = enabled["announced_version"].as_str().unwrap().to_owned();
    assert_eq!(enabled["rotation"]["enabled"], true, "{enabled}");
    assert_eq!(enabled["rotation"]["schedule"], "rate(30 days)", "{enabled}");
    // RotateImmediately false: the configuration check (testSecret alone,
    // on the AWSPENDING copy Secrets Manager stages and takes off again)
    // passed and nothing moved.
    let check = ended(bed, checks_before + 1);
    assert_eq!(check["status"], "succeeded", "{check}");
    assert_eq!(check["steps"].as_array().unwrap().len(), 1, "{check}");
    assert!(stages(bed).get("AWSPENDING").is_none(), "the check left AWSPENDING");
    if pull {
        timer_except(bed, stopped);
    } else {
        bed.cli("push --max-concurrency 100%").secret().targets().run().ok();
    }
    announced
}

/// A step fails (finishSecret's move of AWSCURRENT is refused): AWSCURRENT
/// does not move, AWSPENDING comes off, the nodes stay on the stages, and
/// clients see nothing.
fn failed_rotation(bed: &TestBed, known_hosts: &std::path::Path, n: usize, before: &Value) {
    // finishSecret's first UpdateSecretVersionStage and hostkeyctl's four
    // retries of it (five attempts: --max-attempts).
    let refused: Vec<Value> = (1..=5)
        .map(|n| json!({"action": "UpdateSecretVersionStage", "n": n}))
        .collect();
    bed.set_faults(json!({ "fail_at": refused }));
    let failed = next_interval(bed, n);
    bed.control("POST", "/_bed/faults/reset", &json!({}));
    assert_eq!(failed["status"], "failed", "{failed}");
    let steps = failed["steps"].as_array().unwrap();
    assert_eq!(steps.last().unwrap()["step"], "finishSecret", "{failed}");
    let after = stages(bed);
    assert_eq!(after["AWSCURRENT"], before["AWSCURRENT"], "AWSCURRENT moved early");
    assert!(after.get("AWSPENDING").is_none(), "{after}");
    timer(bed);
    every_node_serves_current(bed, "after the failed rotation");
    assert!(
        logins(bed, known_hosts, 20, &["UpdateHostKeys=yes"]).is_empty(),
        "after the failure"
    );
}

/// One node's timer stopped since the announcement: finishSecret refuses,
/// naming it, and AWSCURRENT does not move. Then its timer runs again.
fn stopped_timer(bed: &TestBed, n: usize, before: &Value) {
    let failed = next_interval(bed, n);
    assert_eq!(failed["status"], "failed", "{failed}");
    let last = failed["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["step"], "finishSecret", "{failed}");
    let said = last["result"].to_string();
    let stopped = &bed.state.nodes[2];
    assert!(
        said.contains(&stopped.name) && said.contains("1 of 3 node(s)"),
        "{said}"
    );
    assert_eq!(stages(bed)["AWSCURRENT"], before["AWSCURRENT"], "AWSCURRENT moved");
    timer(bed);
}

/// The KRL `known-hosts --krl` writes now, and `ssh-keygen -Q` of every
/// key of AWSCURRENT, AWSPENDING and the announced set against it: none
/// is revoked, nor in the `@revoked` lines of `known-hosts --revoked`.
/// Returns the KRL.
fn krl_spares_what_the_nodes_may_serve(bed: &TestBed, what: &str) -> std::path::PathBuf {
    let krl = bed.dir().join("revoked.krl");
    bed.cli("known-hosts")
        .secret()
        .args(&["--krl", &krl.display().to_string()])
        .run()
        .ok();
    let revoked = bed
        .cli("known-hosts")
        .secret()
        .args(&["--host", "login.test", "--revoked"])
        .run();
    revoked.ok();
    let status = bed.cli("status").json().secret().run().json();
    for v in status["versions"].as_array().unwrap() {
        let labels = v["stages"].to_string();
        if !["AWSCURRENT", "AWSPENDING", "HOSTKEYCTL_NEXT"]
            .iter()
            .any(|l| labels.contains(l))
        {
            continue;
        }
        for key in v["keys"].as_array().unwrap() {
            let blob = key["public_key"].as_str().unwrap().split_whitespace().nth(1).unwrap();
            assert!(!revoked.stdout.contains(blob), "{what}: {labels} in @revoked lines");
            let file = bed.dir().join("key-to-query.pub");
            std::fs::write(&file, format!("{}\n", key["public_key"].as_str().unwrap())).unwrap();
            let out = std::process::Command::new(require("ssh-keygen"))
                .arg("-Q")
                .arg("-f")
                .arg(&krl)
                .arg(&file)
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(!said.contains("REVOKED"), "{what}: {labels} {said}");
        }
    }
    krl
}

/// Events no rotation Secrets Manager started, sent straight to the
/// function: a finishSecret with the AWSPREVIOUS version's token, with a
/// retired one, with a random one, and one naming another fleet's secret.
/// Each is refused saying why; no stage moves and nothing is installed.
fn forged_events(bed: &TestBed, arn: &str) {
    bed.cli("init")
        .secret_id("hostkeys/other")
        .args(&["--algorithms", "ed25519"])
        .run()
        .ok();
    let (ours, theirs) = (arn_of(bed, SECRET), arn_of(bed, "hostkeys/other"));
    let before = (
        stages(bed),
        bed.control("GET", "/_bed/commands", &json!({}))
            .as_array()
            .unwrap()
            .len(),
    );
    let served_before: Vec<_> = bed.state.nodes.iter().map(served).collect();
    let versions = bed.control("POST", "/_bed/secret-versions", &json!({"secret": SECRET}));
    let retired = versions
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["stages"].as_array().unwrap().is_empty() && v["value"] == true)
        .map(|v| v["id"].as_str().unwrap().to_owned());
    let previous = before.0["AWSPREVIOUS"].as_str().unwrap().to_owned();
    let mut events = vec![
        (ours.clone(), previous, "is not AWSPENDING"),
        (ours.clone(), uuid_like(), "is not AWSPENDING"),
        (theirs.clone(), uuid_like(), "before any call"),
    ];
    events.push((ours.clone(), retired.expect("a retired version"), "is not AWSPENDING"));
    for (secret, token, says) in events {
        let event = json!({"Step": "finishSecret", "SecretId": secret, "ClientRequestToken": token, "RotationToken": uuid_like()});
        let answer = bed.control("POST", "/_bed/lambda/invoke", &json!({"arn": arn, "event": event}));
        assert_eq!(answer["ok"], false, "{answer}");
        assert!(
            answer["result"].to_string().contains(says),
            "{secret} {token}: {answer}"
        );
    }
    let after = (
        stages(bed),
        bed.control("GET", "/_bed/commands", &json!({}))
            .as_array()
            .unwrap()
            .len(),
    );
    assert_eq!(after, before, "a forged event moved a stage or sent a command");
    let served_after: Vec<_> = bed.state.nodes.iter().map(served).collect();
    assert_eq!(served_after, served_before, "a forged event changed what a node serves");
}

fn uuid_like() -> String {
    let n: u128 = rand::random();
    let hex = format!("{n:032x}");
    format!(
        "{}-{}-4{}-8{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..]
    )
}

/// The function's role was never refused; with a CA (in KMS) it signed
/// every new set's three host keys through kms:Sign.
fn function_role_never_refused(bed: &TestBed, signed: bool) {
    let usage = bed.iam_usage();
    assert!(
        usage["denied"].get("hostkeyctl-rotation-lambda").is_none(),
        "the function's role was refused: {usage}"
    );
    assert!(usage["allowed"]["hostkeyctl-rotation-lambda"].is_object(), "{usage}");
    if signed {
        // Three rotations, three host keys each.
        let signed = usage["allowed"]["hostkeyctl-rotation-lambda"]["kms:Sign"].as_u64();
        assert!(signed.is_some_and(|n| n >= 9), "{usage}");
    }
    // What docs/rotation.md's "What it costs" reports (with --nocapture).
    eprintln!(
        "the function's calls: {}",
        usage["allowed"]["hostkeyctl-rotation-lambda"]
    );
}

/// A fleet goes through three scheduled rotations (and, on the pull fleet,
/// one held back by a node whose timer stopped, and a failed one): a
/// client that logs in once an interval never sees a warning, a client
/// that trusts the CA and holds each KRL logs in every time (push fleet,
/// with certificates), DescribeSecret shows what Security Hub reads, the
/// function's role is never refused, and forged events change nothing.
fn three_rotations(pull: bool) {
    let bed = TestBed::start(BedOptions {
        no_ssm: pull,
        ..BedOptions::default()
    });
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    timer(&bed);
    let lb = bed.state.lb.clone().unwrap();
    let mut extra = vec![];
    // The push fleet's CA is in KMS: the function signs each new set
    // through kms:Sign, as its own role.
    let ca_only = (!pull).then(|| crate::bed::rotate::signed_with_a_ca(&bed, true));
    if !pull {
        extra.extend(["--ca-secret-id", "hostkeyctl-ca/ca"]);
        timer(&bed);
    } else {
        // Intervals seconds apart, not days: no retiring hour (that is
        // bed::scheduled_admission's subject).
        extra.extend(["--retire-for", "0"]);
    }
    // The client's known_hosts holds AWSCURRENT alone: every later key it
    // learns through UpdateHostKeys.
    let known_hosts = bed.dir().join("known_hosts");
    let lines = bed.cli("known-hosts").secret().args(&["--host", &lb.address]).run();
    lines.ok();
    std::fs::write(&known_hosts, &lines.stdout).unwrap();

    let (arn, mut n) = if pull {
        (deploy_function(&bed, pull, &extra, None), 0)
    } else {
        (stack_first_rotation(&bed, &extra, &known_hosts), 1)
    };
    // On the pull fleet, node 3's timer is stopped from the announcement
    // on: it serves the current keys and not the announced ones.
    let stopped: &[usize] = if pull { &[2] } else { &[] };
    let announced = enable(&bed, &arn, pull, n, stopped);
    n += 1;
    let mut last_rotated = Value::Null;
    for round in 1..=3 {
        let what = format!("rotation {round}");
        if pull && round == 1 {
            n += 1;
            stopped_timer(&bed, n, &stages(&bed));
        }
        // Once an interval, the client logs in and learns the announced set.
        assert!(
            logins(&bed, &known_hosts, 1, &["UpdateHostKeys=yes"]).is_empty(),
            "{what}: before"
        );
        let before = stages(&bed);
        let next = schedule(&bed)["announced_version"].as_str().unwrap().to_owned();
        let next_set = set_of(&bed, &next);
        if round == 1 {
            assert_eq!(next, announced);
        }
        if pull && round == 2 {
            n += 1;
            failed_rotation(&bed, &known_hosts, n, &before);
        }
        n += 1;
        let record = next_interval(&bed, n);
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
        last_rotated = clients_after(&bed, &what, &last_rotated, &known_hosts, ca_only.as_deref());
    }
    forged_events(&bed, &arn);
    function_role_never_refused(&bed, !pull);
    if !pull {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(doctor_reads_the_function(&bed, &arn));
    }
    // Security Hub's reading: SecretsManager.1 and .4.
    let status = bed.cli("status").json().secret().run().json();
    assert_eq!(status["schedule"]["enabled"], true, "{status}");
    assert_eq!(status["schedule"]["last_rotated"], last_rotated, "{status}");
    if pull {
        on_demand_then_off(&bed, n);
    }
}

/// `doctor` finds the function the schedule calls pinned to this secret,
/// then, repinned to another by someone allowed to, failing every
/// rotation; put back as it was.
async fn doctor_reads_the_function(bed: &TestBed, arn: &str) {
    let function = || {
        let run = bed.cli("doctor").json().secret().targets().run();
        let report = run.json();
        let found: Vec<Value> = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == "function")
            .cloned()
            .collect();
        assert_eq!(found.len(), 1, "{report:#}");
        found[0].clone()
    };
    let ok = function();
    assert_eq!(ok["level"], "ok", "{ok}");
    assert!(ok["message"].as_str().unwrap().contains("rotates this secret"), "{ok}");
    let lambda = aws_sdk_lambda::Client::new(&bed.sdk_config(1).await);
    let before = lambda
        .get_function_configuration()
        .function_name(arn)
        .send()
        .await
        .unwrap();
    let mut variables = before.environment().unwrap().variables().unwrap().clone();
    let pinned = variables.insert(
        "HOSTKEYCTL_SECRET_ARN".to_owned(),
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:hostkeys/other-AbCdEf".to_owned(),
    );
    let set = |variables: std::collections::HashMap<String, String>| {
        lambda
            .update_function_configuration()
            .function_name(arn)
            .environment(
                aws_sdk_lambda::types::Environment::builder()
                    .set_variables(Some(variables))
                    .build(),
            )
            .send()
    };
    set(variables.clone()).await.unwrap();
    let bad = function();
    assert_eq!(bad["level"], "fail", "{bad}");
    assert!(bad["message"].as_str().unwrap().contains("hostkeys/other"), "{bad}");
    assert!(bad["fix"].as_str().unwrap().contains("NEW_FUNCTION"), "{bad}");
    variables.insert("HOSTKEYCTL_SECRET_ARN".to_owned(), pinned.unwrap());
    set(variables).await.unwrap();
}

/// The push fleet's stack made the schedule before anyone ran `schedule
/// enable` (the function pinned by the stack, RotateSecret with the
/// rules): its first rotation finds nothing announced, changes no key, and
/// announces one. Returns the function.
fn stack_first_rotation(bed: &TestBed, extra: &[&str], known_hosts: &std::path::Path) -> String {
    let arn = deploy_function(bed, false, extra, Some(&arn_of(bed, SECRET)));
    let served_before: Vec<_> = bed.state.nodes.iter().map(served).collect();
    let rules = json!({"ScheduleExpression": "rate(30 days)"});
    bed.control(
        "POST",
        "/_bed/rotate-secret",
        &json!({"SecretId": SECRET, "RotationLambdaARN": arn, "RotationRules": rules}),
    );
    assert_eq!(ended(bed, 1)["status"], "succeeded");
    let served_after: Vec<_> = bed.state.nodes.iter().map(served).collect();
    assert_eq!(served_after, served_before, "the first rotation changed a key");
    assert!(logins(bed, known_hosts, 5, &["UpdateHostKeys=no"]).is_empty());
    assert!(schedule(bed)["announced_version"].is_string());
    arn
}

/// After a promotion: DescribeSecret's last rotation moved, the client
/// that learns logs in 20 times without a warning, and (with `ca_only`)
/// the client that trusts the CA, holding the KRL of now, 20 times too.
/// Returns the last rotation's date.
fn clients_after(
    bed: &TestBed,
    what: &str,
    last_rotated: &Value,
    known_hosts: &std::path::Path,
    ca_only: Option<&std::path::Path>,
) -> Value {
    let shown = schedule(bed);
    assert_eq!(shown["rotation"]["enabled"], true, "{shown}");
    assert!(shown["rotation"]["last_rotated"].is_string(), "{shown}");
    assert_ne!(shown["rotation"]["last_rotated"], *last_rotated, "{what}: {shown}");
    let failures = logins(bed, known_hosts, 20, &["UpdateHostKeys=yes"]);
    assert!(
        failures.is_empty(),
        "{what}: {} warned or failed: {failures:?}",
        failures.len()
    );
    if let Some(ca_only) = ca_only {
        let krl = krl_spares_what_the_nodes_may_serve(bed, what);
        let revoked = format!("RevokedHostKeys={}", krl.display());
        let refused = logins(bed, ca_only, 20, &["HostKeyAlias=login.test", &revoked]);
        assert!(refused.is_empty(), "{what}: the CA client was refused: {refused:?}");
    }
    shown["rotation"]["last_rotated"].clone()
}

/// `schedule rotate` right after a rotation: the set announced seconds
/// before is not promoted (the minimum overlap), and the rotation fails
/// with AWSCURRENT where it was; `schedule disable` turns the schedule off
/// (CancelRotateSecret) and the announced set stays announced. Both as the
/// rotation role.
fn on_demand_then_off(bed: &TestBed, n: usize) {
    let before = (schedule(bed), stages(bed));
    bed.cli("schedule rotate").secret().json().run().ok();
    let record = ended(bed, n + 1);
    assert_eq!(record["status"], "failed", "{record}");
    assert!(
        record["steps"][0]["result"].to_string().contains("--min-overlap"),
        "{record}"
    );
    assert_eq!(stages(bed)["AWSCURRENT"], before.1["AWSCURRENT"]);
    assert_eq!(schedule(bed)["announced_version"], before.0["announced_version"]);
    let run = bed.cli("schedule disable").secret().json().run();
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
fn a_pull_fleet_goes_through_three_scheduled_rotations_a_stopped_timer_and_a_failed_one() {
    three_rotations(true);
}

#[test]
fn a_push_fleet_with_certificates_goes_through_three_scheduled_rotations() {
    three_rotations(false);
}
