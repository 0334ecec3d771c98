//! The admission decision, from what was observed: per node, admit, hold,
//! drain, remove or keep, within the safety limits. Pure: no AWS, no
//! handshakes, so every case is a unit test.

use serde::Serialize;

/// What a node served, judged against the fleet's set by handshake.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "serves", content = "detail", rename_all = "snake_case")]
pub enum Serving {
    /// Every key type of the set, with the set's key.
    Set,
    /// Other keys (a node's own, a hand-made change): what it served.
    Other(String),
    /// The previous set first and the set as extra keys (its banner names
    /// the set): a promotion its install has not caught up with yet. Users
    /// who trust either set reach it.
    Promoting(String),
    /// Could not be asked (refused, timed out, penalised): why.
    Unknown(String),
    /// Not asked: a target with no address (an instance target that is no
    /// node of the cluster).
    NotAsked,
}

/// One node or target, as observed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Observed {
    /// What to call it: the node's name, or the target's id.
    pub name: String,
    /// Its id in the target group's terms: an address (ip target group) or
    /// an instance id (instance target group).
    pub target_id: String,
    /// Its private address, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Its instance id, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// Whether it is a node of the cluster (`--target`).
    pub member: bool,
    /// Why the cluster does not count it as in service (a HyperPod status
    /// other than Running), when it says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_state: Option<String>,
    /// Its state in the target group (`healthy`, `initial`, `draining`,
    /// ...), or none when it is not registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_state: Option<String>,
    /// Why the target group reports that state (`Target.NotInUse`,
    /// `Target.FailedHealthChecks`, ...), when it says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_reason: Option<String>,
    /// The port of this registration (a node registered on several ports
    /// is one entry per port, each judged there); none when not
    /// registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// What it served.
    #[serde(flatten)]
    pub serving: Serving,
}

/// The HyperPod statuses (`ClusterInstanceStatus`) of a node on its way
/// out of service: replaced, patched and rebooted, failed, health-checked
/// at depth, or gone. `Pending` (not up yet) and a status HyperPod did not
/// give are none of them.
pub const LEAVING: [&str; 5] = [
    "ShuttingDown",
    "SystemUpdating",
    "Failure",
    "DeepHealthCheckInProgress",
    "NotFound",
];

impl Observed {
    /// Registered and not on its way out. An `unused` target is registered
    /// (the load balancer sends it nobody: its zone is not enabled, its
    /// instance is stopped): registering it again changes nothing.
    fn in_group(&self) -> bool {
        self.target_state.as_deref().is_some_and(|s| s != "draining")
    }

    /// Takes users: the load balancer routes new connections only to
    /// `healthy` targets (an `initial` one has not passed its health
    /// checks yet, an `unhealthy` one failed them; Elastic Load Balancing,
    /// "Target health status"). What a drain would leave users counts
    /// these alone.
    fn takes_users(&self) -> bool {
        self.target_state.as_deref() == Some("healthy")
    }

    /// Registered, but the load balancer sends it nobody.
    fn unused(&self) -> bool {
        self.target_state.as_deref() == Some("unused")
    }

    /// The cluster reports it leaving service ([`LEAVING`]).
    fn leaving(&self) -> bool {
        self.cluster_state.as_deref().is_some_and(|s| LEAVING.contains(&s))
    }
}

/// What admission does with a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// A cluster node serving the set, not a target: register it.
    Admit,
    /// A cluster node not serving the set (yet), not a target: keep it out.
    Hold,
    /// A target not serving the set: deregister it (the load balancer's
    /// connection draining applies).
    Drain,
    /// A target that is no node of the cluster: deregister it.
    Remove,
    /// A drain or removal the safety limits held back: still a target.
    HeldBack,
    /// Nothing to do.
    Keep,
}

impl Decision {
    /// Whether the target group changes for it.
    pub fn changes(self) -> bool {
        matches!(self, Decision::Admit | Decision::Drain | Decision::Remove)
    }
}

/// One node's decision and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodePlan {
    /// What was observed.
    #[serde(flatten)]
    pub observed: Observed,
    /// The decision.
    pub decision: Decision,
    /// Why, in words an operator acts on.
    pub reason: String,
    /// With `--lifecycle-hook`, for an instance waiting in `Pending:Wait`:
    /// `continued` (it serves the set: the hook completed), `would
    /// continue` (a dry run), or `waiting` (the hook's timeout applies).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<&'static str>,
}

/// The limits on what one run takes out of service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// At most this many targets deregistered that still take users
    /// (drains, and removals of targets that answer).
    pub max_drain: usize,
    /// Strangers that serve the set are kept: the cluster is known by tags
    /// anyone who may tag instances can change, so a stranger serving the
    /// set may be a node whose tags were changed. Known by its own record
    /// (HyperPod, Auto Scaling's `aws:` tag, instance ids), a stranger is
    /// no node, whatever it serves, and is removed.
    pub keep_strangers_serving: bool,
}

impl Limits {
    /// The default: a third of the targets in service, at least one.
    pub fn default_for(in_service: usize) -> Limits {
        Limits {
            max_drain: (in_service / 3).max(1),
            keep_strangers_serving: false,
        }
    }
}

/// Decides for every observed node, in name order. A drain or removal of
/// a target that answers is limited: never more than `limits.max_drain`,
/// never when no target serves the set (users would be left with no node
/// at all: a node with the wrong keys still beats none), and never a
/// removal that would take the last target serving the set.
///
/// Strangers (targets that are no node of the cluster) are removed only
/// when they do not serve the set, and none at all while they outnumber
/// the cluster's nodes: a stranger serving the set may be a node whose
/// tags someone changed (`ec2:CreateTags` is all it takes), and a flock
/// of strangers is someone's registrations (or a `--target` naming part
/// of the fleet), for a person to look at. Neither stops the admission of
/// the cluster's nodes.
pub fn decide(mut observed: Vec<Observed>, limits: Limits) -> Vec<NodePlan> {
    observed.sort_by(|a, b| (!a.member, &a.name).cmp(&(!b.member, &b.name)));
    let members = observed.iter().filter(|o| o.member).count();
    let strangers = observed
        .iter()
        .filter(|o| !o.member && o.target_state.is_some())
        .count();
    // Capacity is a healthy target serving the set: one still `initial`
    // takes nobody yet, and one the cluster reports leaving is no
    // capacity to keep. With none, nothing is drained.
    let serving_targets = observed
        .iter()
        .filter(|o| o.takes_users() && o.serving == Serving::Set && !o.leaving())
        .count();
    let mut serving_left = serving_targets;
    // What is draining already (an earlier run's drains, a scale-in)
    // counts against the limit: runs back to back never add up to more.
    let draining = observed
        .iter()
        .filter(|o| o.target_state.as_deref() == Some("draining"))
        .count();
    let mut drained = draining;
    let mut plans: Vec<NodePlan> = observed
        .into_iter()
        .map(|o| first_decision(o, limits.keep_strangers_serving))
        .collect();
    if strangers > members {
        for plan in plans.iter_mut().filter(|p| p.decision == Decision::Remove) {
            plan.reason = format!(
                "would remove: {}; held back: {strangers} targets are no node of the cluster, more than its {members} nodes: --target may name only part of the fleet, or someone registered them; none is removed until that is checked (deregister them by hand)",
                plan.reason
            );
            plan.decision = Decision::HeldBack;
        }
    }
    // Drifted members first (they harm users), then members leaving, then
    // strangers that answer.
    let mut order: Vec<usize> = (0..plans.len())
        .filter(|&i| matches!(plans[i].decision, Decision::Drain | Decision::Remove) && is_limited(&plans[i]))
        .collect();
    order.sort_by_key(|&i| (plans[i].decision, plans[i].observed.serving == Serving::Set));
    for i in order {
        let plan = &mut plans[i];
        let serves = plan.observed.takes_users() && plan.observed.serving == Serving::Set && !plan.observed.leaving();
        let held = if serving_targets == 0 {
            Some(
                "no target serves the set: draining would leave users no node at all; fix the nodes (install) first"
                    .to_owned(),
            )
        } else if serves && serving_left <= 1 {
            Some("it is the last target serving the set".to_owned())
        } else if drained >= limits.max_drain {
            Some(format!(
                "--max-drain {} reached ({draining} draining already); a later run takes it out",
                limits.max_drain
            ))
        } else {
            None
        };
        match held {
            Some(why) => {
                plan.reason = format!("would {}: {}; held back: {why}", verb(plan.decision), plan.reason);
                plan.decision = Decision::HeldBack;
            }
            None => {
                drained += 1;
                serving_left -= usize::from(serves);
            }
        }
    }
    plans
}

/// What a run deregisters: each drained or removed (target, port), once.
pub fn deregistrations(plans: &[NodePlan]) -> Vec<(String, Option<u16>)> {
    let mut out: Vec<(String, Option<u16>)> = Vec::new();
    for p in plans {
        let pair = (p.observed.target_id.clone(), p.observed.port);
        if matches!(p.decision, Decision::Drain | Decision::Remove) && !out.contains(&pair) {
            out.push(pair);
        }
    }
    out
}

fn verb(decision: Decision) -> &'static str {
    match decision {
        Decision::Drain => "drain",
        _ => "remove",
    }
}

/// A deregistration that takes a target users may still reach: every
/// drain, and the removal of a stranger that answered, or that did not
/// answer this host but that the load balancer's health check calls
/// healthy (this host may not reach what the load balancer reaches). Only
/// a stranger that neither answers nor passes the health check (a
/// replaced node's old address) is removed freely.
fn is_limited(plan: &NodePlan) -> bool {
    let o = &plan.observed;
    match plan.decision {
        Decision::Drain => true,
        Decision::Remove => match &o.serving {
            Serving::Set | Serving::Other(_) | Serving::Promoting(_) => true,
            Serving::Unknown(_) | Serving::NotAsked => {
                matches!(o.target_state.as_deref(), Some("healthy" | "initial"))
            }
        },
        _ => false,
    }
}

/// The decision before the limits.
fn first_decision(o: Observed, keep_strangers_serving: bool) -> NodePlan {
    let draining = o.target_state.as_deref() == Some("draining");
    let (decision, reason) = match (o.member, o.in_group(), &o.serving) {
        (true, false, _) if draining => (
            Decision::Hold,
            "its deregistration is in progress (draining): admission does not put back a target being taken out; it is admitted once that has ended".to_owned(),
        ),
        (true, false, Serving::Set) => match &o.cluster_state {
            Some(state) => (
                Decision::Hold,
                format!("serves the set, but the cluster reports it {state}"),
            ),
            None => (Decision::Admit, "serves the set and is not a target".to_owned()),
        },
        (true, false, Serving::Other(what)) => (
            Decision::Hold,
            format!("serves other keys ({what}); it is admitted once its install has run"),
        ),
        (true, false, Serving::Unknown(why)) => (Decision::Hold, format!("could not be checked: {why}")),
        (true, false, Serving::Promoting(what)) => (
            Decision::Hold,
            format!(
                "serves the set only as extra keys, first {what}: admitted once its install catches up with the promotion"
            ),
        ),
        // The cluster says it is leaving (HyperPod: ShuttingDown before a
        // replacement, SystemUpdating before a patch's reboot, Failure):
        // users go to the others before it goes, whatever it serves.
        (true, true, _) if o.leaving() => (
            Decision::Drain,
            format!(
                "the cluster reports it {}: leaving service (a replacement, an update or a failure), so users go to the other targets before it goes",
                o.cluster_state.as_deref().unwrap_or_default()
            ),
        ),
        (true, true, Serving::Promoting(what)) => (
            Decision::Keep,
            format!(
                "serves the set as extra keys, first {what}: a promotion its install has not caught up with; users trusting either set reach it"
            ),
        ),
        (true, true, _) if o.unused() => (Decision::Keep, unused(&o)),
        (true, true, Serving::Set) => (Decision::Keep, serving_target(&o)),
        (true, true, Serving::Other(what)) => (Decision::Drain, format!("a target serving other keys ({what})")),
        (true, true, Serving::Unknown(why)) => (
            Decision::Keep,
            format!("a target that could not be checked ({why}); the load balancer's health check decides"),
        ),
        (true, _, Serving::NotAsked) => (Decision::Hold, "has no address to check".to_owned()),
        // Users who reach it meet the set: kept, whoever changed its tags.
        (false, true, Serving::Set | Serving::Promoting(_)) if keep_strangers_serving => (
            Decision::Keep,
            format!(
                "{}: kept, as users who reach it meet the set; find out why it is no node of the cluster (its tags changed? --target too narrow?)",
                stranger(&o.serving)
            ),
        ),
        (false, true, serving) => (Decision::Remove, stranger(serving)),
        (false, false, _) if draining => (
            Decision::Keep,
            "no node of the cluster, and its deregistration is in progress (draining): the load balancer sends it no new connection".to_owned(),
        ),
        (false, false, _) => (Decision::Keep, "no node of the cluster and not a target".to_owned()),
    };
    NodePlan {
        observed: o,
        decision,
        reason,
        lifecycle: None,
    }
}

/// A member registered but not in use: kept, never registered again (it
/// is registered: each run would register it in a loop), and said.
fn unused(o: &Observed) -> String {
    let why = match o.target_reason.as_deref() {
        Some("Target.NotInUse") => {
            "Target.NotInUse: no listener forwards to the target group, or the load balancer has no subnet in the target's Availability Zone; enable that zone on the load balancer"
        }
        Some("Target.InvalidState") => "Target.InvalidState: its instance is stopped",
        Some("Target.IpUnusable") => "Target.IpUnusable: the address is in use by a load balancer or not usable",
        Some(other) => other,
        None => "no reason given",
    };
    format!("registered, but the load balancer sends it nobody (unused: {why}); admission does not register it again")
}

/// A member target serving the set, by its health.
fn serving_target(o: &Observed) -> String {
    match o.target_state.as_deref() {
        Some("initial") => {
            "a target serving the set; its health checks have not passed yet (initial): users reach it once they do"
                .to_owned()
        }
        Some("unhealthy" | "unhealthy.draining") => format!(
            "a target serving the set, but failing the load balancer's health checks ({}): users reach it only if every target fails (the load balancer then fails open)",
            o.target_reason.as_deref().unwrap_or("no reason given")
        ),
        _ => "a target serving the set".to_owned(),
    }
}

fn stranger(serving: &Serving) -> String {
    let what = match serving {
        Serving::Set => "it serves the set".to_owned(),
        Serving::Other(keys) => format!("it serves other keys ({keys})"),
        Serving::Promoting(keys) => format!("it serves the set as extra keys, first {keys}"),
        Serving::Unknown(why) => format!("nothing answers there ({why})"),
        Serving::NotAsked => "not checked".to_owned(),
    };
    format!("a target that is no node of the cluster (a replaced node's old address?): {what}")
}
