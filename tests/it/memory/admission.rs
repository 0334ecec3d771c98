//! Admission's flow in memory (the target group and the launch hook as
//! doubles, the nodes as [`MemFleet`]): what the bed's ELB cannot show,
//! since moto keeps one registration per target id where Elastic Load
//! Balancing keeps one per id and port.

use std::sync::Arc;

use hostkeyctl::admission::{Admission, AdmissionRequest, Decision, GroupSpec, Lifecycle, Serving};
use hostkeyctl::discovery::TargetSpec;
use hostkeyctl::exit::Status;
use hostkeyctl::keyset::{KeyAlgorithm, KeySet};
use hostkeyctl::scan::{ScanAlgorithm, ScanPolicy};
use hostkeyctl::testing::{Fault, Hooked, MemFleet, MemHooks, MemTargetGroups, MemoryStore, Op};

use super::{current, secret, world};

/// A fleet of `nodes` serving the set, its fingerprint tags written, and
/// the nodes' addresses.
async fn serving(nodes: usize) -> (MemoryStore, Arc<MemFleet>, Vec<String>) {
    let (store, fleet, _) = world(nodes).await;
    let set = current(&store).await;
    hostkeyctl::store::tag_fingerprints(&store, &secret(), &set.version_id, &set.document.keys)
        .await
        .unwrap();
    let addresses = fleet
        .instances()
        .iter()
        .map(|i| i.private_ip.clone().unwrap())
        .collect();
    (store, fleet, addresses)
}

fn request() -> AdmissionRequest {
    AdmissionRequest {
        secret: secret(),
        group: GroupSpec::TargetGroup("arn:aws:elasticloadbalancing:us-east-1:111122223333:targetgroup/login/0".into()),
        cluster: vec![TargetSpec::Tag {
            key: "Role".into(),
            value: "login".into(),
        }],
        port: 22,
        max_drain: None,
        dry_run: false,
        allow_other_clusters: false,
        lifecycle: None,
    }
}

/// A3: a node registered on a second port is judged there too: an entry
/// per registration, each at its port (the one that refuses here is not
/// reported as serving the set), and only its own port would leave.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_registered_on_two_ports_is_judged_on_both() {
    let (store, fleet, a) = serving(3).await;
    let groups = MemTargetGroups::ip(
        "login",
        22,
        &[
            (&a[0], 22, "healthy"),
            (&a[1], 22, "healthy"),
            (&a[2], 22, "healthy"),
            (&a[2], 2022, "healthy"),
        ],
    );
    let admission = Admission {
        store: &store,
        fleet: &*fleet,
        groups: &groups,
        hooks: None::<&MemHooks>,
        prober: fleet.clone(),
        policy: ScanPolicy::from_options(8, 2, 1, 1, ScanAlgorithm::ALL.to_vec()),
    };
    let report = admission.run(&request()).await.unwrap();
    let at = |port: u16| {
        report
            .nodes
            .iter()
            .find(|p| p.observed.target_id == a[2] && p.observed.port == Some(port))
            .unwrap_or_else(|| panic!("no entry for {} port {port}: {:?}", a[2], report.nodes))
    };
    assert!(
        matches!(at(2022).observed.serving, Serving::Unknown(_)),
        "{:?}",
        at(2022)
    );
    assert!(at(2022).observed.name.ends_with("(port 2022)"), "{:?}", at(2022));
    assert_eq!(at(22).observed.serving, Serving::Set);
    for p in &report.nodes {
        assert_eq!(p.decision, Decision::Keep, "{p:?}");
    }
    assert_eq!(report.status(), Status::Incomplete);
    assert!(groups.deregistered.lock().unwrap().is_empty());
}

/// The admission of `fleet`'s nodes into `groups` (no launch hook).
fn admission<'a>(
    store: &'a MemoryStore,
    fleet: &'a Arc<MemFleet>,
    groups: &'a MemTargetGroups,
    hooks: Option<&'a MemHooks>,
) -> Admission<'a, MemoryStore, MemFleet, MemTargetGroups, MemHooks, MemFleet> {
    Admission {
        store,
        fleet: &**fleet,
        groups,
        hooks,
        prober: fleet.clone(),
        policy: ScanPolicy::from_options(8, 2, 1, 1, ScanAlgorithm::ALL.to_vec()),
    }
}

/// Node `i` serves another Ed25519 key than the set's (a hand-made change).
fn drift(fleet: &MemFleet, i: usize) {
    let other = KeySet::generate(&[KeyAlgorithm::Ed25519], 0).unwrap();
    let key = other.keys().next().unwrap().public_key().clone();
    fleet.nodes[i].faults.lock().unwrap().stray_plain_key = Some((ScanAlgorithm::Ed25519, key));
}

/// Each target state as DescribeTargetHealth reports it, for a node
/// serving the set and for one serving other keys, through the whole flow
/// (Elastic Load Balancing, "Target health status"; docs/admission.md's
/// table): what is decided, what the group is asked, the exit status.
#[tokio::test(flavor = "multi_thread")]
async fn every_target_state_is_judged_through_the_flow() {
    use Decision::{Admit, Drain, Hold, Keep};
    // (state, reason, decision serving the set, serving other keys)
    let cases: [(Option<&str>, Option<&str>, Decision, Decision); 7] = [
        (Some("healthy"), None, Keep, Drain),
        (Some("initial"), Some("Elb.InitialHealthChecking"), Keep, Drain),
        (Some("unhealthy"), Some("Target.FailedHealthChecks"), Keep, Drain),
        (Some("draining"), Some("Target.DeregistrationInProgress"), Hold, Hold),
        (Some("unused"), Some("Target.NotInUse"), Keep, Keep),
        (Some("unused"), Some("Target.InvalidState"), Keep, Keep),
        (None, None, Admit, Hold),
    ];
    for (state, reason, set_decision, drifted) in cases {
        for other_keys in [false, true] {
            let (store, fleet, a) = serving(4).await;
            let mut targets = vec![
                (a[0].as_str(), 22, "healthy"),
                (a[1].as_str(), 22, "healthy"),
                (a[2].as_str(), 22, "healthy"),
            ];
            targets.extend(state.map(|s| (a[3].as_str(), 22, s)));
            let groups = MemTargetGroups::ip("login", 22, &targets);
            if let Some(s) = state {
                groups.set_state(&a[3], 22, s, reason);
            }
            if other_keys {
                drift(&fleet, 3);
            }
            let report = admission(&store, &fleet, &groups, None).run(&request()).await.unwrap();
            let what = format!("{state:?} {reason:?}, other keys: {other_keys}");
            let plan = report.nodes.iter().find(|p| p.observed.target_id == a[3]).unwrap();
            let want = if other_keys { drifted } else { set_decision };
            assert_eq!(plan.decision, want, "{what}: {plan:?}");
            // The one target moved, on the side the decision says.
            let moved_if = |decision| {
                if want == decision {
                    vec![(a[3].clone(), Some(22))]
                } else {
                    vec![]
                }
            };
            assert_eq!(*groups.registered.lock().unwrap(), moved_if(Admit), "{what}");
            assert_eq!(*groups.deregistered.lock().unwrap(), moved_if(Drain), "{what}");
            let status = match (other_keys, state) {
                (true, _) => Status::Drift,
                (false, Some("unused")) => Status::Incomplete,
                (false, _) => Status::Success,
            };
            assert_eq!(report.status(), status, "{what}: {:?}", report.nodes);
        }
    }
}

/// Admission with a launch hook: node 4 waits in it serving the set, not
/// a target; node 1 drifted; nodes 1 to 3 are healthy targets.
struct Scene {
    store: MemoryStore,
    fleet: Arc<MemFleet>,
    a: Vec<String>,
    groups: MemTargetGroups,
    hooks: MemHooks,
    waiting: String,
    req: AdmissionRequest,
}

impl Scene {
    async fn new() -> Scene {
        let (store, fleet, a) = serving(4).await;
        let groups = MemTargetGroups::ip(
            "login",
            22,
            &[(&a[0], 22, "healthy"), (&a[1], 22, "healthy"), (&a[2], 22, "healthy")],
        );
        let hooks = MemHooks::default();
        let waiting = fleet.nodes[3].instance.instance_id.clone();
        hooks.waiting.lock().unwrap().push(waiting.clone());
        drift(&fleet, 0);
        let mut req = request();
        req.lifecycle = Some(Lifecycle {
            group: "login-asg".to_owned(),
            hook: "hostkeyctl-launch".to_owned(),
        });
        Scene {
            store,
            fleet,
            a,
            groups,
            hooks,
            waiting,
            req,
        }
    }

    /// One pass, with the first call of `op` failing (none: nothing fails).
    async fn pass(&self, op: Option<&'static str>) -> Result<hostkeyctl::admission::AdmissionReport, String> {
        match op {
            None | Some("secretsmanager:DescribeSecret") => {}
            Some(op @ "ec2:DescribeInstances") => _ = self.fleet.faults.fail_nth(op, 1),
            Some(op) if op.starts_with("autoscaling:") => _ = self.hooks.faults.fail_nth(op, 1),
            Some(op) => _ = self.groups.faults.fail_nth(op, 1),
        }
        let r = if op == Some("secretsmanager:DescribeSecret") {
            let hooked = Hooked::fault_at(&self.store, 1, Some(Op::Describe), Fault::Fail);
            let flow = Admission {
                store: &hooked,
                fleet: &*self.fleet,
                groups: &self.groups,
                hooks: Some(&self.hooks),
                prober: self.fleet.clone(),
                policy: ScanPolicy::from_options(8, 2, 1, 1, ScanAlgorithm::ALL.to_vec()),
            };
            flow.run(&self.req).await
        } else {
            admission(&self.store, &self.fleet, &self.groups, Some(&self.hooks))
                .run(&self.req)
                .await
        };
        r.map_err(|e| e.to_string())
    }

    fn registered(&self) -> Vec<(String, Option<u16>)> {
        self.groups.registered.lock().unwrap().clone()
    }

    fn deregistered(&self) -> Vec<(String, Option<u16>)> {
        self.groups.deregistered.lock().unwrap().clone()
    }

    fn continued(&self) -> Vec<String> {
        self.hooks.continued.lock().unwrap().clone()
    }
}

/// Every call admission makes, failed in turn ("fail the Nth call"): a
/// read that fails changes nothing and says why; a write that fails is
/// reported (exit 4) while the other write is still made; a launch hook
/// is completed only once its instance is a target. The next pass, with
/// nothing failing, finishes the work.
#[tokio::test(flavor = "multi_thread")]
async fn every_call_failing_loses_nothing_and_the_next_pass_finishes() {
    let ops = [
        "secretsmanager:DescribeSecret",
        "ec2:DescribeInstances",
        "elasticloadbalancing:DescribeTargetHealth",
        "autoscaling:DescribeAutoScalingGroups",
        "elasticloadbalancing:RegisterTargets",
        "elasticloadbalancing:DeregisterTargets",
        "autoscaling:CompleteLifecycleAction",
    ];
    for op in ops {
        let scene = Scene::new().await;
        let first = scene.pass(Some(op)).await;
        let (a, waiting) = (&scene.a, &scene.waiting);
        match op {
            "elasticloadbalancing:RegisterTargets" => {
                let report = first.unwrap();
                assert_eq!(report.status(), Status::Aws, "{op}");
                assert!(
                    report.errors[0].contains("registering") && report.errors[0].contains(op),
                    "{:?}",
                    report.errors
                );
                assert_eq!(
                    scene.deregistered(),
                    [(a[0].clone(), Some(22))],
                    "{op}: the drain is still made"
                );
                assert!(
                    scene.continued().is_empty(),
                    "{op}: a hook completed for an instance that is no target"
                );
            }
            "elasticloadbalancing:DeregisterTargets" | "autoscaling:CompleteLifecycleAction" => {
                let report = first.unwrap();
                assert_eq!(report.status(), Status::Aws, "{op}");
                assert!(
                    report.errors.iter().any(|e| e.contains(op)),
                    "{op}: {:?}",
                    report.errors
                );
                assert_eq!(
                    scene.registered(),
                    [(a[3].clone(), Some(22))],
                    "{op}: the admission is still made"
                );
            }
            _ => {
                let err = first.err().unwrap_or_else(|| panic!("{op}: the run went on"));
                // Hooked names the store's operation its own way.
                let named = if op.starts_with("secretsmanager:") {
                    "Describe: injected failure"
                } else {
                    op
                };
                assert!(err.contains(named), "{op}: {err}");
                assert!(scene.registered().is_empty() && scene.deregistered().is_empty(), "{op}");
                assert!(scene.continued().is_empty(), "{op}");
            }
        }
        // The next pass finishes what is left.
        let next = scene.pass(None).await.unwrap();
        assert!(next.errors.is_empty(), "{op}: {:?}", next.errors);
        assert_eq!(next.status(), Status::Drift, "{op}: node 1 still serves other keys");
        assert!(scene.groups.targets().contains(&(a[3].clone(), Some(22))), "{op}");
        assert_eq!(scene.continued(), std::slice::from_ref(waiting), "{op}");
        let drained = scene.groups.states().into_iter().find(|(id, _, _)| *id == a[0]);
        assert_eq!(drained.map(|(_, _, s)| s), Some("draining".to_owned()), "{op}");
    }
}
