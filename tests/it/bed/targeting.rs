//! Safe targeting (issue 56): a tag target keeps to the secret's cluster,
//! and nothing goes out through `AWS-RunShellScript` unless it is named.
//! The bed's fleet has, beside the `hp` login nodes, a running login node
//! of cluster `other` (tags `Role=login`, `Cluster=other`): what
//! `tag:Role=login` alone reaches in an account with two fleets.

use crate::common::bed::{BedOptions, SECRET, TestBed};

#[test]
fn a_tag_target_that_reaches_another_cluster_is_refused_unless_allowed() {
    let bed = TestBed::start(BedOptions::nodes(1));
    let other = bed
        .state
        .noise
        .iter()
        .find(|n| n.kind.contains("cluster 'other'"))
        .expect("the bed's login node of another cluster")
        .instance_id
        .clone();
    let node = &bed.state.nodes[0];
    bed.cli("init")
        .secret_id(SECRET)
        .args(&["--from-dir", node.ssh_dir.to_str().unwrap(), "--tag", "Cluster=hp"])
        .run()
        .ok();
    let role = ["--target", "tag:Role=login"];
    let scoped = ["--target", "tag:Role=login", "--target", "tag:Cluster=hp"];

    let push = bed.cli("push").secret().args(&role).args(&["--dry-run"]).run();
    push.code(2);
    assert!(
        push.stderr.contains("outside the secret's cluster hp")
            && push.stderr.contains(&format!("{other} cluster other"))
            && push.stderr.contains("--target tag:Cluster=hp"),
        "{}",
        push.stderr
    );
    assert!(!push.stderr.contains(&node.instance_id), "{}", push.stderr);

    let rotate = bed
        .cli("rotate")
        .secret()
        .args(&role)
        .args(&["--min-overlap", "0", "--max-concurrency", "100%"])
        .run();
    rotate.code(2);
    assert!(
        rotate.stderr.contains("outside the secret's cluster hp"),
        "{}",
        rotate.stderr
    );

    let association = bed.cli("association deploy").secret().args(&role).run();
    association.code(2);
    assert!(
        association
            .stderr
            .contains("State Manager resolves the tags on every run"),
        "{}",
        association.stderr
    );
    assert!(bed.commands().is_empty(), "a refused run sent a command");

    let allowed = bed
        .cli("push")
        .json()
        .secret()
        .args(&role)
        .args(&["--dry-run", "--allow-other-clusters"])
        .run();
    allowed.ok();
    let listed = allowed.stdout.clone();
    assert!(
        listed.contains(&other) && listed.contains(&node.instance_id),
        "{listed}"
    );

    bed.cli("push")
        .secret()
        .args(&scoped)
        .args(&["--max-concurrency", "100%"])
        .run()
        .ok();
    assert_eq!(bed.commands().len(), 1, "the scoped push went out once");

    // A secret that names no cluster: targets spanning two are refused.
    bed.init_generated("hostkeys/untagged");
    let untagged = bed
        .cli("push")
        .secret_id("hostkeys/untagged")
        .args(&role)
        .args(&["--dry-run"])
        .run();
    untagged.code(2);
    assert!(
        untagged
            .stderr
            .contains("instances of 2 clusters (hp: 1 instance(s); other: 1 instance(s))")
            && untagged.stderr.contains("it has no Cluster tag"),
        "{}",
        untagged.stderr
    );
}

#[test]
fn hostkeyctls_document_not_deployed_is_refused_and_the_shell_goes_out_only_when_named() {
    let bed = TestBed::start(BedOptions::nodes(1).without_documents());
    bed.init_from_node(SECRET, &bed.state.nodes[0]);
    let scoped = ["--target", "tag:Role=login", "--target", "tag:Cluster=hp"];
    let push = bed.cli("push").secret().args(&scoped).run();
    push.code(2);
    assert!(
        push.stderr.contains("hostkeyctl-Install is not deployed")
            && push.stderr.contains("hostkeyctl ssm-document deploy")
            && push.stderr.contains("--document AWS-RunShellScript"),
        "{}",
        push.stderr
    );
    let audit = bed.cli("audit").secret().args(&scoped).args(&["--via-ssm"]).run();
    audit.code(2);
    assert!(
        audit.stderr.contains("hostkeyctl-Check is not deployed") && audit.stderr.contains("--check-document"),
        "{}",
        audit.stderr
    );
    assert!(bed.commands().is_empty(), "nothing was sent");
}
