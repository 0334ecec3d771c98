//! Enrolment's outside calls failing in turn ("fail the Nth call", over
//! src/testing's doubles): the cluster's record, the bindings table's
//! read and conditional write, the set's tags, a node's IMDS and its call
//! to the signer, and an admin's revocations. Each failure is refused
//! with the call named, leaves no binding or file half made, and the
//! same request afterwards succeeds.

use hostkeyctl::enrolment::admin::revoke;
use hostkeyctl::enrolment::node::enrol_node;
use hostkeyctl::testing::{MemBindings, MemSetKeys};

use super::enrolment::{Desk, NOW, compute_1, key_dir, node_keys};

#[tokio::test]
async fn the_signer_refuses_when_a_read_or_its_write_fails_and_binds_nothing_half() {
    let desk = Desk::new();
    let (bound, set) = (&desk.bound, MemSetKeys::default());
    let keys = node_keys();
    let cases: [(&str, &hostkeyctl::testing::Faults); 4] = [
        ("dynamodb:GetItem", &bound.faults),
        ("sagemaker:DescribeClusterNode", &desk.cluster.faults),
        ("secretsmanager:DescribeSecret", &set.faults),
        ("dynamodb:PutItem", &bound.faults),
    ];
    for (at, (op, faults)) in (0_i64..).zip(cases) {
        faults.fail_nth(op, faults.count(op) + 1);
        let now = NOW + 2 * at;
        let request = desk.ask(&compute_1(), &keys, now);
        let err = desk
            .enrol_with(&request, &[], &set, now)
            .await
            .err()
            .unwrap_or_else(|| panic!("{op}: enrolled"))
            .to_string();
        assert!(err.contains(op), "{op}: {err}");
        assert_eq!(bound.of(&compute_1().instance_id), None, "{op}: a binding was stored");
        // The next request (a node retries with a fresh one) enrols.
        let retry = desk.ask(&compute_1(), &keys, now + 1);
        let enrolled = desk.enrol_with(&retry, &[], &set, now + 1).await;
        assert!(enrolled.is_ok(), "{op}: {:?}", enrolled.err().map(|e| e.to_string()));
        bound.all.lock().unwrap().clear();
    }
}

#[tokio::test]
async fn a_node_whose_imds_or_signer_call_fails_writes_nothing() {
    let desk = Desk::new();
    let imds = desk.imds();
    let dir = key_dir(&node_keys());
    let signer = desk.signer();
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    imds.faults.fail_nth("imds:GetInstanceIdentityDocument", 1);
    signer.faults.fail_nth("lambda:InvokeFunction", 1);
    for (at, op) in [(0, "imds:GetInstanceIdentityDocument"), (1, "lambda:InvokeFunction")] {
        let err = enrol_node(dir.path(), &[], &imds, &signer, (NOW + at) * 1000)
            .await
            .err()
            .unwrap_or_else(|| panic!("{op}: enrolled"))
            .to_string();
        assert!(err.contains(op), "{op}: {err}");
        assert_eq!(listing(), before, "{op}: a file was written");
    }
    let written = enrol_node(dir.path(), &[], &imds, &signer, (NOW + 2) * 1000)
        .await
        .unwrap();
    assert_eq!(written.files.len(), 2);
}

#[tokio::test]
async fn a_revocation_cut_short_keeps_what_it_did_and_a_rerun_finishes() {
    let table = MemBindings::default();
    for id in ["i-1", "i-2", "i-3"] {
        table
            .all
            .lock()
            .unwrap()
            .insert(id.to_owned(), hostkeyctl::enrolment::Binding::default());
    }
    let ids: Vec<String> = ["i-1", "i-2", "i-3", "i-4"].map(str::to_owned).to_vec();
    table.faults.fail_nth("dynamodb:UpdateItem", 2);
    let err = revoke(&table, &ids).await.unwrap_err().to_string();
    assert!(err.contains("dynamodb:UpdateItem"), "{err}");
    let revoked = |id: &str| table.of(id).is_some_and(|b| b.revoked);
    assert!(revoked("i-1") && !revoked("i-2") && !revoked("i-3"));
    let done = revoke(&table, &ids).await.unwrap();
    assert_eq!(done.revoked, ["i-1", "i-2", "i-3"]);
    assert_eq!(done.unknown, ["i-4"]);
}
