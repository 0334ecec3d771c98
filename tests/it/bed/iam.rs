//! Least privilege, proven (issue 26). Every bed test runs each command
//! signed by the role docs/iam.md names for it ([`Role::for_command`]),
//! under the shipped policies, which the emulator enforces by action and
//! resource (testbed/emulator/iam.py). Here each role does its documented commands
//! with its own key alone and is refused what lies next to them
//! (policies.rs holds the policy text and docs/iam.md's table).

use serde_json::{Value, json};

use crate::common::bed::{BedOptions, Role, Run, SECRET, TARGETS, TestBed};

fn denied(run: &Run, action: &str, what: &str) {
    assert_eq!(
        run.code, 4,
        "{what}: expected a refusal of {action}: {}\n{}",
        run.stderr, run.stdout
    );
    let text = format!("{}{}", run.stderr, run.stdout);
    assert!(
        text.contains("access denied") && text.contains(action),
        "{what}: no refusal of {action} in: {text}"
    );
}

fn ok(run: &Run, what: &str) {
    assert_eq!(run.code, 0, "{what}: {}\n{}", run.stderr, run.stdout);
}

fn with_targets(args: &[&'static str]) -> Vec<&'static str> {
    [args, &TARGETS[..]].concat()
}

/// admin: init, status, known-hosts, push, ca init (ssm-document deploy
/// ran when the bed started, as the admin); no CA read, no stage move.
fn admin_does_its_commands(bed: &TestBed) {
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    ok(&bed.cli("status").secret().run(), "status");
    ok(
        &bed.cli("known-hosts").secret().args(&["--host", "login.test"]).run(),
        "known-hosts",
    );
    ok(
        &bed.run(&with_targets(&[
            "push",
            "--secret-id",
            SECRET,
            "--max-concurrency",
            "100%",
        ])),
        "push",
    );
    ok(
        &bed.cli("ca init").args(&["--ca-secret-id", "hostkeyctl-ca/ca"]).run(),
        "ca init",
    );
    let sign = [
        "sign",
        "--secret-id",
        SECRET,
        "--ca-secret-id",
        "hostkeyctl-ca/ca",
        "--principal",
        "login.test",
    ];
    denied(
        &bed.run_as(Role::Admin, &sign),
        "secretsmanager:GetSecretValue",
        "the admin reading the CA",
    );
    denied(
        &bed.cli("rotate --max-concurrency 100% --min-overlap 0")
            .role(Role::Admin)
            .secret()
            .targets()
            .run(),
        "secretsmanager:PutSecretValue",
        "the admin storing a version",
    );
}

/// auditor: audit by the tags alone, and on disk through the check
/// document; no value read, no stage written, no install sent.
async fn auditor_does_its_commands(bed: &TestBed) {
    ok(&bed.run(&with_targets(&["audit", "--secret-id", SECRET])), "audit");
    ok(
        &bed.run(&with_targets(&["audit", "--secret-id", SECRET, "--via-ssm"])),
        "audit --via-ssm",
    );
    denied(
        &bed.run(&with_targets(&[
            "audit",
            "--secret-id",
            SECRET,
            "--stage",
            "AWSCURRENT",
        ])),
        "secretsmanager:GetSecretValue",
        "the auditor reading a value",
    );
    let status = bed.cli("status").secret().json().run().json();
    let version = status["versions"][0]["version_id"].as_str().unwrap().to_owned();
    let sm = aws_sdk_secretsmanager::Client::new(&bed.sdk_config_as(Role::Auditor, 1).await);
    let err = sm
        .update_secret_version_stage()
        .secret_id(SECRET)
        .version_stage("AWSPENDING")
        .move_to_version_id(version)
        .send()
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("AccessDenied"),
        "the auditor wrote a stage: {err:?}"
    );
    let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config_as(Role::Auditor, 1).await);
    let err = ssm
        .send_command()
        .document_name("hostkeyctl-Install")
        .instance_ids(&bed.state.nodes[0].instance_id)
        .send()
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("AccessDenied"),
        "the auditor sent the install document: {err:?}"
    );
}

/// signer: sign (a stage move, compare and swap), the CA's line; no command.
fn signer_does_its_commands(bed: &TestBed) {
    ok(
        &bed.cli("sign")
            .secret()
            .args(&["--ca-secret-id", "hostkeyctl-ca/ca", "--principal", "login.test"])
            .run(),
        "sign",
    );
    ok(
        &bed.cli("known-hosts")
            .args(&[
                "--host",
                "login.test",
                "--cert-authority",
                "--ca-secret-id",
                "hostkeyctl-ca/ca",
            ])
            .run(),
        "known-hosts --ca-secret-id",
    );
    denied(
        &bed.run_as(Role::Signer, &with_targets(&["push", "--secret-id", SECRET])),
        "ssm:DescribeDocument",
        "the signer sending a command",
    );
}

/// rotation: a whole rotation, signed like the current set, the nodes
/// installing through SSM with the node role; no new secret. Then the
/// node: install (the timer's run), and neither a CA nor the metadata.
fn rotation_and_node_do_their_commands(bed: &TestBed) {
    let rotated = bed
        .cli("rotate --ca-secret-id hostkeyctl-ca/ca --max-concurrency 100% --min-overlap 0")
        .secret()
        .targets()
        .json()
        .run();
    ok(&rotated, "rotate");
    assert_eq!(rotated.json()["result"], "rotated");
    denied(
        &bed.cli("init").role(Role::Rotation).secret_id("hostkeys/other").run(),
        "secretsmanager:CreateSecret",
        "the rotation role creating a secret",
    );
    let node = &bed.state.nodes[0];
    ok(&bed.cli("install").on(node).secret().run(), "install");
    denied(
        &bed.cli("install").on(node).secret_id("hostkeyctl-ca/ca").run(),
        "secretsmanager:GetSecretValue",
        "a node reading the CA",
    );
    denied(
        &bed.cli("status").role(Role::Node).secret().run(),
        "secretsmanager:DescribeSecret",
        "a node describing the secret",
    );
}

/// Reproduces issue 26's three denials (rotate under rotation.json, audit
/// --secret-id under auditor.json, sign under signer.json: each failed on
/// the policies of the time), and holds every role to its commands.
#[tokio::test(flavor = "multi_thread")]
async fn every_role_does_its_commands_with_its_own_key_and_is_refused_the_next_ones() {
    let bed = TestBed::start(BedOptions::default());
    assert!(bed.state.iam, "the bed enforces IAM");
    admin_does_its_commands(&bed);
    auditor_does_its_commands(&bed).await;
    signer_does_its_commands(&bed);
    rotation_and_node_do_their_commands(&bed);

    // Every hostkeyctl run above signed as its role: the emulator's record
    // shows each role's calls under its own user, and the three that issue
    // 26 found denied went through.
    let usage = bed.iam_usage();
    let allowed = |user: &str, action: &str| usage["allowed"][user][action].as_u64().unwrap_or(0) > 0;
    assert!(
        allowed("hostkeyctl-rotation", "secretsmanager:ListSecretVersionIds"),
        "{usage}"
    );
    assert!(
        allowed("hostkeyctl-auditor", "secretsmanager:DescribeSecret"),
        "{usage}"
    );
    assert!(allowed("hostkeyctl-auditor", "ssm:SendCommand"), "{usage}");
    assert!(
        allowed("hostkeyctl-signer", "secretsmanager:UpdateSecretVersionStage"),
        "{usage}"
    );
    assert!(allowed("hostkeyctl-node", "secretsmanager:GetSecretValue"), "{usage}");
    assert!(
        usage["allowed"]["hostkeyctl-auditor"]
            .get("secretsmanager:ListSecretVersionIds")
            .is_none(),
        "audit needs DescribeSecret alone: {usage}"
    );
}

/// A sign whose stage move is refused made nothing current and says what it
/// left: a claim label it could not take off (the move and the clean-up are
/// the same action), which the next rotate removes.
#[test]
fn a_refused_sign_says_what_it_left_and_the_next_rotate_removes_it() {
    let bed = TestBed::start(BedOptions::nodes(1));
    bed.init_generated(SECRET);
    ok(
        &bed.cli("ca init").args(&["--ca-secret-id", "hostkeyctl-ca/ca"]).run(),
        "ca init",
    );
    let before = bed.cli("status").secret().json().run().json();
    bed.set_faults(json!({ "deny_actions": { "UpdateSecretVersionStage": "" } }));
    let sign = bed
        .cli("sign")
        .secret()
        .args(&["--ca-secret-id", "hostkeyctl-ca/ca", "--principal", "login.test"])
        .run();
    denied(
        &sign,
        "secretsmanager:UpdateSecretVersionStage",
        "sign without stage moves",
    );
    assert!(
        sign.stderr.contains("sign made nothing current")
            && sign.stderr.contains("still carries the label hostkeyctl-claim-"),
        "{}",
        sign.stderr
    );
    bed.control("POST", "/_bed/faults/reset", &json!({}));
    let after = bed.cli("status").secret().json().run().json();
    let current = |s: &Value| {
        s["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["stages"].as_array().unwrap().iter().any(|l| l == "AWSCURRENT"))
            .unwrap()["version_id"]
            .clone()
    };
    assert_eq!(current(&after), current(&before), "AWSCURRENT moved");
    let rotate = bed.run(&with_targets(&[
        "rotate",
        "--secret-id",
        SECRET,
        "--abort",
        "--output",
        "json",
    ]));
    ok(&rotate, "rotate --abort");
    let steps = rotate.json()["steps"].to_string();
    assert!(steps.contains("removed the stale claim hostkeyctl-claim-"), "{steps}");
}
