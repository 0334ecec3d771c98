//! hostkeyctl's own SSM document (issue 15): printed byte-stable, deployed
//! as versions, used by push and rotate with AWS-RunShellScript denied, and
//! enforced by the bed as SSM does (declared parameters only, required ones
//! present, each matching its allowedPattern in full).

use serde_json::{Value, json};

use crate::common::bed::{BedOptions, Role, SECRET, TARGETS, TestBed, set_fingerprints};

#[tokio::test(flavor = "multi_thread")]
async fn print_is_byte_stable_and_deploy_adds_versions_only_when_it_changes() {
    let bed = TestBed::start(BedOptions::nodes(0).without_documents());
    let first = bed.cli("ssm-document print").run();
    first.ok();
    assert_eq!(
        bed.cli("ssm-document print").run().stdout,
        first.stdout,
        "not byte-stable"
    );
    let doc: Value = serde_json::from_str(&first.stdout).unwrap();
    assert_eq!(doc["schemaVersion"], "2.2");
    assert_eq!(doc["mainSteps"][0]["action"], "aws:runShellScript");
    for name in [
        "SecretId",
        "VersionId",
        "Expect",
        "NextVersionId",
        "ExpectNext",
        "Region",
    ] {
        assert!(doc["parameters"][name]["allowedPattern"].is_string(), "{name}");
    }
    let deploy = |extra: &[&str]| {
        let mut args = vec!["ssm-document", "deploy", "--output", "json"];
        args.extend_from_slice(extra);
        let run = bed.run(&args);
        run.ok();
        run.json()
    };
    assert_eq!(
        deploy(&[]),
        json!({
            "document": "hostkeyctl-Install", "default_version": "1", "result": "created",
            "check": {"document": "hostkeyctl-Check", "default_version": "1", "result": "created"},
            "converge": {"document": "hostkeyctl-Converge", "default_version": "1", "result": "created"},
        })
    );
    assert_eq!(deploy(&[])["result"], "unchanged");
    // SSM's hash of the default version is the SHA-256 of what print shows:
    // what push, rotate and audit --via-ssm compare.
    let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config(1).await);
    for (name, kind) in [
        ("hostkeyctl-Install", "install"),
        ("hostkeyctl-Check", "check"),
        ("hostkeyctl-Converge", "converge"),
    ] {
        let described = ssm.describe_document().name(name).send().await.unwrap();
        let printed = bed.cli("ssm-document print").args(&["--kind", kind]).run().stdout;
        assert_eq!(
            described.document().unwrap().hash().unwrap(),
            sha256_hex(&printed),
            "{name}"
        );
    }
    let moved = deploy(&["--node-command", "/usr/local/bin/hostkeyctl"]);
    assert_eq!(
        (moved["result"].as_str(), moved["default_version"].as_str()),
        (Some("updated"), Some("2"))
    );
}

#[test]
fn push_and_rotate_run_through_the_document_with_the_shell_document_denied() {
    // The admin and rotation roles may send hostkeyctl-Install only
    // (iam/admin.json, iam/rotation.json), which the bed enforces.
    let bed = TestBed::start(BedOptions::default());
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    let mut push = vec!["push", "--secret-id", SECRET, "--max-concurrency", "100%"];
    push.extend(TARGETS);
    let run = bed.run(&push);
    run.ok();
    let rotate = |phase: &str| {
        bed.cli("rotate --max-concurrency 100% --min-overlap 0")
            .secret()
            .targets()
            .json()
            .args(&[phase])
            .run()
    };
    rotate("--overlap").ok();
    let finish = rotate("--finish");
    finish.ok();
    assert_eq!(finish.json()["result"], "rotated");
    for c in bed.commands() {
        assert_eq!(c["DocumentName"], "hostkeyctl-Install", "{c}");
        assert_eq!(c["DocumentVersion"], "1", "the default version, pinned: {c}");
        assert!(c["Parameters"].get("commands").is_none(), "{c}");
        for inv in c["Invocations"].as_object().unwrap().values() {
            assert_eq!(inv["Status"], "Success", "{c}");
        }
    }
    let run = bed.cli("audit").secret().targets().run();
    run.ok();
    // The shell document itself is refused by the admin's policy.
    let run = bed.run(&[push.clone(), vec!["--document", "AWS-RunShellScript"]].concat());
    run.code(4);
    assert!(
        run.stderr.contains("ssm:SendCommand") && run.stderr.contains("document/AWS-RunShellScript"),
        "{}",
        run.stderr
    );
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(text.as_bytes()))
}

/// Replaces the default version of `name` with `content` (a new version,
/// made the default), as anyone allowed ssm:UpdateDocument could.
pub(crate) async fn tamper(ssm: &aws_sdk_ssm::Client, name: &str, content: &str) -> String {
    let out = ssm
        .update_document()
        .name(name)
        .content(content)
        .document_version("$LATEST")
        .send()
        .await
        .unwrap();
    let version = out
        .document_description()
        .unwrap()
        .document_version()
        .unwrap()
        .to_owned();
    ssm.update_document_default_version()
        .name(name)
        .document_version(&version)
        .send()
        .await
        .unwrap();
    version
}

/// Reproduces issue 26: a hostkeyctl-Install with one extra line ran that
/// line as root on every node at the next routine push. A document is now
/// trusted by its hash: push, rotate and audit --via-ssm refuse (exit 2)
/// and send nothing; a redeploy makes it right; a deliberate custom
/// document goes out by name with its hash in the report.
#[tokio::test(flavor = "multi_thread")]
async fn a_tampered_document_is_never_sent() {
    let bed = TestBed::start(BedOptions::default());
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config(1).await);
    let ours = bed.cli("ssm-document print").run().stdout;
    let pwned = bed.dir().join("pwned");
    let evil = ours.replacen(
        "\"set -eu\",",
        &format!("\"set -eu\", \"touch {}\",", pwned.display()),
        1,
    );
    assert_ne!(evil, ours);
    tamper(&ssm, "hostkeyctl-Install", &evil).await;
    let check = bed.cli("ssm-document print").args(&["--kind", "check"]).run().stdout;
    tamper(&ssm, "hostkeyctl-Check", &check.replacen("set -eu", "set -u", 1)).await;

    let mut push = vec!["push", "--secret-id", SECRET, "--max-concurrency", "100%"];
    push.extend(TARGETS);
    let mut rotate = vec!["rotate", "--secret-id", SECRET, "--max-concurrency", "100%"];
    rotate.extend(TARGETS);
    let mut audit = vec!["audit", "--secret-id", SECRET, "--via-ssm"];
    audit.extend(TARGETS);
    for (args, name, option, expected) in [
        (&push, "hostkeyctl-Install", " --document NAME", sha256_hex(&ours)),
        (&rotate, "hostkeyctl-Install", " --document NAME", sha256_hex(&ours)),
        (&audit, "hostkeyctl-Check", " --check-document NAME", sha256_hex(&check)),
    ] {
        let run = bed.run(args);
        run.code(2);
        for needle in [
            name,
            "is not the document this hostkeyctl deploys",
            "ssm-document deploy",
            option,
            &expected,
        ] {
            assert!(run.stderr.contains(needle), "{args:?}: no {needle:?} in {}", run.stderr);
        }
    }
    assert!(bed.commands().is_empty(), "something was sent: {:?}", bed.commands());
    assert!(!pwned.exists());
    // The rotation stored nothing either: refused before its first write.
    let status = bed.cli("status").secret().json().run().json();
    assert_eq!(status["versions"].as_array().unwrap().len(), 1, "{status}");

    // A deliberate custom document is the operator's call: sent by name, as
    // it is, with its hash in the report (the admin role may send only
    // hostkeyctl-Install, so the bed's own account sends it).
    ssm.create_document()
        .name("site-Install")
        .content(&evil)
        .document_type(aws_sdk_ssm::types::DocumentType::Command)
        .document_format(aws_sdk_ssm::types::DocumentFormat::Json)
        .send()
        .await
        .unwrap();
    let custom = [push.clone(), vec!["--document", "site-Install"]].concat();
    let denied = bed.run(&custom);
    denied.code(4);
    let sent = bed.run_as(Role::BedRoot, &[custom, vec!["--output", "json"]].concat());
    sent.ok();
    assert!(
        sent.stderr.contains("custom SSM document site-Install"),
        "{}",
        sent.stderr
    );
    let document = &sent.json()["document"];
    assert_eq!(
        (
            document["name"].as_str(),
            document["sha256"].as_str(),
            document["trust"].as_str()
        ),
        (Some("site-Install"), Some(sha256_hex(&evil).as_str()), Some("custom")),
        "{document}"
    );
    assert!(pwned.exists(), "the custom document ran as it is");

    // Redeploying hostkeyctl's own makes push work again, at the new version.
    let deploy = bed.cli("ssm-document deploy").json().run();
    deploy.ok();
    assert_eq!(
        (
            deploy.json()["result"].as_str(),
            deploy.json()["check"]["result"].as_str()
        ),
        (Some("restored"), Some("restored"))
    );
    let run = bed.run(&[push.clone(), vec!["--output", "json"]].concat());
    run.ok();
    assert_eq!(run.json()["document"]["trust"], "pinned");
    assert_eq!(run.json()["document"]["version"], "1", "the version that held it");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bed_refuses_bad_parameters_and_no_node_runs_anything() {
    let bed = TestBed::start(BedOptions::default());
    let init = bed.init_generated(SECRET);
    bed.cli("ssm-document deploy").run().ok();
    let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config(1).await);
    let version = init["version_id"].as_str().unwrap().to_owned();
    let expect = set_fingerprints(&init)
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(",");
    let ids: Vec<String> = bed.state.nodes.iter().map(|n| n.instance_id.clone()).collect();
    let good = || {
        vec![
            ("SecretId", SECRET.to_owned()),
            ("VersionId", version.clone()),
            ("Expect", expect.clone()),
        ]
    };
    let with = |name: &'static str, value: &str| {
        let mut p: Vec<(&str, String)> = good().into_iter().filter(|(n, _)| *n != name).collect();
        p.push((name, value.to_owned()));
        p
    };
    let cases: Vec<(&str, Vec<(&str, String)>)> = vec![
        ("a semicolon", with("SecretId", "hk;touch /tmp/pwned")),
        ("a command substitution", with("SecretId", "$(touch /tmp/pwned)")),
        ("a space", with("SecretId", "hk --no-reload")),
        ("a newline", with("SecretId", "hk\ntouch /tmp/pwned")),
        (
            "an unknown parameter",
            [good(), vec![("commands", "id".to_owned())]].concat(),
        ),
        (
            "a missing version id",
            good().into_iter().filter(|(n, _)| *n != "VersionId").collect(),
        ),
    ];
    let files_before: Vec<_> = bed
        .state
        .nodes
        .iter()
        .map(|n| crate::common::bed::snapshot(&n.ssh_dir))
        .collect();
    for (what, params) in cases {
        let mut send = ssm
            .send_command()
            .document_name("hostkeyctl-Install")
            .set_instance_ids(Some(ids.clone()));
        for (name, value) in params {
            send = send.parameters(name, vec![value]);
        }
        let err = send.send().await.expect_err(what);
        let code = aws_sdk_ssm::error::ProvideErrorMetadata::code(&err).map(str::to_owned);
        assert_eq!(code.as_deref(), Some("InvalidParameters"), "{what}: {err:?}");
    }
    assert!(bed.commands().is_empty(), "a refused command ran");
    let files_after: Vec<_> = bed
        .state
        .nodes
        .iter()
        .map(|n| crate::common::bed::snapshot(&n.ssh_dir))
        .collect();
    assert_eq!(files_before, files_after);
    assert!(!std::path::Path::new("/tmp/pwned").exists());
    // The same parameters, well formed, do run.
    let mut send = ssm
        .send_command()
        .document_name("hostkeyctl-Install")
        .set_instance_ids(Some(ids.clone()));
    for (name, value) in good() {
        send = send.parameters(name, vec![value]);
    }
    send.send().await.unwrap();
    crate::common::bed::wait_until("the document's installs", std::time::Duration::from_secs(60), || {
        bed.commands()[0]["Invocations"]
            .as_object()
            .unwrap()
            .values()
            .all(|i| i["Status"] == "Success")
    });
}

/// The CloudFormation template is generated from iam/*.json and the SSM
/// document; the committed one must be exactly what the generator makes
/// now (`make lint-aws` lints it).
#[test]
fn the_cloudformation_template_matches_its_sources() {
    use std::process::Command;

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for kind in ["install", "check", "converge"] {
        let print = crate::common::support::hostkeyctl()
            .args(["ssm-document", "print", "--kind", kind])
            .output()
            .unwrap();
        assert!(print.status.success());
        let path = dir.path().join(format!("{kind}.json"));
        std::fs::write(&path, &print.stdout).unwrap();
        paths.push(path);
    }
    let generated = Command::new("python3")
        .arg(root.join("scripts/cloudformation.py"))
        .args(&paths)
        .output()
        .unwrap();
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let committed = std::fs::read_to_string(root.join("cloudformation/hostkeyctl.json")).unwrap();
    assert_eq!(
        String::from_utf8(generated.stdout).unwrap(),
        committed,
        "cloudformation/hostkeyctl.json is stale: regenerate it with `python3 scripts/cloudformation.py <(hostkeyctl ssm-document print) <(hostkeyctl ssm-document print --kind check) <(hostkeyctl ssm-document print --kind converge) > cloudformation/hostkeyctl.json`"
    );
}
