//! Issue 29: a State Manager association of the converge document, on the
//! bed with the admin's policy enforced. A new instance converges when it
//! comes online, with no push; and the association, run between every
//! pair of a rotation's steps, never moves a node off the stages.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::bed::rotate::{next_keys, rotate, set_of, stages};
use crate::common::bed::{BedOptions, Node, SECRET, TARGETS, TestBed, served};

/// `association ARGS --secret-id hostkeys/hk --output json`.
fn association(bed: &TestBed, args: &[&str]) -> crate::common::bed::Run {
    let mut all = vec!["association"];
    all.extend_from_slice(args);
    all.extend(["--secret-id", SECRET, "--output", "json"]);
    bed.run(&all)
}

/// Each node serves what the stages say: AWSCURRENT, and AWSPENDING's
/// keys (when announced) as the extra keys, loaded; nothing else.
fn assert_on_the_stages(bed: &TestBed, nodes: &[&Node], when: &str) {
    let stages = stages(bed);
    let current = set_of(bed, stages["AWSCURRENT"].as_str().unwrap());
    let pending = match stages.get("AWSPENDING").and_then(Value::as_str) {
        Some(p) if Some(p) != stages["AWSCURRENT"].as_str() => set_of(bed, p),
        _ => vec![None, None, None],
    };
    for node in nodes {
        assert_eq!(served(node), current, "{when}: {} does not serve AWSCURRENT", node.name);
        assert_eq!(
            next_keys(node),
            pending,
            "{when}: {} does not offer AWSPENDING alone",
            node.name
        );
    }
}

/// The last run of the (one) association on each instance, after every
/// run so far has finished.
fn last_runs(bed: &TestBed) -> Value {
    let all = bed.settle_associations();
    assert_eq!(all.len(), 1, "{all:?}");
    all[0]["Instances"].clone()
}

#[test]
fn an_association_converges_a_new_instance_and_never_moves_a_node_off_the_stages() {
    let bed = TestBed::start(BedOptions::default().held(1));
    let init = bed.init_from_node(SECRET, &bed.state.nodes[0]);
    let set = crate::common::bed::set_fingerprints(&init);
    let mut push = vec!["push", "--secret-id", SECRET, "--max-concurrency", "100%"];
    push.extend(TARGETS);
    bed.run(&push).ok();
    let (first, second, new) = (&bed.state.nodes[0], &bed.state.nodes[1], &bed.state.nodes[2]);
    assert!(new.instance_id.is_empty(), "the third node is held");
    assert_ne!(served(new), set, "the held node serves keys of its own");

    assert_refused_before_anything(&bed, first);

    // Created, it runs at once on the two running login nodes.
    let mut deploy = vec!["deploy"];
    deploy.extend(TARGETS);
    let created = association(&bed, &deploy);
    created.ok();
    let created = created.json();
    assert_eq!(created["result"], "created", "{created}");
    assert_eq!(created["document"]["trust"], "pinned");
    let arn = created["association"]["spec"]["parameters"]["SecretId"][0]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        arn.starts_with("arn:aws:secretsmanager:"),
        "the secret goes in by ARN: {arn}"
    );
    let runs = last_runs(&bed);
    assert_eq!(
        runs,
        serde_json::json!({ first.instance_id.as_str(): "Success", second.instance_id.as_str(): "Success" })
    );
    let again = association(&bed, &deploy);
    again.ok();
    assert_eq!(again.json()["result"], "unchanged");
    let mut hourly = deploy.clone();
    hourly.extend(["--schedule", "rate(1 hour)"]);
    let updated = association(&bed, &hourly);
    updated.ok();
    let updated = updated.json();
    assert_eq!(updated["result"], "updated");
    assert_eq!(updated["changed"], serde_json::json!(["schedule"]));

    // A new instance comes online with the tags: it converges, no push.
    let sent = bed.commands().len();
    let instance = bed.launch_node(&new.name);
    let runs = last_runs(&bed);
    assert_eq!(runs[&instance], "Success", "{runs}");
    assert_eq!(bed.commands().len(), sent, "nothing was pushed");
    let mut new = new.clone();
    new.instance_id = instance;
    assert_eq!(served(&new), set, "the new instance serves the set");
    let nodes = [first, second, &new];
    assert_on_the_stages(&bed, &nodes, "after the launch");
    assert_compliance_follows_the_nodes(&bed, &nodes);

    rotate_with_the_association_between_every_step(&bed, &nodes);
    let stages = stages(&bed);
    assert_ne!(
        set_of(&bed, stages["AWSCURRENT"].as_str().unwrap()),
        set,
        "the rotation promoted a new set"
    );

    assert_shown_and_in_status(&bed);
    // By ARN: the same association (regression: its name came from the id
    // as given, so status by ARN listed none).
    let by_arn = bed.cli("association show").secret_id(&arn).json().run();
    by_arn.ok();
    let name = by_arn.json()["association"]["spec"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(name.starts_with("hostkeyctl-hostkeys-hk-"), "{name}");
    let status = bed.cli("status").json().secret_id(&arn).run();
    status.ok();
    assert_eq!(status.json()["association"]["spec"]["schedule"], "rate(1 hour)");

    let deleted = association(&bed, &["delete"]);
    deleted.ok();
    assert_eq!(deleted.json()["result"], "deleted");
    let absent = association(&bed, &["delete"]);
    absent.ok();
    assert_eq!(absent.json()["result"], "absent");
    assert!(bed.settle_associations().is_empty());
    let status = bed.cli("status").json().secret_id(SECRET).run();
    assert!(status.json().get("association").is_none(), "{}", status.stdout);
    // What it installed stays.
    assert_on_the_stages(&bed, &nodes, "after the delete");
}

/// What an association cannot be, refused before anything is made.
fn assert_refused_before_anything(bed: &TestBed, first: &Node) {
    let show = association(bed, &["show"]);
    assert_eq!(show.code, 2, "{}", show.stderr);
    assert!(
        show.stderr.contains("no association is named hostkeyctl-hostkeys-hk"),
        "{}",
        show.stderr
    );
    for (args, says) in [
        (vec!["--target", "lb:hp-login"], "cannot be an association's target"),
        (
            vec!["--target", "tag:Role=login", "--target", first.instance_id.as_str()],
            "not both",
        ),
        (
            vec!["--target", "tag:Role=login", "--schedule", "rate(5 minutes)"],
            "at least rate(30 minutes)",
        ),
    ] {
        let mut all = vec!["deploy"];
        all.extend(args);
        let run = association(bed, &all);
        assert_eq!(run.code, 2, "{}", run.stderr);
        assert!(run.stderr.contains(says), "{}", run.stderr);
    }
    assert!(bed.settle_associations().is_empty());
}

/// A rotation, with the association run between every pair of its steps.
fn rotate_with_the_association_between_every_step(bed: &TestBed, nodes: &[&Node]) {
    for (step, expected) in [
        (vec!["--stop-after", "create"], "stopped_after_create"),
        (vec!["--resume", "--stop-after", "set"], "stopped_after_set"),
        (vec!["--resume", "--stop-after", "test"], "stopped_after_test"),
        (vec!["--resume"], "rotated"),
    ] {
        let (code, report, stderr) = rotate(bed, &step);
        assert_eq!(
            (code, report["result"].as_str()),
            (0, Some(expected)),
            "{stderr}\n{report}"
        );
        let runs = bed.run_associations();
        let instances = runs[0]["Instances"].as_object().unwrap();
        assert_eq!(instances.len(), 3, "{runs:?}");
        assert!(instances.values().all(|s| s == "Success"), "after {expected}: {runs:?}");
        assert_on_the_stages(bed, nodes, &format!("after {expected} and the association"));
    }
}

/// show: the schedule, the last run, and hostkeyctl's document by hash;
/// status lists it.
fn assert_shown_and_in_status(bed: &TestBed) {
    let shown = association(bed, &["show"]);
    shown.ok();
    let shown = shown.json();
    assert_eq!(shown["document"]["document_check"], "ours", "{shown}");
    assert_eq!(shown["association"]["spec"]["schedule"], "rate(1 hour)");
    assert_eq!(shown["association"]["status"], "Success");
    assert_eq!(shown["association"]["instances_by_status"]["Success"], 3);
    assert!(shown["association"]["last_execution"].is_string(), "{shown}");
    let text = bed
        .cli("association show")
        .secret_id(SECRET)
        .args(&["--output", "table"])
        .run();
    text.ok();
    assert!(text.stdout.contains("hostkeyctl's own (by SHA-256)"), "{}", text.stdout);

    // status lists it, with its schedule and last run.
    let status = |format: &str| {
        let run = bed.cli("status").secret_id(SECRET).args(&["--output", format]).run();
        run.ok();
        run
    };
    assert_eq!(status("json").json()["association"]["spec"]["schedule"], "rate(1 hour)");
    assert!(
        status("table").stdout.contains("assoc    hostkeyctl-hostkeys-hk-"),
        "{}",
        status("table").stdout
    );
}

/// `ListComplianceItems` of `instance` (as the bed): `Custom:HostKeys`
/// status by item id, and the items' details.
fn compliance(bed: &TestBed, instance: &str) -> (BTreeMap<String, String>, Vec<BTreeMap<String, String>>) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let ssm = aws_sdk_ssm::Client::new(&bed.sdk_config(1).await);
        let filter = aws_sdk_ssm::types::ComplianceStringFilter::builder()
            .key("ComplianceType")
            .values("Custom:HostKeys")
            .r#type(aws_sdk_ssm::types::ComplianceQueryOperatorType::Equal)
            .build();
        let items: Vec<_> = ssm
            .list_compliance_items()
            .resource_ids(instance)
            .resource_types("ManagedInstance")
            .filters(filter)
            .into_paginator()
            .items()
            .send()
            .collect::<Result<Vec<_>, _>>()
            .await
            .unwrap();
        let statuses = items
            .iter()
            .map(|i| (i.id().unwrap().to_owned(), i.status().unwrap().as_str().to_owned()))
            .collect();
        let details = items
            .iter()
            .map(|i| {
                i.details()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .collect();
        (statuses, details)
    })
}

/// Each node's SSM Compliance (`Custom:HostKeys`), reported by install
/// under SSM: COMPLIANT for every key type once converged; NON_COMPLIANT
/// for exactly the key type changed by hand on one node, as the check
/// document (`audit --via-ssm`) finds it; COMPLIANT again once the
/// association's next run put it right. Fingerprints only in the details.
fn assert_compliance_follows_the_nodes(bed: &TestBed, nodes: &[&Node]) {
    let all_compliant: BTreeMap<String, String> = ["ecdsa-sha2-nistp256", "ssh-ed25519", "ssh-rsa"]
        .iter()
        .map(|t| ((*t).to_owned(), "COMPLIANT".to_owned()))
        .collect();
    for node in nodes {
        let (statuses, details) = compliance(bed, &node.instance_id);
        assert_eq!(statuses, all_compliant, "{}", node.name);
        for d in &details {
            assert_eq!(d["ExpectedFingerprint"], d["Served"], "{d:?}");
            assert!(d.values().all(|v| !v.contains("PRIVATE KEY")), "{d:?}");
        }
    }
    // Someone regenerates the second node's ed25519 key by hand.
    let changed = nodes[1];
    crate::common::bed::change_ed25519_key_by_hand(changed);
    let mut audit = vec!["audit", "--output", "json", "--secret-id", SECRET, "--via-ssm"];
    audit.extend(TARGETS);
    assert_eq!(bed.run(&audit).code, 1, "the audit finds the drift");
    let (statuses, details) = compliance(bed, &changed.instance_id);
    // The check reports every type it checks, the ones that must not be
    // served included: only the changed one is NON_COMPLIANT.
    let compliant_but = |statuses: &BTreeMap<String, String>, but: Option<&str>| {
        assert!(all_compliant.keys().all(|t| statuses.contains_key(t)), "{statuses:?}");
        for (key_type, status) in statuses {
            let expected = if Some(key_type.as_str()) == but {
                "NON_COMPLIANT"
            } else {
                "COMPLIANT"
            };
            assert_eq!(status, expected, "{key_type}: {statuses:?}");
        }
    };
    compliant_but(&statuses, Some("ssh-ed25519"));
    let ed25519 = details
        .iter()
        .find(|d| d.get("OnDiskFingerprint") != d.get("ExpectedFingerprint"));
    assert!(ed25519.is_some(), "the details show the key on disk: {details:?}");
    for other in [nodes[0], nodes[2]] {
        compliant_but(&compliance(bed, &other.instance_id).0, None);
    }
    // The association's next run puts the key back, and says so.
    let runs = bed.run_associations();
    assert_eq!(runs[0]["Instances"][&changed.instance_id], "Success", "{runs:?}");
    assert_eq!(compliance(bed, &changed.instance_id).0, all_compliant);
}
