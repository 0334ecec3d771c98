//! hostkeyctl's own SSM document (issue 15): printed byte-stable, deployed
//! as versions, used by push and rotate with AWS-RunShellScript denied, and
//! enforced by the bed as SSM does (declared parameters only, required ones
//! present, each matching its allowedPattern in full).

use serde_json::{Value, json};

use crate::bed::{BedOptions, TestBed, set_fingerprints};

const TARGETS: [&str; 4] = ["--target", "tag:Role=login", "--target", "tag:Cluster=hp"];

#[test]
fn print_is_byte_stable_and_deploy_adds_versions_only_when_it_changes() {
    let bed = TestBed::start(BedOptions {
        nodes: 0,
        ..BedOptions::default()
    });
    let first = bed.run(&["ssm-document", "print"]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    assert_eq!(
        bed.run(&["ssm-document", "print"]).stdout,
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
        assert_eq!(run.code, 0, "{}", run.stderr);
        run.json()
    };
    assert_eq!(
        deploy(&[]),
        json!({"document": "hostkeyctl-Install", "default_version": "1", "result": "created"})
    );
    assert_eq!(deploy(&[])["result"], "unchanged");
    let moved = deploy(&["--node-command", "/usr/local/bin/hostkeyctl"]);
    assert_eq!(
        (moved["result"].as_str(), moved["default_version"].as_str()),
        (Some("updated"), Some("2"))
    );
}

#[test]
fn push_and_rotate_run_through_the_document_with_the_shell_document_denied() {
    let bed = TestBed::start(BedOptions::default());
    bed.init_from_node("hk", &bed.state.nodes[0]);
    assert_eq!(bed.run(&["ssm-document", "deploy"]).code, 0);
    bed.set_faults(json!({ "deny_documents": ["AWS-RunShellScript"] }));
    let mut push = vec!["push", "--secret-id", "hk", "--max-concurrency", "100%"];
    push.extend(TARGETS);
    let run = bed.run(&push);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut rotate = vec![
        "rotate",
        "--secret-id",
        "hk",
        "--max-concurrency",
        "100%",
        "--output",
        "json",
    ];
    rotate.extend(TARGETS);
    let overlap = bed.run(&[rotate.clone(), vec!["--overlap"]].concat());
    assert_eq!(overlap.code, 0, "{}", overlap.stderr);
    let finish = bed.run(&[rotate.clone(), vec!["--finish"]].concat());
    assert_eq!(finish.code, 0, "{}", finish.stderr);
    assert_eq!(finish.json()["result"], "rotated");
    for c in bed.commands() {
        assert_eq!(c["DocumentName"], "hostkeyctl-Install", "{c}");
        assert!(c["Parameters"].get("commands").is_none(), "{c}");
        for inv in c["Invocations"].as_object().unwrap().values() {
            assert_eq!(inv["Status"], "Success", "{c}");
        }
    }
    let mut audit = vec!["audit", "--secret-id", "hk"];
    audit.extend(TARGETS);
    let run = bed.run(&audit);
    assert_eq!(run.code, 0, "the audit is not clean: {}", run.stdout);
    // The shell document itself is refused, as the role would be.
    let run = bed.run(&[push.clone(), vec!["--document", "AWS-RunShellScript"]].concat());
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert!(run.stderr.contains("ssm:SendCommand"), "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bed_refuses_bad_parameters_and_no_node_runs_anything() {
    let bed = TestBed::start(BedOptions::default());
    let init = bed.init_generated("hk");
    assert_eq!(bed.run(&["ssm-document", "deploy"]).code, 0);
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
            ("SecretId", "hk".to_owned()),
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
        .map(|n| crate::bed::snapshot(&n.ssh_dir))
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
        .map(|n| crate::bed::snapshot(&n.ssh_dir))
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
    crate::bed::wait_until("the document's installs", std::time::Duration::from_secs(60), || {
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
    use std::io::Write;
    use std::process::{Command, Stdio};

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let print = crate::support::hostkeyctl()
        .args(["ssm-document", "print"])
        .output()
        .unwrap();
    assert!(print.status.success());
    let mut generator = Command::new("python3")
        .arg(root.join("scripts/cloudformation.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    generator.stdin.take().unwrap().write_all(&print.stdout).unwrap();
    let generated = generator.wait_with_output().unwrap();
    assert!(generated.status.success());
    let committed = std::fs::read_to_string(root.join("cloudformation/hostkeyctl.json")).unwrap();
    assert_eq!(
        String::from_utf8(generated.stdout).unwrap(),
        committed,
        "cloudformation/hostkeyctl.json is stale: regenerate it with `hostkeyctl ssm-document print | python3 scripts/cloudformation.py > cloudformation/hostkeyctl.json`"
    );
}
