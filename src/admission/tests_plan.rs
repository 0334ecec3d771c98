//! The admission decision ([`super::plan::decide`]), case by case.

use super::plan::{Decision, Limits, Observed, Serving, decide, deregistrations};

fn node(name: &str, member: bool, target: Option<&str>, serving: Serving) -> Observed {
    Observed {
        name: name.to_owned(),
        target_id: format!("10.0.0.{}", name.len()),
        address: None,
        instance_id: None,
        member,
        cluster_state: None,
        target_state: target.map(str::to_owned),
        target_reason: None,
        port: target.map(|_| 22),
        serving,
    }
}

fn other() -> Serving {
    Serving::Other("its own keys".to_owned())
}

fn decisions(observed: Vec<Observed>, max_drain: usize) -> Vec<(String, Decision)> {
    decide(
        observed,
        Limits {
            max_drain,
            keep_strangers_serving: true,
        },
    )
    .into_iter()
    .map(|p| (p.observed.name, p.decision))
    .collect()
}

#[test]
fn a_new_node_is_admitted_only_once_it_serves_the_set() {
    let base = || {
        vec![
            node("a", true, Some("healthy"), Serving::Set),
            node("b", true, Some("healthy"), Serving::Set),
        ]
    };
    let mut held = base();
    held.push(node("new", true, None, other()));
    assert_eq!(decisions(held, 1)[2], ("new".into(), Decision::Hold));
    let mut booting = base();
    booting.push(node("new", true, None, Serving::Unknown("refused".into())));
    assert_eq!(decisions(booting, 1)[2], ("new".into(), Decision::Hold));
    let mut ready = base();
    ready.push(node("new", true, None, Serving::Set));
    assert_eq!(decisions(ready, 1)[2], ("new".into(), Decision::Admit));
    let mut pending = base();
    let mut n = node("new", true, None, Serving::Set);
    n.cluster_state = Some("ShuttingDown".into());
    pending.push(n);
    assert_eq!(decisions(pending, 1)[2], ("new".into(), Decision::Hold));
}

#[test]
fn a_target_the_cluster_reports_leaving_is_drained_within_the_limits() {
    let leaving = |name: &str, state: &str| {
        let mut n = node(name, true, Some("healthy"), Serving::Set);
        n.cluster_state = Some(state.into());
        n
    };
    let got = decisions(
        vec![
            node("a", true, Some("healthy"), Serving::Set),
            leaving("b", "ShuttingDown"),
            leaving("c", "SystemUpdating"),
        ],
        1,
    );
    assert_eq!(
        got,
        vec![
            ("a".into(), Decision::Keep),
            ("b".into(), Decision::Drain),
            ("c".into(), Decision::HeldBack)
        ]
    );
    // None when every target serving the set is leaving (a patch of
    // the whole group): they are no capacity to fall back on.
    let got = decisions(vec![leaving("a", "SystemUpdating"), leaving("b", "SystemUpdating")], 2);
    assert_eq!(
        got,
        vec![("a".into(), Decision::HeldBack), ("b".into(), Decision::HeldBack)]
    );
    // A status that is no departure (Pending, or none given) keeps it.
    let got = decisions(
        vec![node("a", true, Some("healthy"), Serving::Set), leaving("b", "unknown")],
        1,
    );
    assert_eq!(got[1], ("b".into(), Decision::Keep));
    // A drifted target goes before a leaving one.
    let got = decisions(
        vec![
            node("a", true, Some("healthy"), Serving::Set),
            node("b", true, Some("healthy"), Serving::Set),
            leaving("c", "ShuttingDown"),
            node("d", true, Some("healthy"), other()),
        ],
        1,
    );
    assert_eq!(
        got[2..],
        [("c".into(), Decision::HeldBack), ("d".into(), Decision::Drain)]
    );
}

#[test]
fn a_replaced_nodes_old_address_is_removed_without_counting_against_the_limit() {
    let got = decisions(
        vec![
            node("a", true, Some("healthy"), Serving::Set),
            node("b", true, Some("healthy"), other()),
            node("old", false, Some("unhealthy"), Serving::Unknown("refused".into())),
        ],
        1,
    );
    assert_eq!(
        got,
        vec![
            ("a".into(), Decision::Keep),
            ("b".into(), Decision::Drain),
            ("old".into(), Decision::Remove)
        ]
    );
}

#[test]
fn drains_stop_at_the_limit_and_never_at_zero_serving() {
    let two_of_three = decisions(
        vec![
            node("a", true, Some("healthy"), Serving::Set),
            node("b", true, Some("healthy"), other()),
            node("c", true, Some("healthy"), other()),
        ],
        1,
    );
    assert_eq!(two_of_three[1].1, Decision::Drain);
    assert_eq!(two_of_three[2].1, Decision::HeldBack);
    let all = decisions(
        vec![
            node("a", true, Some("healthy"), other()),
            node("b", true, Some("healthy"), other()),
            node("c", true, Some("healthy"), other()),
        ],
        3,
    );
    assert!(all.iter().all(|(_, d)| *d == Decision::HeldBack), "{all:?}");
}

/// A1: whoever may tag instances can take a node out of a `tag:`
/// target; it still serves the set, so it is never removed, however
/// many runs follow.
#[test]
fn a_stranger_serving_the_set_is_kept_run_after_run() {
    let mut observed = vec![
        node("a", true, Some("healthy"), Serving::Set),
        node("x", false, Some("healthy"), Serving::Set),
        node(
            "y",
            false,
            Some("healthy"),
            Serving::Promoting("the previous key".into()),
        ),
    ];
    observed.extend((0..3).map(|i| node(&format!("m{i}"), true, Some("healthy"), Serving::Set)));
    for _ in 0..3 {
        let got = decide(
            observed.clone(),
            Limits {
                max_drain: 5,
                keep_strangers_serving: true,
            },
        );
        assert!(got.iter().all(|p| p.decision == Decision::Keep), "{got:?}");
        let x = got.iter().find(|p| p.observed.name == "x").unwrap();
        assert!(x.reason.contains("no node of the cluster"), "{}", x.reason);
    }
}

/// A3, and the attack its first fix opened: a node registered on a
/// second port where it serves other keys (a login node's own listener)
/// loses that registration alone.
#[test]
fn a_port_serving_other_keys_is_taken_out_alone() {
    let mut extra = node("a", true, Some("healthy"), other());
    extra.port = Some(2222);
    let observed = vec![
        node("a", true, Some("healthy"), Serving::Set),
        extra,
        node("b", true, Some("healthy"), Serving::Set),
        node("c", true, Some("healthy"), Serving::Set),
    ];
    let plans = decide(observed, Limits::default_for(4));
    let mut got: Vec<(Option<u16>, Decision)> = plans
        .iter()
        .filter(|p| p.observed.name == "a")
        .map(|p| (p.observed.port, p.decision))
        .collect();
    got.sort();
    assert_eq!(got, [(Some(22), Decision::Keep), (Some(2222), Decision::Drain)]);
    assert_eq!(
        super::plan::deregistrations(&plans),
        [("10.0.0.1".to_owned(), Some(2222))]
    );
}

/// Known by its own record (HyperPod, Auto Scaling's `aws:` tag), a
/// stranger is no node whatever it serves: someone with the set's keys
/// and RegisterTargets is not kept in front of users.
#[test]
fn with_the_clusters_record_a_stranger_serving_the_set_is_removed() {
    let mut observed: Vec<Observed> = (0..3)
        .map(|i| node(&format!("m{i}"), true, Some("healthy"), Serving::Set))
        .collect();
    observed.push(node("x", false, Some("healthy"), Serving::Set));
    let got = decide(observed, Limits::default_for(4));
    assert_eq!(got[3].decision, Decision::Remove, "{:?}", got[3]);
}

/// A2: someone with RegisterTargets adds more strangers than there are
/// nodes: none is removed (a person looks first), and the nodes that
/// serve the set are still admitted.
#[test]
fn a_flock_of_strangers_is_held_out_and_the_nodes_are_still_admitted() {
    let mut observed = vec![
        node("a", true, Some("healthy"), Serving::Set),
        node("new", true, None, Serving::Set),
    ];
    observed.extend((0..5).map(|i| node(&format!("s{i}"), false, Some("unhealthy"), other())));
    let got = decide(
        observed,
        Limits {
            max_drain: 1,
            keep_strangers_serving: true,
        },
    );
    assert_eq!(got[0].decision, Decision::Keep);
    assert_eq!(got[1].decision, Decision::Admit);
    for p in &got[2..] {
        assert_eq!(p.decision, Decision::HeldBack, "{p:?}");
        assert!(p.reason.contains("more than its 2 nodes"), "{}", p.reason);
    }
}

#[test]
fn draining_targets_stay_out_and_count_against_the_limit_and_unknown_targets_stay() {
    let got = decisions(
        vec![
            node("a", true, Some("healthy"), Serving::Set),
            node("b", true, Some("draining"), Serving::Set),
            node("c", true, Some("healthy"), Serving::Unknown("timed out".into())),
            node("d", true, Some("healthy"), other()),
        ],
        1,
    );
    assert_eq!(
        got,
        vec![
            ("a".into(), Decision::Keep),
            ("b".into(), Decision::Hold),
            ("c".into(), Decision::Keep),
            ("d".into(), Decision::HeldBack)
        ]
    );
}

#[test]
fn a_stranger_the_load_balancer_calls_healthy_is_limited_even_if_it_does_not_answer_here() {
    let unanswered = || Serving::Unknown("timed out".into());
    let got = decisions(
        vec![
            node("a", true, Some("healthy"), Serving::Set),
            node("b", true, Some("healthy"), Serving::Set),
            node("c", true, Some("healthy"), Serving::Set),
            node("x", false, Some("healthy"), unanswered()),
            node("y", false, Some("healthy"), unanswered()),
            node("z", false, Some("unhealthy"), unanswered()),
        ],
        1,
    );
    assert_eq!(
        got[3..],
        [
            ("x".into(), Decision::Remove),
            ("y".into(), Decision::HeldBack),
            ("z".into(), Decision::Remove)
        ]
    );
}

#[test]
fn a_node_catching_up_with_a_promotion_is_kept_but_not_admitted() {
    let promoting = || Serving::Promoting("the previous ssh-ed25519 key".to_owned());
    let got = decisions(
        vec![
            node("a", true, Some("healthy"), promoting()),
            node("b", true, Some("healthy"), Serving::Set),
            node("c", true, None, promoting()),
        ],
        3,
    );
    assert_eq!(
        got,
        vec![
            ("a".into(), Decision::Keep),
            ("b".into(), Decision::Keep),
            ("c".into(), Decision::Hold)
        ]
    );
}

#[test]
fn the_default_limit_is_a_third_and_at_least_one() {
    assert_eq!(Limits::default_for(2).max_drain, 1);
    assert_eq!(Limits::default_for(3).max_drain, 1);
    assert_eq!(Limits::default_for(9).max_drain, 3);
}

/// Only a healthy target takes users (Elastic Load Balancing routes new
/// connections to healthy targets alone): an `initial` one serving the set
/// is no capacity, so the last healthy target is not drained for it.
#[test]
fn an_initial_target_is_no_capacity_to_drain_for() {
    let mut leaving = node("a", true, Some("healthy"), Serving::Set);
    leaving.cluster_state = Some("ShuttingDown".into());
    let got = decide(
        vec![
            leaving,
            node("b", true, Some("initial"), Serving::Set),
            node("c", true, Some("healthy"), other()),
        ],
        Limits {
            max_drain: 5,
            keep_strangers_serving: false,
        },
    );
    for p in &got {
        assert_ne!(p.decision, Decision::Drain, "{}: {}", p.observed.name, p.reason);
    }
    assert!(got[0].reason.contains("no target serves the set"), "{}", got[0].reason);
    assert!(got[1].reason.contains("initial"), "{}", got[1].reason);
    // Once b is healthy, a (leaving) and c (drifted) go.
    let mut leaving = node("a", true, Some("healthy"), Serving::Set);
    leaving.cluster_state = Some("ShuttingDown".into());
    let got = decisions(
        vec![
            leaving,
            node("b", true, Some("healthy"), Serving::Set),
            node("c", true, Some("healthy"), other()),
        ],
        5,
    );
    assert_eq!(
        got,
        vec![
            ("a".into(), Decision::Drain),
            ("b".into(), Decision::Keep),
            ("c".into(), Decision::Drain)
        ]
    );
}

/// A registered target the load balancer does not use (`unused`,
/// `Target.NotInUse`: its zone is not enabled) is kept and said, never
/// registered again run after run.
#[test]
fn an_unused_target_is_reported_not_registered_again() {
    let mut unused = node("b", true, Some("unused"), Serving::Set);
    unused.target_reason = Some("Target.NotInUse".into());
    let got = decide(
        vec![node("a", true, Some("healthy"), Serving::Set), unused],
        Limits::default_for(2),
    );
    assert_eq!(got[1].decision, Decision::Keep);
    assert!(
        got[1].reason.contains("Availability Zone") && got[1].reason.contains("does not register it again"),
        "{}",
        got[1].reason
    );
    assert!(deregistrations(&got).is_empty());
}
