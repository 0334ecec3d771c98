//! The JSON reports of the commands the last waves added match their
//! schemas (docs/schemas/*.json, JSON Schema 2020-12, each `$id` the
//! report's name and version): samples made by the library's own flows
//! over the doubles, checked with the `jsonschema` package the bed's
//! Python already carries (testbed/requirements.txt). Each schema allows
//! no field it does not name, so a field renamed or added without its
//! schema fails here; and each is shown to refuse a sample with a field
//! taken out.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use hostkeyctl::association::{Deleted, DeployReport, DeployRequest, DocumentCheck, Shown, deploy, show};
use hostkeyctl::ca_init::{CaSource, InitRequest, init};
use hostkeyctl::document::KeySetPrefix;
use hostkeyctl::enrolment::Binding;
use hostkeyctl::enrolment::admin::{BindingList, Revoked};
use hostkeyctl::enrolment::node::Written;
use hostkeyctl::enrolment::node::enroll::Report;
use hostkeyctl::ids::{Program, SecretId};
use hostkeyctl::keyset::KeyAlgorithm;
use hostkeyctl::known_hosts::made::{MadeKrl, MadeText};
use hostkeyctl::rollout::deliver::{self, DeliverRequest};
use hostkeyctl::rollout::{Push, PushRequest};
use hostkeyctl::ssm_document::publish::{SetupReport, publish_setup};
use hostkeyctl::ssm_document::setup::{Arch, NodeBuilds, SETUP_NAME};
use hostkeyctl::ssm_document::{CONVERGE_NAME, DEFAULT_NAME, Kind, content};
use hostkeyctl::testing::{MemAssociations, MemDispatcher, MemKms, MemoryStore};

use crate::memory::{secret, world};

/// Each report's samples, by schema file.
async fn samples() -> Vec<(&'static str, Value)> {
    let mut out = ca_samples().await;
    out.extend(node_samples());
    out.extend(association_samples().await);
    out.extend(rollout_samples().await);
    out.extend(step_samples());
    out
}

/// `imds-guard` (its one serialiser written by hand) and `sessions`.
fn step_samples() -> Vec<(&'static str, Value)> {
    use hostkeyctl::imds_guard::{Family, FamilyReport, State};
    let guarded = [
        FamilyReport {
            family: Family::Ipv4,
            destination: Family::Ipv4.destination(),
            state: State::RootOnly { allowed: vec![1001] },
        },
        FamilyReport {
            family: Family::Ipv6,
            destination: Family::Ipv6.destination(),
            state: State::Ipv6Off,
        },
    ];
    let open = [FamilyReport {
        family: Family::Ipv4,
        destination: Family::Ipv4.destination(),
        state: State::Open,
    }];
    let session = |node: &str, command: Option<&str>, skipped: Option<&str>| hostkeyctl::sessions::Session {
        node: node.to_owned(),
        instance_id: "i-0123456789abcdef0".to_owned(),
        status: if command.is_some() { "Running" } else { "Pending" }.to_owned(),
        target: "sagemaker-cluster:abc123_login-i-0123456789abcdef0".to_owned(),
        command: command.map(str::to_owned),
        skipped: skipped.map(str::to_owned),
    };
    let sessions = hostkeyctl::sessions::Report {
        cluster: "my-cluster".to_owned(),
        group: "login".to_owned(),
        cluster_id: "abc123".to_owned(),
        sessions: vec![
            session("login-1", Some("aws ssm start-session ..."), None),
            session("login-2", None, Some("not Running")),
        ],
    };
    vec![
        ("imds-guard", to(&guarded)),
        ("imds-guard", to(&open)),
        ("sessions", to(&sessions)),
    ]
}

/// `ca init`: generated, and a new KMS key.
async fn ca_samples() -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    let store = MemoryStore::new();
    let kms = MemKms::p256(3);
    let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
    for (name, source) in [
        ("hostkeyctl-ca/a", CaSource::Generate(KeyAlgorithm::Ed25519)),
        ("hostkeyctl-ca/b", CaSource::NewKms(KeyAlgorithm::Ecdsa)),
    ] {
        let secret = SecretId::parse(name).unwrap();
        let request = InitRequest {
            secret: &secret,
            key_set_prefix: &prefix,
            source,
            tags: &[],
            kms_key_id: None,
        };
        out.push(("ca-init", to(&init(&store, &kms, &request).await.unwrap())));
    }
    out
}

/// `enroll` (a node with its certificates, a login node with the trust
/// alone), `enrolment list|revoke`, and `known-hosts` (text for a client,
/// a KRL written).
fn node_samples() -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    let node = Report {
        enrolled: Some(Written {
            instance_id: "i-0000000000000c001".to_owned(),
            principals: vec!["compute-1".to_owned(), "10.1.0.11".to_owned()],
            files: vec!["/etc/ssh/ssh_host_ed25519_key-cert.pub".into()],
            ca: "SHA256:ca".to_owned(),
            ca_line: "ssh-ed25519 AAAA".to_owned(),
            revoked: Vec::new(),
        }),
        listener: None,
        ca: "SHA256:ca".to_owned(),
        reload: Some("systemctl reload ssh".to_owned()),
        trusted: vec!["ip-10-1-*".to_owned()],
        revoked: 0,
    };
    let login = Report {
        enrolled: None,
        listener: None,
        ca: node.ca.clone(),
        reload: None,
        trusted: node.trusted.clone(),
        revoked: 1,
    };
    out.push(("enroll", to(&node.json())));
    out.push(("enroll", to(&login.json())));

    // enrolment list and revoke.
    let bindings = vec![
        (
            "i-0000000000000c001".to_owned(),
            Binding {
                fingerprints: vec!["SHA256:a".to_owned()],
                last_issued_at_ms: 1_800_000_000_000,
                ..Binding::default()
            },
        ),
        (
            "i-0000000000000c002".to_owned(),
            Binding {
                claim: true,
                revoked: true,
                ..Binding::default()
            },
        ),
    ];
    out.push(("enrolment-list", to(&BindingList::of(&bindings))));
    out.push((
        "enrolment-revoke",
        to(&Revoked {
            revoked: vec!["i-0000000000000c001".to_owned()],
            unknown: vec!["i-0000000000000c009".to_owned()],
        }),
    ));
    let line = "login.example ssh-ed25519 AAAA\n";
    out.push(("known-hosts", to(&MadeText::new("known_hosts", Some("paramiko"), line))));
    out.push(("known-hosts", to(&MadeText::new("ssh_config", None, line))));
    let krl = MadeKrl::new(Path::new("/tmp/hosts.krl"), None, "1 key, until 2027-01-01");
    out.push(("known-hosts", to(&krl)));
    out
}

/// `association deploy` (created; updated, as `--deliver` reports it
/// beside the setup's), `show` and `delete`, over the doubles.
async fn association_samples() -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    let (store, fleet, _) = world(1).await;
    let documents = MemDispatcher::new(&fleet, &store);
    let program = Program::parse("hostkeyctl").unwrap();
    documents.deploy(CONVERGE_NAME, &content(Kind::Converge, &program));
    let associations = MemAssociations::default();
    let (secret, targets) = (secret(), vec!["tag:Role=login".parse().unwrap()]);
    let request = DeployRequest {
        secret: &secret,
        region: None,
        name: "hostkeyctl-hk-test",
        targets: &targets,
        schedule: "rate(30 minutes)",
        document: CONVERGE_NAME,
        node_command: &program,
        max_concurrency: "10%",
        max_errors: "10%",
        allow_other_clusters: false,
    };
    let outcome = deploy(&store, &documents, &associations, &request).await.unwrap();
    let association = outcome.association.clone();
    out.push(("association-deploy", to(&DeployReport { outcome, setup: None })));
    let hourly = DeployRequest {
        schedule: "rate(1 hour)",
        ..request
    };
    let updated = deploy(&store, &documents, &associations, &hourly).await.unwrap();
    out.push((
        "association-deploy",
        to(&DeployReport {
            outcome: updated.clone(),
            setup: Some(updated),
        }),
    ));
    let shown = show(&documents, &associations, "hostkeyctl-hk-test", CONVERGE_NAME, &program)
        .await
        .unwrap()
        .unwrap();
    out.push(("association-show", to(&shown)));
    out.push((
        "association-show",
        to(&Shown {
            association,
            document: DocumentCheck::Other {
                reason: "it runs AWS-RunShellScript".to_owned(),
            },
        }),
    ));
    out.push((
        "association-delete",
        to(&Deleted::new("hostkeyctl-hk-test", Some("a-1"))),
    ));
    out.push(("association-delete", to(&Deleted::new("hostkeyctl-hk-test", None))));
    out
}

/// `push --dry-run` and `deliver --dry-run` (their plans, sent nowhere),
/// and `ssm-document deploy-setup` (the setup document published).
async fn rollout_samples() -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    let (store, fleet, _) = world(2).await;
    let documents = MemDispatcher::new(&fleet, &store);
    let program = Program::parse("hostkeyctl").unwrap();
    documents.deploy(DEFAULT_NAME, &content(Kind::Install, &program));
    let (secret, targets) = (secret(), vec!["tag:Role=login".parse().unwrap()]);
    let push = Push {
        store: &store,
        fleet: fleet.as_ref(),
        dispatcher: &documents,
    };
    let plan = push
        .plan(&PushRequest {
            secret: &secret,
            pin: None,
            targets: &targets,
            document: DEFAULT_NAME,
            node_command: &program,
            allow_other_clusters: false,
        })
        .await
        .unwrap();
    out.push((
        "push-dry-run",
        to(&plan.dry_run("hostkeyctl install --secret-id ARN --version-id V")),
    ));
    let builds = NodeBuilds {
        location: "s3://my-bucket/hostkeyctl/v1".parse().unwrap(),
        pins: [(Arch::X86_64, "a".repeat(64)), (Arch::Aarch64, "b".repeat(64))].into(),
    };
    let published = publish_setup(&documents, SETUP_NAME, builds).await.unwrap();
    let updated = vec!["hostkeyctl-hk-setup".to_owned()];
    out.push((
        "ssm-document-deploy-setup",
        to(&SetupReport {
            setup: &published,
            associations_updated: &updated,
        }),
    ));
    let request = DeliverRequest {
        secret: &secret,
        targets: &targets,
        document: SETUP_NAME,
        allow_other_clusters: false,
    };
    let plan = deliver::plan(&documents, fleet.as_ref(), &store, &request)
        .await
        .unwrap();
    out.push(("deliver-dry-run", to(&plan.dry_run())));
    out
}

/// A report as `--output json` prints it.
fn to<T: serde::Serialize>(report: &T) -> Value {
    serde_json::to_value(report).expect("a report serialises")
}

/// Each `(schema, instance)` checked by Python's jsonschema: the errors,
/// one string per instance (empty when it is valid).
fn validate(cases: &[(&str, Value)]) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schemas");
    let input: Vec<Value> = cases
        .iter()
        .map(|(schema, instance)| json!({ "schema": dir.join(format!("{schema}.json")), "instance": instance }))
        .collect();
    let script = r#"
import json, sys
import jsonschema
out = []
for case in json.load(sys.stdin):
    schema = json.load(open(case["schema"]))
    jsonschema.Draft202012Validator.check_schema(schema)
    errors = jsonschema.Draft202012Validator(schema).iter_errors(case["instance"])
    out.append("; ".join(sorted(f"{list(e.absolute_path)}: {e.message}" for e in errors)))
json.dump(out, sys.stdout)
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    serde_json::to_writer(child.stdin.take().unwrap(), &input).unwrap();
    let done = child.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "python3 with jsonschema (make deps installs it): {}",
        String::from_utf8_lossy(&done.stderr)
    );
    serde_json::from_slice(&done.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn each_new_report_matches_its_schema_and_a_field_taken_out_does_not() {
    let cases = samples().await;
    let errors = validate(&cases);
    for ((schema, instance), error) in cases.iter().zip(&errors) {
        assert!(error.is_empty(), "{schema}: {error}\n{instance:#}");
    }
    // Every schema is used, and every one refuses a sample missing its
    // first required field.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schemas");
    let mut broken = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let (schema, instance) = cases
            .iter()
            .find(|(s, _)| *s == name)
            .unwrap_or_else(|| panic!("docs/schemas/{name}.json has no sample here"));
        let text: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        // An array's first item, else the object itself.
        let required = text.get("items").unwrap_or(&text)["required"].clone();
        let first = required[0]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no required field"));
        let mut less = instance.clone();
        let object = match less.as_array_mut() {
            Some(items) => &mut items[0],
            None => &mut less,
        };
        object.as_object_mut().unwrap().remove(first);
        broken.push((*schema, less));
    }
    for ((schema, _), error) in broken.iter().zip(validate(&broken)) {
        assert!(
            !error.is_empty(),
            "{schema} accepted a sample without its first required field"
        );
    }
}
