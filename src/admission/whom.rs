//! Who is where and what they serve: the cluster's nodes and the target
//! group's targets matched (by instance id or address), and a node's
//! handshake findings read as what it serves.

use std::collections::{BTreeMap, BTreeSet};

use super::{Group, Observed, Serving};
use crate::audit::{Finding, Verdict};
use crate::discovery::{GroupTarget, Target};

/// Every cluster node (by its id in the target group's terms) and every
/// target that is none of them, with their states; nothing asked yet.
pub(super) fn who_is_where(group: &Group, nodes: Vec<Target>) -> Vec<Observed> {
    let states: BTreeMap<&str, &GroupTarget> = group.targets.iter().map(|t| (t.id.as_str(), t)).collect();
    let mut observed = Vec::new();
    let mut members = BTreeSet::new();
    for node in nodes {
        let target_id = match group.by_instance() {
            true => node.instance_id.clone(),
            false => node.address.clone(),
        };
        let Some(target_id) = target_id else {
            observed.push(Observed {
                name: node.name.clone(),
                target_id: String::new(),
                address: node.address.clone(),
                instance_id: node.instance_id.clone(),
                member: true,
                cluster_state: None,
                target_state: None,
                serving: Serving::NotAsked,
            });
            continue;
        };
        members.insert(target_id.clone());
        observed.push(Observed {
            name: node.name.clone(),
            target_state: states.get(target_id.as_str()).map(|t| t.health.state.clone()),
            target_id,
            address: node.address.clone(),
            instance_id: node.instance_id.clone(),
            member: true,
            cluster_state: node.health.filter(|h| h.is_flagged()).map(|h| h.state),
            serving: Serving::NotAsked,
        });
    }
    for t in &group.targets {
        // A target registered on two ports is one node.
        if !members.insert(t.id.clone()) {
            continue;
        }
        observed.push(Observed {
            name: t.id.clone(),
            target_id: t.id.clone(),
            address: (!t.is_instance).then(|| t.id.clone()),
            instance_id: t.is_instance.then(|| t.id.clone()),
            member: false,
            cluster_state: None,
            target_state: Some(t.health.state.clone()),
            serving: Serving::NotAsked,
        });
    }
    observed
}

/// What a node registered on several ports serves: the set only if every
/// port serves it; else what the first port that does not serves, named
/// (a node judged on one port alone could serve other keys on another).
pub(super) fn on_every_port(mut at: Vec<(u16, Serving)>) -> Serving {
    if at.len() == 1 {
        return at.remove(0).1;
    }
    let named = |port: u16, what: &str| format!("port {port}: {what}");
    let first = |want: fn(&Serving) -> bool| at.iter().find(|(_, s)| want(s)).cloned();
    if let Some((port, Serving::Other(what))) = first(|s| matches!(s, Serving::Other(_))) {
        return Serving::Other(named(port, &what));
    }
    if let Some((port, Serving::Unknown(why))) = first(|s| matches!(s, Serving::Unknown(_))) {
        return Serving::Unknown(named(port, &why));
    }
    if let Some((port, Serving::Promoting(what))) = first(|s| matches!(s, Serving::Promoting(_))) {
        return Serving::Promoting(named(port, &what));
    }
    Serving::Set
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

#[cfg(test)]
mod tests {
    use super::{Serving, on_every_port};

    /// A3: a node registered on two ports is judged on both.
    #[test]
    fn a_node_serves_the_set_only_if_every_port_it_is_registered_on_does() {
        assert_eq!(
            on_every_port(vec![(22, Serving::Set), (2022, Serving::Set)]),
            Serving::Set
        );
        assert_eq!(
            on_every_port(vec![
                (22, Serving::Set),
                (2022, Serving::Other("ssh-ed25519 its own".into()))
            ]),
            Serving::Other("port 2022: ssh-ed25519 its own".into())
        );
        assert_eq!(
            on_every_port(vec![(22, Serving::Unknown("refused".into())), (2022, Serving::Set)]),
            Serving::Unknown("port 22: refused".into())
        );
        assert_eq!(on_every_port(vec![(22, Serving::Set)]), Serving::Set);
    }
}
