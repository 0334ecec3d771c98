//! What admission observes before it decides: who is where (the
//! cluster's nodes and the target group's targets matched, by instance id
//! or address), and what each serves (its handshake findings read).

use std::collections::BTreeSet;

use super::{Group, Observed, Serving};
use crate::audit::{Finding, Verdict};
use crate::discovery::{GroupTarget, Target};

/// Every cluster node (by its id in the target group's terms) and every
/// target that is none of them, with their states; nothing asked yet. A
/// node or target registered on several ports is an entry per port, each
/// judged where it is registered: a port serving other keys is taken out
/// alone, and the others stay.
pub(super) fn who_is_where(group: &Group, nodes: Vec<Target>) -> Vec<Observed> {
    let registrations = |id: &str| -> Vec<&GroupTarget> { group.targets.iter().filter(|t| t.id == id).collect() };
    let mut observed = Vec::new();
    let mut members = BTreeSet::new();
    for node in nodes {
        let target_id = match group.by_instance() {
            true => node.instance_id.clone(),
            false => node.address.clone(),
        };
        let base = Observed {
            name: node.name.clone(),
            target_id: target_id.clone().unwrap_or_default(),
            address: node.address.clone(),
            instance_id: node.instance_id.clone(),
            member: true,
            cluster_state: node.health.filter(|h| h.is_flagged()).map(|h| h.state),
            target_state: None,
            target_reason: None,
            port: None,
            serving: Serving::NotAsked,
        };
        let Some(target_id) = target_id else {
            observed.push(Observed {
                cluster_state: None,
                ..base
            });
            continue;
        };
        if !members.insert(target_id.clone()) {
            continue;
        }
        observed.extend(entries(base, &registrations(&target_id)));
    }
    let mut strangers = BTreeSet::new();
    for t in &group.targets {
        if members.contains(&t.id) || !strangers.insert(t.id.clone()) {
            continue;
        }
        let base = Observed {
            name: t.id.clone(),
            target_id: t.id.clone(),
            address: (!t.is_instance).then(|| t.id.clone()),
            instance_id: t.is_instance.then(|| t.id.clone()),
            member: false,
            cluster_state: None,
            target_state: None,
            target_reason: None,
            port: None,
            serving: Serving::NotAsked,
        };
        observed.extend(entries(base, &registrations(&t.id)));
    }
    observed
}

/// `base` once per registration (named with its port when there are
/// several), or once unregistered.
fn entries(base: Observed, registrations: &[&GroupTarget]) -> Vec<Observed> {
    if registrations.is_empty() {
        return vec![base];
    }
    let several = registrations.len() > 1;
    registrations
        .iter()
        .map(|t| Observed {
            name: match (several, t.port) {
                (true, Some(port)) => format!("{} (port {port})", base.name),
                _ => base.name.clone(),
            },
            target_state: Some(t.health.state.clone()),
            target_reason: t.health.reason.clone(),
            port: t.port,
            ..base.clone()
        })
        .collect()
}

/// What a node's findings say it serves.
pub(super) fn serving_of(findings: &[Finding]) -> Serving {
    if !findings.is_empty() && findings.iter().all(|f| f.status == Verdict::Ok) {
        return Serving::Set;
    }
    let drift: Vec<String> = findings
        .iter()
        .filter(|f| f.status.is_drift())
        .map(|f| match (&f.status, &f.served) {
            (Verdict::Missing, _) => format!("no {}", f.key_type),
            (_, Some(served)) => format!("{} {served}", f.key_type),
            (_, None) => f.key_type.clone(),
        })
        .collect();
    if !drift.is_empty() {
        return Serving::Other(drift.join(", "));
    }
    let why = findings
        .iter()
        .find_map(|f| f.detail.clone())
        .unwrap_or_else(|| "no answer".to_owned());
    Serving::Unknown(why)
}
