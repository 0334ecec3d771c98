//! The signer's decisions: what a node's request gets.
//!
//! Every request is checked in the order of what each check costs, so that
//! whatever can be refused is refused before any AWS call, and a refused
//! request never reaches KMS or a table scan (docs/cluster-trust.md, "What
//! the signer checks"):
//!
//! 1. no call at all: the audience, the time, AWS's signature on the
//!    identity document, the Region, each key's proof;
//! 2. one `GetItem`: the binding (revoked, a claim, other keys, a replay,
//!    a renewal sooner than [`Policy::renew_every`], answered from it);
//! 3. the set's public fingerprints (a cached `DescribeSecret`), then the
//!    cluster's record of the instance (membership, address, names; for
//!    other keys than bound, at most once a minute and after a write that
//!    says so, whether HyperPod patched the node: [`patched`]);
//! 4. the binding written (a conditional `PutItem`: of two racing
//!    requests one wins, and the loser has spent no Sign);
//! 5. KMS signs, and the certificates are kept in the binding.

use std::sync::Mutex;

use ssh_key::{Certificate, HashAlg, PublicKey};

use super::binding::{Binding, Bindings, ClusterNodes, EnrolError, Enrolled, Member, Policy, SetKeys};
use crate::enrolment::identity::{self, Identity, KeySource};
use crate::enrolment::proof::{self, EnrolRequest};

/// How long a signing, once its binding is written, keeps another request
/// of the instance from starting one (seconds): overlapping requests of
/// one instance never sign at once, and a signing that failed (KMS
/// throttled) can be tried again a minute later.
const SIGNING_SECS: i64 = 60;
use crate::certificate::{CaKey, Principal, SignRequest, sign_keys};

/// What a request proves by itself, with no AWS call: its keys, each
/// shown to have signed it, and the instance AWS signed it for.
struct Verified {
    keys: Vec<PublicKey>,
    identity: Identity,
    fingerprints: Vec<String>,
}

/// Step 1 (module documentation): no AWS call.
fn verify(request: &EnrolRequest, policy: &Policy, now: i64) -> Result<Verified, EnrolError> {
    if request.audience != policy.audience {
        return Err(EnrolError::Audience(crate::escape::escape(&request.audience)));
    }
    if (now.saturating_mul(1000) - request.issued_at_ms).abs() > policy.skew.saturating_mul(1000) {
        return Err(EnrolError::Stale {
            issued_at: request.issued_at_ms / 1000,
            now,
            skew: policy.skew,
        });
    }
    // AWS's signature first (one RSA verification), then the keys' proofs.
    let identity = identity::verify(&request.document, &request.signature, &policy.keys)?;
    if identity.region != policy.region {
        return Err(EnrolError::Region {
            instance: identity.instance_id,
            region: identity.region,
            expected: policy.region.clone(),
        });
    }
    let keys = proof::check(request)?;
    let fingerprints = sorted_fingerprints(&keys);
    Ok(Verified {
        keys,
        identity,
        fingerprints,
    })
}

/// Step 3's second half: the cluster's record of the instance.
async fn member_of(
    identity: &Identity,
    asked: &[Principal],
    cluster: &impl ClusterNodes,
) -> Result<Member, EnrolError> {
    let instance = identity.instance_id.clone();
    let member = cluster.member(&instance).await?.ok_or_else(|| EnrolError::NotMember {
        instance: crate::escape::escape(&instance),
        membership: cluster.membership(),
    })?;
    if member.private_ip != identity.private_ip {
        return Err(EnrolError::Address {
            instance,
            document: identity.private_ip,
            cluster: member.private_ip,
        });
    }
    let extra: Vec<String> = asked
        .iter()
        .filter(|p| !member.names.contains(p))
        .map(|p| p.as_str().to_owned())
        .collect();
    if !extra.is_empty() {
        return Err(EnrolError::Principals {
            instance,
            asked: extra,
            names: member.names.iter().map(|p| p.as_str().to_owned()).collect(),
        });
    }
    Ok(member)
}

/// Decides `request` and signs, or says why not (nothing signed, nothing
/// bound). `asked` are names the node expects: any that AWS does not give
/// it refuses the request, so a misconfigured node learns it at once.
/// `set`: the canonical set's keys, which no instance is certified for.
#[allow(clippy::too_many_arguments)]
pub async fn enrol(
    request: &EnrolRequest,
    asked: &[Principal],
    cluster: &impl ClusterNodes,
    bindings: &impl Bindings,
    set: &impl SetKeys,
    ca: &CaKey,
    policy: &Policy,
    now: i64,
) -> Result<Enrolled, EnrolError> {
    let Verified {
        keys,
        identity,
        fingerprints,
    } = verify(request, policy, now)?;
    let instance = identity.instance_id.clone();
    let mut previous = bindings.get(&instance).await.map_err(EnrolError::Bindings)?;
    if let Some(answer) = from_binding(
        previous.as_ref(),
        request,
        &fingerprints,
        &identity,
        asked,
        ca,
        policy,
        now,
    )? {
        return Ok(answer);
    }
    let known = set.fingerprints().await.map_err(EnrolError::Bindings)?;
    let of_set: Vec<String> = fingerprints.iter().filter(|f| known.contains(f)).cloned().collect();
    if !of_set.is_empty() {
        return Err(EnrolError::SetKeys {
            instance,
            fingerprints: of_set,
        });
    }
    let rekey = previous.as_ref().is_some_and(|b| b.fingerprints != fingerprints);
    if rekey {
        previous = Some(looking_up(previous.as_ref(), &instance, bindings, now).await?);
    }
    let member = member_of(&identity, asked, cluster).await?;
    if rekey && !patched(previous.as_ref(), &member, policy, now) {
        return Err(EnrolError::Bound(instance));
    }
    // Bound before signing: a request that loses the race spends no Sign.
    // New keys (a patch) keep nothing of the old ones' certificates.
    let kept = previous.as_ref().filter(|_| !rekey);
    let bound = Binding {
        fingerprints,
        last_issued_at_ms: request.issued_at_ms,
        host_keys: public_lines(&keys),
        revoked: false,
        claim: false,
        certificates: kept.map(|b| b.certificates.clone()).unwrap_or_default(),
        certified_at: kept.map_or(0, |b| b.certified_at),
        signing_at: now,
        image_id: member.image_id.clone(),
        rekey_looked_at: previous.as_ref().map_or(0, |b| b.rekey_looked_at),
    };
    if !bindings
        .put(&instance, &bound, previous.as_ref())
        .await
        .map_err(EnrolError::Bindings)?
    {
        return Err(EnrolError::Raced(instance));
    }
    let now_u = u64::try_from(now).unwrap_or(0);
    let sign = SignRequest {
        principals: member.names.clone(),
        valid_after: now_u.saturating_sub(crate::certificate::BACKDATE_SECS),
        valid_before: now_u.saturating_add(policy.validity),
        serial: u64::try_from(request.issued_at_ms).unwrap_or(0),
        key_id: format!("hostkeyctl enrol instance={instance}"),
    };
    let certificates: Vec<Certificate> = sign_keys(ca, &keys, &sign)?.into_iter().map(|(_, c)| c).collect();
    // Kept for the renewals of the next period. A failure here costs the
    // next renewal a Sign, nothing else: the node has its certificates.
    let with_certificates = Binding {
        certificates: certificates.iter().map(crate::certificate::certificate_line).collect(),
        certified_at: now,
        ..bound.clone()
    };
    if let Err(e) = bindings.put(&instance, &with_certificates, Some(&bound)).await {
        tracing::warn!("the certificates of {instance} were not kept in its binding: {e}");
    }
    Ok(Enrolled {
        instance_id: instance,
        principals: member.names,
        certificates,
        signed: true,
        verified_by: identity.verified_by,
    })
}

/// Step 2 (module documentation): what the instance's binding decides
/// alone: a refusal, an answer from it (a retry, a renewal within the
/// period), or nothing (`None`: go on).
#[allow(clippy::too_many_arguments)]
fn from_binding(
    previous: Option<&Binding>,
    request: &EnrolRequest,
    fingerprints: &[String],
    identity: &Identity,
    asked: &[Principal],
    ca: &CaKey,
    policy: &Policy,
    now: i64,
) -> Result<Option<Enrolled>, EnrolError> {
    let instance = identity.instance_id.clone();
    match previous {
        Some(b) if b.revoked => return Err(EnrolError::Revoked(instance)),
        Some(b) if b.claim => return Err(EnrolError::Claimed(instance)),
        None if now - identity.pending_time > policy.first_within => {
            return Err(EnrolError::LateFirst {
                instance,
                age: now - identity.pending_time,
                limit: policy.first_within,
            });
        }
        // Other keys: refused, unless the cluster's record shows a patch
        // ([`patched`]), which only a binding that knows its image can
        // show; at most one lookup a minute ([`looking_up`]).
        Some(b)
            if b.fingerprints != fingerprints
                && (b.image_id.is_none()
                    || request.issued_at_ms <= b.last_issued_at_ms
                    || (0..REKEY_LOOKUP_SECS).contains(&(now - b.rekey_looked_at))) =>
        {
            return Err(EnrolError::Bound(instance));
        }
        Some(b) if b.fingerprints != fingerprints => {}
        // The same request again (a retry of one that was answered but
        // whose answer was lost): its answer again, nothing new.
        Some(b)
            if request.issued_at_ms == b.last_issued_at_ms
                && b.certified_at * 1000 >= b.last_issued_at_ms - policy.skew * 1000 =>
        {
            return kept(b, identity, asked, ca)
                .map(Some)
                .ok_or_else(|| replay(&instance, request, b));
        }
        Some(b) if request.issued_at_ms <= b.last_issued_at_ms => return Err(replay(&instance, request, b)),
        Some(b) if b.certified_at > 0 && now - b.certified_at < policy.renew_every => {
            if let Some(kept) = kept(b, identity, asked, ca) {
                return Ok(Some(kept));
            }
        }
        // Another request of this instance is being signed right now.
        Some(b) if b.signing_at > b.certified_at && (0..SIGNING_SECS).contains(&(now - b.signing_at)) => {
            return Err(EnrolError::Raced(instance));
        }
        _ => {}
    }
    Ok(None)
}

/// How often a request with other keys may have the cluster's record
/// looked up for a patch, per instance (seconds): a flood of them (anyone
/// on the node with its identity document) costs one lookup a minute.
const REKEY_LOOKUP_SECS: i64 = 60;

/// Records the lookup a request with other keys is about to make (a
/// conditional write: of racing requests one looks); the binding as
/// written.
async fn looking_up(
    previous: Option<&Binding>,
    instance: &str,
    bindings: &impl Bindings,
    now: i64,
) -> Result<Binding, EnrolError> {
    let looked = Binding {
        rekey_looked_at: now,
        ..previous.cloned().unwrap_or_default()
    };
    if bindings
        .put(instance, &looked, previous)
        .await
        .map_err(EnrolError::Bindings)?
    {
        Ok(looked)
    } else {
        Err(EnrolError::Raced(instance.to_owned()))
    }
}

/// Whether the cluster reports the node patched since its keys were
/// bound: another machine image than the binding's (UpdateClusterSoftware
/// replaced its root volume, and with it the host keys), and its software
/// updated within the first-enrolment window, as a new instance's first
/// enrolment is. Someone with the node's identity document could race the
/// node in that window, as at its launch; at no other time, and never with
/// another instance's document (its binding, its record).
fn patched(previous: Option<&Binding>, member: &Member, policy: &Policy, now: i64) -> bool {
    let (Some(b), Some(image), Some(at)) = (previous, &member.image_id, member.software_updated_at) else {
        return false;
    };
    b.image_id.as_ref().is_some_and(|old| old != image) && (0..=policy.first_within).contains(&(now - at))
}

/// A replay's refusal.
fn replay(instance: &str, request: &EnrolRequest, binding: &Binding) -> EnrolError {
    EnrolError::Replay {
        instance: instance.to_owned(),
        issued_at_ms: request.issued_at_ms,
        last: binding.last_issued_at_ms,
    }
}

/// The binding's certificates, as an answer, if they still parse, come
/// from the signer's CA (not one rotated away), name the document's
/// address and every name asked for (else the full path, with the
/// cluster's record, decides), one per bound key.
fn kept(binding: &Binding, identity: &Identity, asked: &[Principal], ca: &CaKey) -> Option<Enrolled> {
    let certificates: Vec<Certificate> = binding
        .certificates
        .iter()
        .map(|line| Certificate::from_openssh(line).ok())
        .collect::<Option<_>>()?;
    let ours = ca.public_key();
    if certificates
        .iter()
        .any(|c| PublicKey::from(c.signature_key().clone()).key_data() != ours.key_data())
    {
        return None;
    }
    let principals: Vec<Principal> = certificates
        .first()?
        .valid_principals()
        .iter()
        .map(|p| Principal::parse(p).ok())
        .collect::<Option<_>>()?;
    let address = Principal::parse(&identity.private_ip.to_string()).ok()?;
    let names_all = principals.contains(&address) && asked.iter().all(|a| principals.contains(a));
    (names_all && certificates.len() == binding.fingerprints.len()).then(|| Enrolled {
        instance_id: identity.instance_id.clone(),
        principals,
        certificates,
        signed: false,
        verified_by: identity.verified_by,
    })
}

/// A claim or a request for the trust, accepted.
#[derive(Debug, PartialEq, Eq)]
pub struct Trusted {
    /// The instance.
    pub instance_id: String,
    /// Which key verified its identity document.
    pub verified_by: KeySource,
}

/// A login node's claim (`{"ca": true}` with its request), from a login
/// node with no listener for the cluster: proven as an enrolment is, it
/// takes an unbound instance for a claim, which is certified for no key,
/// so nobody who copies the login node's identity document gets a
/// certificate for its names, whatever keys they hold (the set's
/// included). A binding made by an earlier claim for the same keys (which
/// certified them) becomes a claim.
pub async fn claim(
    request: &EnrolRequest,
    cluster: &impl ClusterNodes,
    bindings: &impl Bindings,
    policy: &Policy,
    now: i64,
) -> Result<Trusted, EnrolError> {
    let Verified {
        identity, fingerprints, ..
    } = verify(request, policy, now)?;
    let instance = identity.instance_id.clone();
    let trusted = Trusted {
        instance_id: instance.clone(),
        verified_by: identity.verified_by,
    };
    let previous = bindings.get(&instance).await.map_err(EnrolError::Bindings)?;
    let claimed = Binding {
        fingerprints: fingerprints.clone(),
        last_issued_at_ms: request.issued_at_ms,
        claim: true,
        ..Binding::default()
    };
    match &previous {
        Some(b) if b.revoked => return Err(EnrolError::Revoked(instance)),
        Some(b) if b.claim => return Ok(trusted),
        // A binding this signer has signed for (its certificates kept) is
        // a node's with a listener, or someone's: never taken by a claim.
        Some(b) if b.fingerprints != fingerprints && b.certified_at > 0 => {
            return Err(EnrolError::ClaimOverBinding(instance));
        }
        Some(b) => {
            // A binding from before claims certified no key (the keys the
            // login node served then, maybe a set rotated since): now a
            // claim. Later than any request in flight for it, so none of
            // their writes lands over the claim.
            let migrated = Binding {
                last_issued_at_ms: b.last_issued_at_ms.max(request.issued_at_ms) + policy.skew * 1000 + 1,
                ..claimed
            };
            member_of(&identity, &[], cluster).await?;
            if !bindings
                .put(&instance, &migrated, Some(b))
                .await
                .map_err(EnrolError::Bindings)?
            {
                return Err(EnrolError::Raced(instance));
            }
            tracing::warn!("the binding of {instance}, a login node's, certifies no key from now on (a claim)");
            return Ok(trusted);
        }
        // Past the window nobody can enrol it first: nothing to take.
        None if now - identity.pending_time > policy.first_within => return Ok(trusted),
        None => {}
    }
    member_of(&identity, &[], cluster).await?;
    if !bindings
        .put(&instance, &claimed, None)
        .await
        .map_err(EnrolError::Bindings)?
    {
        return Err(EnrolError::Raced(instance));
    }
    Ok(trusted)
}

/// The cluster's trust alone (`{"trust": true}`), for a node whose
/// enrolment was refused or could not be made: proven as an enrolment is,
/// it binds nothing and changes nothing. A revoked instance gets nothing;
/// a bound one is a member (it was when it was bound), so only an unbound
/// one costs a lookup of the cluster.
pub async fn trust(
    request: &EnrolRequest,
    cluster: &impl ClusterNodes,
    bindings: &impl Bindings,
    policy: &Policy,
    now: i64,
) -> Result<Trusted, EnrolError> {
    let Verified { identity, .. } = verify(request, policy, now)?;
    let instance = identity.instance_id.clone();
    match bindings.get(&instance).await.map_err(EnrolError::Bindings)? {
        Some(b) if b.revoked => return Err(EnrolError::Revoked(instance)),
        Some(_) => {}
        None => {
            member_of(&identity, &[], cluster).await?;
        }
    }
    Ok(Trusted {
        instance_id: instance,
        verified_by: identity.verified_by,
    })
}

/// The keys every node's trust lists as `@revoked`: each revoked
/// binding's keys, re-encoded (no comment), each once; never a binding's
/// whose keys are all the canonical set's (a login node's binding from
/// before claims certified no key: revoking that node must not revoke the
/// set; a binding with a key of its own is listed whole, whatever the
/// set's tags say).
pub async fn revoked(bindings: &impl Bindings, set: &impl SetKeys) -> Result<Vec<String>, EnrolError> {
    let of_set = set.fingerprints().await.map_err(EnrolError::Bindings)?;
    let mut out: Vec<String> = Vec::new();
    for lines in bindings.revoked_keys().await.map_err(EnrolError::Bindings)? {
        let keys = lines
            .iter()
            .map(|line| PublicKey::from_openssh(line))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| EnrolError::Bindings(format!("a revoked key does not parse: {e}")))?;
        if !keys.is_empty()
            && keys
                .iter()
                .all(|k| of_set.contains(&k.fingerprint(HashAlg::Sha256).to_string()))
        {
            continue;
        }
        for key in keys {
            let key = PublicKey::from(key.key_data().clone())
                .to_openssh()
                .map_err(|e| EnrolError::Bindings(format!("a revoked key does not encode: {e}")))?;
            if !out.contains(&key) {
                out.push(key);
            }
        }
    }
    Ok(out)
}

/// A value read from AWS, kept for at most `max_age` seconds: the revoked
/// keys and the set's fingerprints, which every answer needs and which
/// change rarely, are read once per period per signer environment, not
/// once per request (a flood of requests is not a flood of scans).
#[derive(Debug)]
pub struct Cache<T> {
    max_age: i64,
    slot: Mutex<Option<(i64, T)>>,
}

impl<T: Clone> Cache<T> {
    /// An empty cache whose values live `max_age` seconds.
    pub fn new(max_age: i64) -> Self {
        Cache {
            max_age,
            slot: Mutex::new(None),
        }
    }

    /// The kept value if it is younger than `max_age` at `now` (Unix
    /// seconds), else `fetch`'s, kept. A failed fetch keeps nothing.
    pub async fn get<E, F>(&self, now: i64, fetch: impl FnOnce() -> F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>>,
    {
        if let Some((at, value)) = self
            .slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            && (0..self.max_age).contains(&(now - at))
        {
            return Ok(value.clone());
        }
        let value = fetch().await?;
        *self.slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((now, value.clone()));
        Ok(value)
    }
}

/// The keys' SHA-256 fingerprints, sorted: what a binding compares.
fn sorted_fingerprints(keys: &[PublicKey]) -> Vec<String> {
    let mut out: Vec<String> = keys
        .iter()
        .map(|k| k.fingerprint(HashAlg::Sha256).to_string())
        .collect();
    out.sort();
    out
}

/// Keys as OpenSSH public lines, with no comment.
fn public_lines(keys: &[PublicKey]) -> Vec<String> {
    keys.iter()
        .filter_map(|k| PublicKey::from(k.key_data().clone()).to_openssh().ok())
        .collect()
}
