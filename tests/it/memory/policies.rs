//! Least privilege on paper (issue 26): docs/iam.md lists exactly each
//! policy's actions and the code's calls, the policy text scopes every
//! grant (what the bed's emulator cannot check), and a CA the nodes could
//! read is refused before any AWS call. The bed tier (iam.rs) enforces the
//! same policies on every command.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Value, json};

use crate::common::roles::Role;

const ROLES: [&str; 9] = [
    "admin",
    "rotation",
    "node",
    "auditor",
    "signer",
    "rotation-lambda",
    "admission",
    "enrolment",
    "cluster-node",
];
/// Actions AWS checks on the caller's behalf inside a call the code makes:
/// RotateSecret needs `lambda:InvokeFunction` on the rotation function (its
/// API reference), and CreateKey with Tags needs `kms:TagResource` (the
/// KMS API reference, CreateKey). The code never names them.
const IMPLIED: [&str; 2] = ["lambda:InvokeFunction", "kms:TagResource"];
const AWS_SERVICES: [&str; 10] = [
    "autoscaling",
    "cloudwatch",
    "lambda",
    "secretsmanager",
    "ssm",
    "ec2",
    "elasticloadbalancing",
    "sagemaker",
    "kms",
    "dynamodb",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn policy(role: &str) -> Value {
    let text = std::fs::read_to_string(root().join(format!("iam/{role}.json"))).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn list(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().map(|v| v.as_str().unwrap().to_owned()).collect(),
        _ => vec![],
    }
}

fn statements(role: &str) -> Vec<Value> {
    policy(role)["Statement"].as_array().unwrap().clone()
}

fn actions(role: &str) -> BTreeSet<String> {
    statements(role).iter().flat_map(|s| list(&s["Action"])).collect()
}

/// `service:Action` strings in the code outside the test doubles: the
/// calls hostkeyctl makes (each AWS call is named so for its errors).
fn code_actions() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut dirs = vec![root().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("testing") {
                    dirs.push(path);
                }
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for piece in text.split('"').skip(1).step_by(2) {
                if let Some((service, action)) = piece.split_once(':')
                    && AWS_SERVICES.contains(&service)
                    && action.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                    && action.chars().all(|c| c.is_ascii_alphanumeric())
                {
                    found.insert(piece.to_owned());
                }
            }
        }
    }
    found
}

/// docs/iam.md's checked table: role -> (commands, actions).
fn documented() -> BTreeMap<String, (Vec<String>, BTreeSet<String>)> {
    let text = std::fs::read_to_string(root().join("docs/iam.md")).unwrap();
    let start = text
        .find("<!-- role-actions")
        .expect("docs/iam.md has the role-actions table");
    let end = text.find("<!-- /role-actions -->").unwrap();
    let mut out = BTreeMap::new();
    for line in text[start..end].lines().skip(3) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cells.len(), 4, "a row of four cells: {line}");
        let commands = cells[2].split(", ").map(str::to_owned).collect();
        let actions = cells[3].split(", ").map(|a| a.trim_matches('`').to_owned()).collect();
        out.insert(cells[0].to_owned(), (commands, actions));
    }
    out
}

#[test]
fn docs_list_exactly_each_policys_actions_and_the_code_calls_exactly_what_is_granted() {
    let documented = documented();
    assert_eq!(
        documented.keys().cloned().collect::<BTreeSet<_>>(),
        ROLES.map(str::to_owned).into()
    );
    let mut granted = BTreeSet::new();
    for role in ROLES {
        let (commands, listed) = &documented[role];
        assert_eq!(
            listed,
            &actions(role),
            "docs/iam.md lists other actions for {role} than iam/{role}.json grants"
        );
        granted.extend(actions(role));
        // The bed signs each command as the role the docs name for it.
        let expected = match role {
            "admin" => Role::Admin,
            "rotation" => Role::Rotation,
            "node" => Role::Node,
            "auditor" => Role::Auditor,
            "rotation-lambda" => Role::RotationLambda,
            "admission" => Role::Admission,
            "enrolment" => Role::Enrolment,
            "cluster-node" => Role::ClusterNode,
            _ => Role::Signer,
        };
        for command in commands {
            let words: Vec<&str> = command.split(' ').collect();
            assert_eq!(
                Role::for_command(&words),
                expected,
                "{command} is documented for {role}"
            );
        }
    }
    let called = code_actions();
    assert!(called.len() > 15, "the scan found the calls: {called:?}");
    let ungranted: Vec<_> = called.difference(&granted).collect();
    assert!(
        ungranted.is_empty(),
        "the code calls what no policy grants: {ungranted:?}"
    );
    let unused: Vec<_> = granted
        .difference(&called)
        .filter(|a| !IMPLIED.contains(&a.as_str()))
        .collect();
    assert!(
        unused.is_empty(),
        "a policy grants what the code never calls: {unused:?}"
    );
}

/// What the emulator cannot check (conditions it does not model, the
/// policies' own shape), held on the text.
#[test]
fn the_policies_scope_every_grant() {
    let key_sets = "arn:aws:secretsmanager:*:111122223333:secret:hostkeys/*";
    let cas = "arn:aws:secretsmanager:*:111122223333:secret:hostkeyctl-ca/*";
    for role in ROLES {
        for st in statements(role) {
            assert_eq!(st["Effect"], "Allow", "{role}: {st}");
            assert!(
                st.get("NotAction").is_none() && st.get("NotResource").is_none(),
                "{role}: {st}"
            );
            let acts = list(&st["Action"]);
            let resources = list(&st["Resource"]);
            for a in &acts {
                assert!(!a.contains('*'), "{role}: a wildcard action {a}");
            }
            let service = acts[0].split(':').next().unwrap().to_owned();
            let finders = ["ec2", "elasticloadbalancing"];
            assert!(
                acts.iter().all(|a| a.starts_with(&format!("{service}:"))
                    || (finders.contains(&service.as_str()) && finders.contains(&a.split(':').next().unwrap()))),
                "{role}: one service a statement: {st}"
            );
            match service.as_str() {
                "secretsmanager" => {
                    assert!(resources.iter().all(|r| r == key_sets || r == cas), "{role}: {st}");
                }
                "ssm"
                    if acts
                        .iter()
                        .any(|a| a != "ssm:ListCommandInvocations" && a != "ssm:CancelCommand") =>
                {
                    ssm_statement_is_scoped(role, &st, &acts, &resources);
                }
                "elasticloadbalancing" if acts.iter().any(|a| a.ends_with("Targets")) => {
                    admission_statement_is_scoped(role, &st, &acts, &resources);
                }
                "ssm" | "ec2" | "elasticloadbalancing" => {
                    // Reads and command polling without resource-level permissions.
                    assert!(
                        acts.iter()
                            .all(|a| a.contains(":Describe") || a.contains(":List") || a == "ssm:CancelCommand"),
                        "{role}: {st}"
                    );
                }
                "autoscaling" => hook_statement_is_scoped(role, &st, &acts, &resources),
                "sagemaker" => assert_eq!(
                    resources,
                    ["arn:aws:sagemaker:*:111122223333:cluster/*"],
                    "{role}: {st}"
                ),
                // The audit's metrics: PutMetricData has no resource, so
                // the namespace condition is the scope (parliament checks
                // the key; the emulator does not evaluate it).
                "cloudwatch" => {
                    assert_eq!(
                        (role, acts.as_slice()),
                        ("auditor", ["cloudwatch:PutMetricData".to_owned()].as_slice()),
                        "{st}"
                    );
                    assert_eq!(
                        st["Condition"],
                        json!({"StringLike": {"cloudwatch:namespace": "hostkeyctl*"}}),
                        "{st}"
                    );
                }
                // Starting a rotation, and pinning its function to its
                // secret: the rotation role, on hostkeyctl's function alone.
                "lambda" | "dynamodb" => enrolment_or_lambda_is_scoped(role, &st, &acts, &resources),
                "kms" => kms_statement_is_scoped(role, &st, &acts, &resources),
                other => panic!("{role}: an unexpected service {other}"),
            }
        }
    }
}

/// Lambda: the node reaches the enrolment signer; the rotation role
/// starts and pins hostkeyctl's rotation function; the admin reads the
/// functions' settings. DynamoDB: the
/// enrolment signer's bindings table, items only.
fn enrolment_or_lambda_is_scoped(role: &str, st: &Value, acts: &[String], resources: &[String]) {
    match acts[0].split(':').next().unwrap() {
        // A node reaches its own stack's enrolment signer (the template
        // names it after the stack, as the example's hostkeyctl-my-cluster),
        // never another stack's, and nothing else of Lambda (D2).
        "lambda" if role == "node" || role == "cluster-node" => {
            assert_eq!(acts, ["lambda:InvokeFunction"], "{st}");
            assert_eq!(
                resources,
                ["arn:aws:lambda:*:111122223333:function:hostkeyctl-enrolment-hostkeyctl-my-cluster"],
                "{st}"
            );
        }
        // The enrolment signer's bindings table, items only: the signer its
        // own stack's; the admin every stack's.
        "dynamodb" => {
            let table = if role == "enrolment" {
                "arn:aws:dynamodb:*:111122223333:table/hostkeyctl-enrolment-hostkeyctl-my-cluster"
            } else {
                "arn:aws:dynamodb:*:111122223333:table/hostkeyctl-enrolment*"
            };
            assert_eq!(resources, [table], "{st}");
            // The signer reads and writes items and lists the revoked; the
            // admin lists and revokes; nobody deletes or drops.
            let allowed: &[&str] = match role {
                "enrolment" => &["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Scan"],
                "admin" => &["dynamodb:Scan", "dynamodb:UpdateItem"],
                _ => panic!("{role} reaches the bindings table: {st}"),
            };
            assert!(acts.iter().all(|a| allowed.contains(&a.as_str())), "{st}");
        }
        // The admin reads hostkeyctl's functions' settings (doctor), and
        // changes none.
        "lambda" if role == "admin" => {
            assert_eq!(acts, ["lambda:GetFunctionConfiguration"], "{st}");
            assert_eq!(
                resources,
                ["arn:aws:lambda:*:111122223333:function:hostkeyctl-*"],
                "{st}"
            );
        }
        "lambda" => {
            assert_eq!(role, "rotation", "{st}");
            assert_eq!(
                resources,
                ["arn:aws:lambda:*:111122223333:function:hostkeyctl-rotation*"],
                "{st}"
            );
            assert!(
                acts.iter().all(|a| [
                    "lambda:InvokeFunction",
                    "lambda:GetFunctionConfiguration",
                    "lambda:UpdateFunctionConfiguration"
                ]
                .contains(&a.as_str())),
                "{st}"
            );
        }
        other => panic!("{role}: an unexpected service {other}"),
    }
}

/// A CA in KMS: only the admin creates (and tags) keys; the CA's public
/// key and signatures only from keys tagged as host CAs, and signing only
/// by the roles that sign (sign, rotate, the rotation function).
fn kms_statement_is_scoped(role: &str, st: &Value, acts: &[String], resources: &[String]) {
    let keys = ["arn:aws:kms:*:111122223333:key/*".to_owned()];
    let tagged = json!({"StringEquals": {"aws:ResourceTag/hostkeyctl:purpose": "ssh-host-ca"}});
    match acts {
        [a] if a == "kms:CreateKey" => {
            // CreateKey names no key yet: "*" is its only resource, and
            // the conditions hold it to tagged signing keys.
            assert_eq!((role, resources), ("admin", ["*".to_owned()].as_slice()), "{st}");
            assert_eq!(
                st["Condition"],
                json!({"StringEquals": {"kms:KeyUsage": "SIGN_VERIFY", "aws:RequestTag/hostkeyctl:purpose": "ssh-host-ca"}}),
                "{st}"
            );
        }
        [a] if a == "kms:TagResource" => {
            // Tag-on-create: the one tag, and no other tag on any key.
            assert_eq!((role, resources), ("admin", keys.as_slice()), "{st}");
            assert_eq!(
                st["Condition"],
                json!({
                    "StringEquals": {"aws:RequestTag/hostkeyctl:purpose": "ssh-host-ca"},
                    "ForAllValues:StringEquals": {"aws:TagKeys": ["hostkeyctl:purpose"]}
                }),
                "{st}"
            );
        }
        [a] if a == "kms:GetPublicKey" => {
            assert_eq!((role, resources), ("admin", keys.as_slice()), "{st}");
            assert_eq!(st["Condition"], tagged, "{st}");
        }
        [a] if a == "kms:Sign" => {
            assert!(
                ["signer", "rotation", "rotation-lambda", "enrolment"].contains(&role),
                "{st}"
            );
            assert_eq!(resources, keys.as_slice(), "{st}");
            assert_eq!(st["Condition"], tagged, "{st}");
        }
        _ => panic!("{role}: an unexpected KMS grant {st}"),
    }
}

/// Admission lets a launching instance in service once it serves the
/// set: the one group's hook alone.
fn hook_statement_is_scoped(role: &str, st: &Value, acts: &[String], resources: &[String]) {
    assert_eq!(role, "admission", "{st}");
    let want = match acts {
        [a] if a == "autoscaling:DescribeAutoScalingGroups" => "*",
        [a] if a == "autoscaling:CompleteLifecycleAction" => {
            "arn:aws:autoscaling:*:111122223333:autoScalingGroup:*:autoScalingGroupName/my-cluster-login"
        }
        _ => panic!("{st}"),
    };
    assert_eq!(resources, [want], "{st}");
}

/// Registering and deregistering: admission's, in the login target group
/// alone (its name is the template's parameter).
fn admission_statement_is_scoped(role: &str, st: &Value, acts: &[String], resources: &[String]) {
    assert_eq!(role, "admission", "{st}");
    assert_eq!(
        resources,
        ["arn:aws:elasticloadbalancing:*:111122223333:targetgroup/my-cluster-login/*"],
        "{st}"
    );
    assert_eq!(
        acts,
        [
            "elasticloadbalancing:RegisterTargets",
            "elasticloadbalancing:DeregisterTargets"
        ],
        "{st}"
    );
}

/// The CA is read by the signer and by rotate only, created by the admin;
/// a node reads key sets and reports its compliance; an auditor writes
/// nothing and sends only the check document.
#[test]
fn the_ca_nodes_and_auditors_hold_only_their_grants() {
    let cas = "arn:aws:secretsmanager:*:111122223333:secret:hostkeyctl-ca/*";
    // The CA: read by the signer and by rotate (which signs new sets),
    // created and described (never read) by the admin, never reachable by
    // a node or an auditor.
    let on_cas = |role: &str| -> BTreeSet<String> {
        statements(role)
            .iter()
            .filter(|s| list(&s["Resource"]).iter().any(|r| r == cas))
            .flat_map(|s| list(&s["Action"]))
            .collect()
    };
    assert!(on_cas("node").is_empty() && on_cas("auditor").is_empty());
    // Controller and compute nodes: the signer's Invoke, nothing else (no
    // key set: a job there would read the login nodes' keys).
    assert_eq!(actions("cluster-node"), ["lambda:InvokeFunction".to_owned()].into());
    assert_eq!(on_cas("signer"), ["secretsmanager:GetSecretValue".to_owned()].into());
    assert_eq!(on_cas("rotation"), ["secretsmanager:GetSecretValue".to_owned()].into());
    assert_eq!(
        on_cas("rotation-lambda"),
        ["secretsmanager:GetSecretValue".to_owned()].into()
    );
    assert_eq!(on_cas("enrolment"), ["secretsmanager:GetSecretValue".to_owned()].into());
    assert_eq!(
        on_cas("admin"),
        [
            "secretsmanager:CreateSecret".to_owned(),
            "secretsmanager:DescribeSecret".to_owned(),
            "secretsmanager:TagResource".to_owned()
        ]
        .into()
    );
    // A node reads the key sets, reports its own compliance and asks the
    // enrolment signer (which alone holds kms:Sign); nothing else.
    assert_eq!(
        actions("node"),
        [
            "lambda:InvokeFunction".to_owned(),
            "secretsmanager:GetSecretValue".to_owned(),
            "ssm:PutComplianceItems".to_owned()
        ]
        .into()
    );
    for write in [
        "secretsmanager:GetSecretValue",
        "secretsmanager:PutSecretValue",
        "secretsmanager:UpdateSecretVersionStage",
    ] {
        assert!(!actions("auditor").contains(write), "the auditor may {write}");
    }
    // Admission reads public fingerprints only, and sends no command.
    for a in actions("admission") {
        assert!(
            !a.starts_with("ssm:") && (!a.starts_with("secretsmanager:") || a == "secretsmanager:DescribeSecret"),
            "admission may {a}"
        );
    }
    // The enrolment signer knows the set by its public fingerprints (the
    // secret's tags): DescribeSecret on the key sets, never their value.
    let key_sets = "arn:aws:secretsmanager:*:111122223333:secret:hostkeys/*";
    let signer_on_sets: BTreeSet<String> = statements("enrolment")
        .iter()
        .filter(|s| list(&s["Resource"]).iter().any(|r| r == key_sets))
        .flat_map(|s| list(&s["Action"]))
        .collect();
    assert_eq!(signer_on_sets, ["secretsmanager:DescribeSecret".to_owned()].into());
    // The auditor sends the check document only.
    for st in statements("auditor") {
        for r in list(&st["Resource"]) {
            assert!(!r.ends_with("document/hostkeyctl-Install"), "{st}");
        }
    }
}

/// A CA under the key sets' prefix would be readable by every login node
/// (iam/node.json grants GetSecretValue on `hostkeys/*`): `ca init` refuses
/// to create one, and `sign`, `rotate` and `known-hosts` refuse to read
/// one, before any AWS call (the endpoint here is a closed port, so a call
/// would end in exit 4, not 2).
#[test]
fn a_ca_the_nodes_could_read_is_never_created_or_read() {
    let ca_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hostkeys/ca-AbCdEf";
    let cases: Vec<Vec<&str>> = vec![
        vec!["ca", "init", "--ca-secret-id", "hostkeys/x"],
        vec!["ca", "init", "--ca-secret-id", ca_arn],
        vec![
            "sign",
            "--secret-id",
            crate::common::SECRET,
            "--ca-secret-id",
            "hostkeys/ca",
            "--principal",
            "a.test",
        ],
        vec![
            "rotate",
            "--secret-id",
            crate::common::SECRET,
            "--ca-secret-id",
            ca_arn,
            "--target",
            "tag:Role=login",
        ],
        vec![
            "known-hosts",
            "--host",
            "a.test",
            "--cert-authority",
            "--ca-secret-id",
            "hostkeys/ca",
        ],
        vec![
            "ca",
            "init",
            "--ca-secret-id",
            "site/keys/ca",
            "--key-set-prefix",
            "site/keys/",
        ],
    ];
    for args in cases {
        let out = crate::common::support::hostkeyctl()
            .args(&args)
            .env("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "x")
            .env("AWS_SECRET_ACCESS_KEY", "x")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("the prefix every login node's role may read") && stderr.contains("--key-set-prefix"),
            "{args:?}: {stderr}"
        );
    }
}

/// An SSM statement that does more than poll: documents are hostkeyctl's,
/// instances only the login nodes (or the node's own compliance),
/// associations only of the converge and setup documents.
fn ssm_statement_is_scoped(role: &str, st: &Value, acts: &[String], resources: &[String]) {
    let documents = [
        "arn:aws:ssm:*:111122223333:document/hostkeyctl-Install",
        "arn:aws:ssm:*:111122223333:document/hostkeyctl-Check",
        "arn:aws:ssm:*:111122223333:document/hostkeyctl-Converge",
        "arn:aws:ssm:*:111122223333:document/hostkeyctl-Setup",
    ];
    let associations = "arn:aws:ssm:*:111122223333:association/*";
    for r in resources {
        if r.contains(":instance/") && acts == ["ssm:PutComplianceItems"] {
            // A node reports its own host keys' compliance: the node
            // role alone, on instances, never anything else.
            assert_eq!(role, "node", "{st}");
            assert_eq!(resources, ["arn:aws:ec2:*:111122223333:instance/*"], "{st}");
        } else if r.contains(":instance/") {
            // Only the login nodes: the emulator evaluates this condition,
            // and here its shape is held.
            assert_eq!(acts, ["ssm:SendCommand"], "{role}: {st}");
            // Only the login nodes: `Role=login`, or ParallelCluster's own
            // login node tag (docs/iam.md, "Which instances").
            let login = [
                json!({"StringEquals": {"ssm:resourceTag/Role": "login"}}),
                json!({"StringEquals": {"ssm:resourceTag/parallelcluster:node-type": "LoginNode"}}),
            ];
            assert!(login.contains(&st["Condition"]), "{role}: {st}");
        } else if r == associations {
            // State Manager's: only associations, of the converge
            // document where one is made (the emulator checks it).
            assert!(acts.iter().all(|a| a.ends_with("Association")), "{role}: {st}");
            if acts
                .iter()
                .any(|a| a.starts_with("ssm:Create") || a.starts_with("ssm:Update"))
            {
                // The converge document's, and the setup document's
                // (association deploy --deliver).
                assert_eq!(
                    resources,
                    [documents[2], documents[3], associations],
                    "{role}: an association of another document: {st}"
                );
            }
        } else if r == "*" {
            // Neither takes a resource (the Service Authorization
            // Reference): the associations' names, and which instances
            // SSM manages (doctor).
            assert!(
                acts == ["ssm:ListAssociations"] || acts == ["ssm:DescribeInstanceInformation"],
                "{role}: {st}"
            );
        } else {
            assert!(
                documents.contains(&r.as_str()),
                "{role}: a document not hostkeyctl's: {st}"
            );
        }
    }
}
