//! The doubles keep AWS's rules: Secrets Manager's tokens and stage moves, SSM's visibility grace, discovery by tag and instance id.

use super::ALGS;
use super::secret;
use super::world;
use hostkeyctl::aws::AwsError;
use hostkeyctl::dispatch::Pacing;
use hostkeyctl::dispatch::poll;
use hostkeyctl::document::SecretDocument;
use hostkeyctl::ids::StageLabel;
use hostkeyctl::ids::VersionId;
use hostkeyctl::keyset::KeyAlgorithm;
use hostkeyctl::keyset::KeySet;
use hostkeyctl::store::STAGE_CURRENT;
use hostkeyctl::store::STAGE_PENDING;
use hostkeyctl::store::STAGE_PREVIOUS;
use hostkeyctl::store::SecretStore;
use hostkeyctl::store::StoreError;
use hostkeyctl::store::stage;
use hostkeyctl::testing::MemCommand;
use hostkeyctl::testing::MemFleet;
use hostkeyctl::testing::MemInvocations;
use std::time::Duration;
use std::time::Instant;

#[tokio::test]
async fn a_reused_client_token_is_idempotent_for_the_same_set_and_refused_for_another() {
    let (store, _, _) = world(0).await;
    let token = VersionId::random();
    let doc = SecretDocument::new(KeySet::generate(&ALGS, 2048).unwrap());
    let pending = [stage(STAGE_PENDING)];
    let first = store.put_version(&secret(), &doc, &token, &pending).await.unwrap();
    assert_eq!(
        store.put_version(&secret(), &doc, &token, &pending).await.unwrap(),
        first
    );
    let other = SecretDocument::new(KeySet::generate(&ALGS, 2048).unwrap());
    assert!(matches!(
        store.put_version(&secret(), &other, &token, &pending).await,
        Err(StoreError::TokenConflict { .. })
    ));
}

#[tokio::test]
async fn stage_moves_follow_secrets_managers_rules() {
    let (store, _, original) = world(0).await;
    let doc = SecretDocument::new(KeySet::generate(&ALGS, 2048).unwrap());
    let a = store
        .put_version(&secret(), &doc, &VersionId::random(), &[stage(STAGE_PENDING)])
        .await
        .unwrap();
    let doc2 = SecretDocument::new(KeySet::generate(&ALGS, 2048).unwrap());
    let b = store
        .put_version(
            &secret(),
            &doc2,
            &VersionId::random(),
            &[StageLabel::parse("mine").unwrap()],
        )
        .await
        .unwrap();
    // Claiming a label another version holds, without RemoveFromVersionId,
    // is refused (the basis for an atomic claim of AWSPENDING).
    let refused = store.move_stage(&secret(), &stage(STAGE_PENDING), Some(&b), None).await;
    match refused {
        Err(StoreError::LabelHeld { holder, .. }) => assert_eq!(holder, Some(a.clone())),
        other => panic!("{other:?}"),
    }
    // RemoveFromVersionId must hold the label.
    assert!(
        store
            .move_stage(&secret(), &stage(STAGE_PENDING), Some(&b), Some(&original))
            .await
            .is_err()
    );
    store
        .move_stage(&secret(), &stage(STAGE_PENDING), Some(&b), Some(&a))
        .await
        .unwrap();
    assert_eq!(store.holder(&secret(), STAGE_PENDING), Some(b.clone()));
    // Moving AWSCURRENT puts AWSPREVIOUS on the version that held it.
    store
        .move_stage(&secret(), &stage(STAGE_CURRENT), Some(&b), Some(&original))
        .await
        .unwrap();
    assert_eq!(store.holder(&secret(), STAGE_CURRENT), Some(b));
    assert_eq!(store.holder(&secret(), STAGE_PREVIOUS), Some(original));
}

/// An SSM that does not show command `c1` for its first `hidden` reads.
fn late_ssm(hidden: usize) -> MemInvocations {
    let ssm = MemInvocations::default();
    ssm.add(
        "c1",
        MemCommand {
            instances: vec!["i-00000000000000001".to_owned()],
            hidden_reads: hidden,
            running_reads: 0,
            ends: ("Success".to_owned(), Some(0)),
        },
    );
    ssm
}

#[tokio::test]
async fn a_command_ssm_does_not_show_yet_is_waited_for_within_the_grace_only() {
    let commands = vec![("c1".to_owned(), vec!["i-00000000000000001".to_owned()])];
    let pacing = Pacing {
        first_poll: Duration::from_millis(1),
        visibility_grace: Duration::from_secs(30),
    };
    let late = late_ssm(2);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (states, stats) = poll(&late, &commands, deadline, &|_, _| {}, pacing).await.unwrap();
    assert_eq!(states["i-00000000000000001"].status, "Success");
    assert_eq!(stats.rounds, 3, "two unseen reads, then the answer");
    let no_grace = Pacing {
        visibility_grace: Duration::ZERO,
        ..pacing
    };
    let late = late_ssm(1);
    assert!(matches!(
        poll(&late, &commands, deadline, &|_, _| {}, no_grace).await,
        Err(AwsError::NotFound { .. })
    ));
}

#[tokio::test]
async fn the_fleet_double_discovers_by_tag_and_instance_id() {
    use hostkeyctl::discovery::{Fleet, TargetSpec};
    let fleet = MemFleet::new(3, &[KeyAlgorithm::Ed25519]).unwrap();
    let login: TargetSpec = "tag:Role=login".parse().unwrap();
    assert_eq!(fleet.discover(std::slice::from_ref(&login)).await.unwrap().len(), 3);
    let one: TargetSpec = fleet.nodes[1].instance.instance_id.parse().unwrap();
    let found = fleet.discover(&[login, one]).await.unwrap();
    assert_eq!(found, vec![fleet.nodes[1].instance.clone()]);
    let compute: TargetSpec = "tag:Role=compute".parse().unwrap();
    assert!(fleet.discover(&[compute]).await.is_err());
}

/// ListCommandInvocations failing mid-poll (after the SDK's retries): the
/// poll ends with that error, naming the call, and reads nothing more.
#[tokio::test]
async fn a_failing_read_ends_the_poll_with_its_error() {
    let commands = vec![("c1".to_owned(), vec!["i-00000000000000001".to_owned()])];
    let pacing = Pacing {
        first_poll: Duration::from_millis(1),
        visibility_grace: Duration::from_secs(30),
    };
    let ssm = MemInvocations::default();
    ssm.succeeding("c1", vec!["i-00000000000000001".to_owned()], 3);
    ssm.faults.fail_nth("ssm:ListCommandInvocations", 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    let err = poll(&ssm, &commands, deadline, &|_, _| {}, pacing).await.unwrap_err();
    assert!(err.to_string().contains("ssm:ListCommandInvocations"), "{err}");
    assert_eq!(ssm.faults.count("ssm:ListCommandInvocations"), 2);
}

/// The target group double keeps ELB's states: a deregistered target
/// drains (still listed), one registered again while draining starts over
/// `initial`, and the drain's end removes what is still draining.
#[tokio::test]
async fn the_target_group_double_drains_and_registers_again_as_elb_does() {
    use hostkeyctl::admission::{GroupSpec, TargetGroups};
    let groups = hostkeyctl::testing::MemTargetGroups::ip(
        "login",
        22,
        &[("10.0.0.1", 22, "healthy"), ("10.0.0.2", 22, "healthy")],
    );
    let spec = GroupSpec::TargetGroup("login".into());
    let group = groups.group(&spec, 22).await.unwrap();
    let both = [("10.0.0.1".to_owned(), Some(22)), ("10.0.0.2".to_owned(), Some(22))];
    groups.deregister(&group, &both).await.unwrap();
    let state = |id: &str| groups.states().into_iter().find(|(i, _, _)| i == id).map(|(_, _, s)| s);
    assert_eq!(state("10.0.0.1").as_deref(), Some("draining"));
    groups.register(&group, &["10.0.0.1".to_owned()]).await.unwrap();
    assert_eq!(state("10.0.0.1").as_deref(), Some("initial"));
    groups.end_drains();
    assert_eq!(state("10.0.0.1").as_deref(), Some("initial"));
    assert_eq!(state("10.0.0.2"), None);
}
