//! `schedule enable|rotate|disable` in memory: the function pinned to its
//! one secret (and refused when it rotates another), the first set
//! announced, the schedule set or kept, a CA under the key sets' prefix
//! refused before any call.

use hostkeyctl::document::KeySetPrefix;
use hostkeyctl::ids::SecretId;
use hostkeyctl::rotation::scheduled::admin::{self as schedule, EnableRequest, ScheduleError};
use hostkeyctl::rotation::scheduled::function::{ARGS_VAR, SECRET_VAR};
use hostkeyctl::store::{STAGE_NEXT, SecretStore};
use hostkeyctl::testing::{Hooked, MemFunctions};

use super::{current, secret, world};

const FUNCTION: &str = "arn:aws:lambda:us-east-1:123456789012:function:hostkeyctl-rotation";

fn request<'a>(secret: &'a SecretId, prefix: &'a KeySetPrefix, now: i64) -> EnableRequest<'a> {
    EnableRequest {
        secret,
        function: Some(FUNCTION),
        schedule: Some("rate(30 days)"),
        window: None,
        ca_secret_id: None,
        key_set_prefix: prefix,
        trust_timers: false,
        now,
    }
}

/// A function with no secret is pinned to this one, a set is announced,
/// and the schedule is set without rotating now.
#[tokio::test]
async fn enable_pins_the_function_announces_and_sets_the_schedule() {
    let (store, _, _) = world(1).await;
    let functions = MemFunctions::default();
    functions.add(FUNCTION, &[(ARGS_VAR, r#"["--pull","--target","tag:Role=login"]"#)]);
    let (s, prefix) = (secret(), KeySetPrefix::parse("hostkeys/").unwrap());
    let mut req = request(&s, &prefix, store.now());
    req.trust_timers = true;
    let done = schedule::enable(&store, &functions, &req).await.unwrap();
    let arn = current(&store).await.arn;
    let variables = functions.variables(FUNCTION);
    assert_eq!(variables.get(SECRET_VAR), Some(&arn.to_string()), "{done}");
    assert!(variables[ARGS_VAR].contains("--trust-timers"), "{variables:?}");
    assert!(done.contains("announced") && done.contains("schedule set"), "{done}");
    assert!(store.holder(&s, STAGE_NEXT).is_some());
    let info = store.describe(&s).await.unwrap();
    assert!(info.rotation.enabled && info.rotation.schedule.as_deref() == Some("rate(30 days)"));
    assert_eq!(store.rotations_started(), 0, "enable rotated at once");
    // Again: nothing new to pin, the announcement kept.
    let announced = store.holder(&s, STAGE_NEXT);
    let updates = functions.updates();
    schedule::enable(&store, &functions, &req).await.unwrap();
    assert_eq!(functions.updates(), updates);
    assert_eq!(store.holder(&s, STAGE_NEXT), announced);
}

/// A function that rotates another secret is refused, naming both, and
/// nothing changes: no announcement, no schedule, no update.
#[tokio::test]
async fn enable_refuses_a_function_of_another_secret() {
    let (store, _, _) = world(1).await;
    let functions = MemFunctions::default();
    let theirs = "arn:aws:secretsmanager:us-east-1:123456789012:secret:hostkeys/other-AbCdEf";
    functions.add(FUNCTION, &[(SECRET_VAR, theirs)]);
    let (s, prefix) = (secret(), KeySetPrefix::parse("hostkeys/").unwrap());
    let versions = store.version_count(&s);
    let e = schedule::enable(&store, &functions, &request(&s, &prefix, store.now()))
        .await
        .unwrap_err();
    assert!(matches!(e, ScheduleError::Pin(_)), "{e}");
    assert!(
        e.to_string().contains(theirs) && e.to_string().contains("one function per fleet"),
        "{e}"
    );
    assert_eq!(store.version_count(&s), versions, "something was stored");
    assert!(!store.describe(&s).await.unwrap().rotation.enabled);
    assert_eq!(functions.updates(), 0);
}

/// A CA under the key sets' prefix is refused before any call.
#[tokio::test]
async fn enable_refuses_a_ca_the_nodes_could_read_before_any_call() {
    let (store, _, _) = world(1).await;
    let functions = MemFunctions::default();
    let counting = Hooked::counting(&store);
    let (s, prefix) = (secret(), KeySetPrefix::parse("hostkeys/").unwrap());
    let ca = SecretId::parse("hostkeys/ca").unwrap();
    let mut req = request(&s, &prefix, store.now());
    req.ca_secret_id = Some(&ca);
    let e = schedule::enable(&counting, &functions, &req).await.unwrap_err();
    assert!(matches!(e, ScheduleError::CaPlacement(_)), "{e}");
    assert!(counting.log().is_empty(), "{:?}", counting.log());
}

/// `schedule rotate` needs a function; `disable` turns the schedule off
/// and the announcement stays.
#[tokio::test]
async fn rotate_needs_a_function_and_disable_keeps_the_announcement() {
    let (store, _, _) = world(1).await;
    let s = secret();
    let e = schedule::rotate_now(&store, &s).await.unwrap_err();
    assert!(matches!(e, ScheduleError::NotScheduled(_)), "{e}");
    let functions = MemFunctions::default();
    functions.add(FUNCTION, &[]);
    let prefix = KeySetPrefix::parse("hostkeys/").unwrap();
    schedule::enable(&store, &functions, &request(&s, &prefix, store.now()))
        .await
        .unwrap();
    schedule::rotate_now(&store, &s).await.unwrap();
    assert_eq!(store.rotations_started(), 1);
    schedule::disable(&store, &s).await.unwrap();
    let shown = schedule::report(&store, &s, None).await.unwrap();
    assert!(!shown.rotation.enabled);
    assert!(shown.announced_version.is_some());
    assert!(shown.text().contains("HOSTKEYCTL_NEXT"));
}

/// Lambda refusing the function's update (UpdateFunctionConfiguration,
/// "fail the Nth call"): the error names the call, no schedule is set,
/// and the same command run again pins the function and sets it.
#[tokio::test]
async fn a_refused_function_update_sets_no_schedule_and_a_rerun_finishes() {
    let (store, _, _) = world(1).await;
    let functions = MemFunctions::default();
    functions.add(FUNCTION, &[(ARGS_VAR, r#"["--pull","--target","tag:Role=login"]"#)]);
    functions.faults.fail_nth("lambda:UpdateFunctionConfiguration", 1);
    let (s, prefix) = (secret(), KeySetPrefix::parse("hostkeys/").unwrap());
    let req = request(&s, &prefix, store.now());
    let e = schedule::enable(&store, &functions, &req)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("lambda:UpdateFunctionConfiguration"), "{e}");
    assert!(
        !store.describe(&s).await.unwrap().rotation.enabled,
        "a schedule was set"
    );
    assert_eq!(functions.updates(), 0);
    let done = schedule::enable(&store, &functions, &req).await.unwrap();
    assert!(done.contains("schedule set"), "{done}");
    assert_eq!(functions.updates(), 1);
    assert!(store.describe(&s).await.unwrap().rotation.enabled);
}
