//! A login node's enrolment, on the signer's side.
//!
//! A login node serves the canonical set: keys every login node shares,
//! which rotate. It proves the keys it holds (the set it serves and,
//! during a rotation's overlap, the next set) and is certified, for its
//! own names, on those it lists. The binding cannot stay the keys it
//! first proved, as a compute node's does: the set rotates. It moves on
//! continuity instead: a request that proves at least one key of the
//! binding rebinds the instance to the keys it proves. Whoever reads the
//! node's identity document (any local user, through IMDS) holds none of
//! those private keys (root's), so cannot move the binding to keys of
//! their own. A set replaced without an overlap breaks the chain: an admin
//! removes the binding (docs/cluster-trust.md, "Login nodes").

use ssh_key::{Certificate, HashAlg};

use super::proof::EnrolRequest;
use super::{
    Binding, Bindings, ClusterNodes, EnrolError, Enrolled, Policy, Proven, prove, public_lines, sorted_fingerprints,
};
use crate::certificate::{CaKey, SignRequest, sign_keys};

/// Enrols a login node: continuity with its binding (or a first binding
/// within the first-enrolment window), a request later than the last,
/// then certificates for the keys of `certify` (SHA-256 fingerprints,
/// each of a key the request proves) and the binding moved to every key
/// it proves. Nothing is signed or bound on a refusal.
pub async fn enrol_login(
    request: &EnrolRequest,
    certify: &[String],
    cluster: &impl ClusterNodes,
    bindings: &impl Bindings,
    ca: &CaKey,
    policy: &Policy,
    now: i64,
) -> Result<Enrolled, EnrolError> {
    let Proven { keys, identity, member } = prove(request, 2, &[], cluster, policy, now).await?;
    let instance = identity.instance_id.clone();
    let mut wanted = Vec::new();
    for fingerprint in certify {
        let key = keys
            .iter()
            .find(|k| k.fingerprint(HashAlg::Sha256).to_string() == *fingerprint)
            .ok_or_else(|| EnrolError::NotProven {
                instance: instance.clone(),
                fingerprint: crate::escape::escape(fingerprint),
            })?;
        if !wanted.contains(key) {
            wanted.push(key.clone());
        }
    }
    let fingerprints = sorted_fingerprints(&keys);
    let previous = bindings.get(&instance).await.map_err(EnrolError::Bindings)?;
    match &previous {
        Some(b) if b.revoked => return Err(EnrolError::Revoked(instance)),
        None if now - identity.pending_time > policy.first_within => {
            return Err(EnrolError::LateFirst {
                instance,
                age: now - identity.pending_time,
                limit: policy.first_within,
            });
        }
        Some(b) if !b.fingerprints.iter().any(|f| fingerprints.contains(f)) => {
            return Err(EnrolError::Continuity(instance));
        }
        Some(b) if request.issued_at_ms <= b.last_issued_at_ms => {
            return Err(EnrolError::Replay {
                instance,
                issued_at_ms: request.issued_at_ms,
                last: b.last_issued_at_ms,
            });
        }
        _ => {}
    }
    let now_u = u64::try_from(now).unwrap_or(0);
    let sign = SignRequest {
        principals: member.names.clone(),
        valid_after: now_u.saturating_sub(crate::certificate::BACKDATE_SECS),
        valid_before: now_u.saturating_add(policy.validity),
        serial: u64::try_from(request.issued_at_ms).unwrap_or(0),
        key_id: format!("hostkeyctl enrol login instance={instance}"),
    };
    let certificates: Vec<Certificate> = if wanted.is_empty() {
        Vec::new()
    } else {
        sign_keys(ca, &wanted, &sign)?.into_iter().map(|(_, c)| c).collect()
    };
    let binding = Binding {
        fingerprints,
        last_issued_at_ms: request.issued_at_ms,
        host_keys: public_lines(&keys),
        revoked: false,
    };
    if !bindings
        .put(&instance, &binding, previous.as_ref())
        .await
        .map_err(EnrolError::Bindings)?
    {
        return Err(EnrolError::Raced(instance));
    }
    Ok(Enrolled {
        instance_id: instance,
        principals: member.names,
        certificates,
    })
}

/// The trust alone, for a login node whose install has not run yet (it
/// serves keys of its own, which the set will replace): the request is
/// proven as an enrolment is, a revoked instance is refused, and nothing
/// is bound, so the set's keys bind it later. Returns the instance.
pub async fn trust(
    request: &EnrolRequest,
    cluster: &impl ClusterNodes,
    bindings: &impl Bindings,
    policy: &Policy,
    now: i64,
) -> Result<String, EnrolError> {
    let Proven { identity, .. } = prove(request, 1, &[], cluster, policy, now).await?;
    let instance = identity.instance_id;
    match bindings.get(&instance).await.map_err(EnrolError::Bindings)? {
        Some(b) if b.revoked => Err(EnrolError::Revoked(instance)),
        _ => Ok(instance),
    }
}
