//! The admin side on the test bed: init, status, discovery and push through
//! the AWS emulator to real sshd nodes.

use std::collections::BTreeSet;

use serde_json::json;

use crate::common::bed::{BedOptions, SECRET, TestBed, private_lines, served, set_fingerprints, snapshot};

#[tokio::test(flavor = "multi_thread")]
async fn init_records_public_fingerprints_in_tags_and_refuses_to_overwrite() {
    let bed = TestBed::start(BedOptions::nodes(0));
    let init = bed.init_generated(SECRET);
    let sm = aws_sdk_secretsmanager::Client::new(&bed.sdk_config(1).await);
    let described = sm.describe_secret().secret_id(SECRET).send().await.unwrap();
    let tags: Vec<(String, String)> = described
        .tags()
        .iter()
        .map(|t| (t.key().unwrap().to_owned(), t.value().unwrap().to_owned()))
        .collect();
    assert!(
        tags.contains(&("hostkeyctl:format".into(), "hostkeyctl/v1".into())),
        "{tags:?}"
    );
    assert!(tags.contains(&("hostkeyctl:version".into(), init["version_id"].as_str().unwrap().into())));
    for fp in set_fingerprints(&init).into_iter().flatten() {
        assert!(
            tags.iter().any(|(k, v)| k.starts_with("hostkeyctl:fp:") && *v == fp),
            "{fp} not in {tags:?}"
        );
    }
    let again = bed.cli("init").secret().run();
    again.code(2);
    assert!(
        again.stderr.contains("already exists") && again.stderr.contains("never overwrites"),
        "{}",
        again.stderr
    );
    let status = bed.cli("status").json().secret().run().json();
    assert_eq!(
        status["versions"].as_array().unwrap().len(),
        1,
        "the refused init added a version"
    );
}

#[test]
fn adopting_node_one_and_pushing_makes_every_node_serve_its_keys() {
    let bed = TestBed::start(BedOptions::default().no_reexec());
    let nodes = &bed.state.nodes;
    let before_node1 = served(&nodes[0]);
    let keys_node1 = snapshot(&nodes[0].ssh_dir);
    let init = bed.init_from_node(SECRET, &nodes[0]);
    assert_eq!(set_fingerprints(&init), before_node1, "adopted set is node 1's");
    assert_ne!(served(&nodes[1]), before_node1, "nodes start different");

    let push_all = || bed.cli("push --max-concurrency 100%").secret().targets().json().run();
    let push = push_all();
    push.ok();
    let report = push.json();
    assert_eq!(report["succeeded"], 3, "{report}");
    for node in nodes {
        assert_eq!(served(node), before_node1, "{} does not serve node 1's keys", node.name);
    }
    // Node 1's key files are byte for byte what they were.
    let after: Vec<_> = snapshot(&nodes[0].ssh_dir)
        .into_iter()
        .filter(|(n, _, _)| n.starts_with("ssh_host_"))
        .collect();
    let before: Vec<_> = keys_node1
        .into_iter()
        .filter(|(n, _, _)| n.starts_with("ssh_host_"))
        .collect();
    assert_eq!(after, before, "node 1's key files changed");
    let row1 = crate::common::support::row(&report["results"], "instance_id", nodes[0].instance_id.as_str());
    assert_eq!(row1["result"], "changed (sshd setting only)", "{row1}");

    // Only the three login nodes of the cluster received a command.
    let commands = bed.commands();
    let reached: BTreeSet<String> = commands
        .iter()
        .flat_map(|c| {
            c["Invocations"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect();
    let logins: BTreeSet<String> = nodes.iter().map(|n| n.instance_id.clone()).collect();
    assert_eq!(reached, logins, "noise instances were targeted");
    for noise in &bed.state.noise {
        assert!(
            !reached.contains(&noise.instance_id),
            "{} ({}) was targeted",
            noise.instance_id,
            noise.kind
        );
    }

    // No private key material in any parameter of any command sent.
    let params = serde_json::to_string(&commands.iter().map(|c| &c["Parameters"]).collect::<Vec<_>>()).unwrap();
    assert!(!params.contains("PRIVATE KEY"), "{params}");
    for line in private_lines(&nodes[0].ssh_dir) {
        assert!(
            !params.contains(&line),
            "private key material appears in the SSM parameters"
        );
    }
    assert!(
        params.contains(init["version_id"].as_str().unwrap()),
        "the version id is pinned: {params}"
    );

    // A second push changes nothing anywhere.
    let again = push_all().json();
    for row in again["results"].as_array().unwrap() {
        assert_eq!(row["result"], "unchanged", "{row}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_gets_clear_errors_and_documented_exit_codes() {
    let bed = TestBed::start(BedOptions::nodes(1));
    let sm = aws_sdk_secretsmanager::Client::new(&bed.sdk_config(1).await);
    sm.create_secret()
        .name("hostkeys/db-password")
        .secret_string("{\"password\":\"hunter2\"}")
        .send()
        .await
        .unwrap();
    bed.init_generated(SECRET);
    let push = |secret: &str, target: &str| {
        bed.cli("push")
            .json()
            .secret_id(secret)
            .args(&["--target", target])
            .run()
    };
    let cases: Vec<(crate::common::bed::Run, i32, &str)> = vec![
        (bed.cli("status").secret_id("hostkeys/nope").run(), 4, "was not found"),
        (push("hostkeys/nope", "tag:Role=login"), 4, "was not found"),
        // Outside the key sets' prefix the admin role may read nothing.
        (
            bed.cli("status").secret_id("nope").run(),
            4,
            "grant secretsmanager:DescribeSecret",
        ),
        (
            bed.cli("status").secret_id("hostkeys/db-password").run(),
            2,
            "is not a hostkeyctl key set",
        ),
        (
            push(SECRET, "tag:Role=nothing"),
            2,
            "no running instance matches tag:Role=nothing",
        ),
        (push(SECRET, "Role=login"), 2, "tag:KEY=VALUE"),
        (push(SECRET, "i-0000000000000000a"), 2, "not running or do not exist"),
        (
            bed.cli("push")
                .secret()
                .args(&["--target", "tag:Role=login", "--max-errors", "lots"])
                .run(),
            2,
            "--max-errors",
        ),
    ];
    for (run, code, expect) in cases {
        assert_eq!(run.code, code, "expected exit {code} with {expect:?}: {}", run.stderr);
        assert!(run.stderr.contains(expect), "expected {expect:?} in: {}", run.stderr);
        assert!(!run.stderr.contains("hunter2"), "a secret value leaked: {}", run.stderr);
    }
    bed.set_faults(json!({ "deny_actions": { "GetSecretValue": "" } }));
    let denied = push(SECRET, "tag:Role=login");
    denied.code(4);
    assert!(
        denied.stderr.contains("access denied") && denied.stderr.contains("grant secretsmanager:GetSecretValue"),
        "{}",
        denied.stderr
    );
    bed.set_faults(json!({ "deny_actions": {}, "throttle_fraction": 1.0, "throttle_actions": ["DescribeSecret"] }));
    bed.control("POST", "/_bed/counts/reset", &json!({}));
    let throttled = bed.cli("status").secret().args(&["--max-attempts", "2"]).run();
    throttled.code(4);
    assert!(throttled.stderr.contains("throttled"), "{}", throttled.stderr);
    assert_eq!(
        bed.counts().get("secretsmanager:DescribeSecret"),
        Some(&2),
        "the SDK retried once"
    );
}
