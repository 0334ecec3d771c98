//! Enrolment: a cluster node proves which instance it is and receives host
//! certificates for its own keys (which never leave it), for the names AWS
//! gives that instance, never for names it asks for.
//!
//! docs/cluster-trust.md has the design, the checks and what they prove.

#[cfg(feature = "admin")]
pub mod admin;
pub mod configure;
pub mod host;
pub mod identity;
pub mod listener;
mod listener_config;
mod listener_service;
pub mod node;
pub mod proof;

use std::net::IpAddr;

use ssh_key::{Certificate, HashAlg};

use crate::aws_error::AwsError;
use crate::certificate::{CaKey, Principal, SignError, SignRequest, sign_keys};
use identity::{IdentityError, IidKeys};
use proof::{EnrolRequest, ProofError};

/// A node of the cluster, as AWS reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its instance id.
    pub instance_id: String,
    /// Its primary private address.
    pub private_ip: IpAddr,
    /// Every name its certificates are for: the private DNS name, the
    /// address, the cluster's node name.
    pub names: Vec<Principal>,
}

/// The names AWS gives a node: its private DNS name
/// (`ip-10-1-0-11.ec2.internal`), the first label of it (the host name,
/// and the Slurm node name on HyperPod), and its address. Only names
/// that are valid principals.
pub fn names_of(private_dns: Option<&str>, ip: IpAddr) -> Vec<Principal> {
    let mut out: Vec<Principal> = Vec::new();
    if let Some(dns) = private_dns.map(str::trim).filter(|d| !d.is_empty()) {
        for name in [dns, dns.split('.').next().unwrap_or(dns)] {
            if let Ok(p) = Principal::parse(&name.to_ascii_lowercase())
                && !out.contains(&p)
            {
                out.push(p);
            }
        }
    }
    if let Ok(p) = Principal::parse(&ip.to_string()) {
        out.push(p);
    }
    out
}

/// The cluster's nodes (HyperPod's ListClusterNodes, ParallelCluster's tags).
pub trait ClusterNodes: Sync {
    /// The node that is instance `instance_id`, if it is one.
    fn member(&self, instance_id: &str) -> impl Future<Output = Result<Option<Member>, AwsError>> + Send;
    /// How membership is decided, as a refusal names it
    /// (`EC2 tag aws:autoscaling:groupName=fleet`).
    fn membership(&self) -> String;
}

/// What the signer remembers of an instance: the keys it first enrolled
/// (trust on first use, as SPIRE and Teleport do) and the last request time
/// it accepted (a replay is never later).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Binding {
    /// SHA-256 fingerprints of its host keys, sorted.
    pub fingerprints: Vec<String>,
    /// The last `issued_at_ms` accepted (Unix milliseconds).
    pub last_issued_at_ms: i64,
    /// Its host keys (OpenSSH public lines): what a revocation names.
    #[serde(default)]
    pub host_keys: Vec<String>,
    /// Revoked by an admin (`hostkeyctl enrolment revoke`): it enrols no
    /// more, and every node's trust lists its keys as `@revoked`.
    #[serde(default)]
    pub revoked: bool,
}

/// Where bindings are kept, with a compare and swap.
pub trait Bindings: Sync {
    /// The binding of `instance_id`.
    fn get(&self, instance_id: &str) -> impl Future<Output = Result<Option<Binding>, String>> + Send;
    /// Stores `binding` if the instance's binding is still `previous`;
    /// `false` when another enrolment changed it first.
    fn put(
        &self,
        instance_id: &str,
        binding: &Binding,
        previous: Option<&Binding>,
    ) -> impl Future<Output = Result<bool, String>> + Send;
    /// The host keys of every revoked binding.
    fn revoked_keys(&self) -> impl Future<Output = Result<Vec<String>, String>> + Send;
}

/// The keys every node's trust lists as `@revoked`: each revoked
/// binding's keys, re-encoded (no comment), each once.
pub async fn revoked(bindings: &impl Bindings) -> Result<Vec<String>, EnrolError> {
    let mut out: Vec<String> = Vec::new();
    for line in bindings.revoked_keys().await.map_err(EnrolError::Bindings)? {
        let key = ssh_key::PublicKey::from_openssh(&line)
            .and_then(|k| ssh_key::PublicKey::from(k.key_data().clone()).to_openssh())
            .map_err(|e| EnrolError::Bindings(format!("a revoked key does not parse: {e}")))?;
        if !out.contains(&key) {
            out.push(key);
        }
    }
    Ok(out)
}

/// The signer's settings.
#[derive(Clone, Debug)]
pub struct Policy {
    /// AWS's identity keys (and a test bed's).
    pub keys: IidKeys,
    /// The cluster's Region: a document of another is refused.
    pub region: String,
    /// This signer (the function's ARN): a request for another is refused.
    pub audience: String,
    /// Certificate validity, in seconds.
    pub validity: u64,
    /// How far a request's time may be from the signer's, in seconds.
    pub skew: i64,
    /// How long after an instance started its first enrolment is accepted,
    /// in seconds: later, a stolen document could enrol a thief's keys
    /// first.
    pub first_within: i64,
}

/// What the signer gave.
#[derive(Debug)]
pub struct Enrolled {
    /// The instance.
    pub instance_id: String,
    /// The names certified (AWS's).
    pub principals: Vec<Principal>,
    /// One certificate per host key.
    pub certificates: Vec<Certificate>,
}

/// Why nothing was signed. Each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum EnrolError {
    /// The identity document.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The proof of the keys.
    #[error(transparent)]
    Proof(#[from] ProofError),
    /// Meant for another signer.
    #[error("the request is for signer {0}, not this one")]
    Audience(String),
    /// Too old or in the future.
    #[error(
        "the request was made at {issued_at} and the signer's time is {now}: more than {skew} s apart (check the node's clock)"
    )]
    Stale {
        /// The request's time (Unix seconds).
        issued_at: i64,
        /// The signer's.
        now: i64,
        /// The limit.
        skew: i64,
    },
    /// Another Region's instance.
    #[error("instance {instance} is in {region}, and this cluster's signer serves {expected}")]
    Region {
        /// The instance.
        instance: String,
        /// Its Region.
        region: String,
        /// The signer's.
        expected: String,
    },
    /// Not a node of the cluster.
    #[error(
        "instance {instance} is no node of this cluster ({membership}): if it should be one, check the signer's HOSTKEYCTL_ENROL_CLUSTER and HOSTKEYCTL_ENROL_CLUSTER_KIND (the stack's EnrolmentCluster and EnrolmentClusterKind)"
    )]
    NotMember {
        /// The instance.
        instance: String,
        /// How membership is decided.
        membership: String,
    },
    /// The document's address is not the node's.
    #[error("instance {instance} reports address {document}, and the cluster says {cluster}")]
    Address {
        /// The instance.
        instance: String,
        /// The document's.
        document: IpAddr,
        /// The cluster's.
        cluster: IpAddr,
    },
    /// Names the instance does not have.
    #[error(
        "instance {instance} asked for {asked:?}, which are not its names ({names:?}); certificates carry only the names AWS gives it"
    )]
    Principals {
        /// The instance.
        instance: String,
        /// The extra names.
        asked: Vec<String>,
        /// Its names.
        names: Vec<String>,
    },
    /// Other keys than the instance first enrolled.
    #[error(
        "instance {0} enrolled other host keys before: a node keeps its keys; a replaced node is a new instance. If this node's keys really changed, remove its binding first (docs/cluster-trust.md, \"Bindings\")"
    )]
    Bound(String),
    /// First enrolment too long after the instance started.
    #[error(
        "instance {instance} started {age} s ago and never enrolled: a first enrolment is accepted only within {limit} s of the start: enrol nodes at provisioning; to enrol nodes that were running before, raise HOSTKEYCTL_ENROL_FIRST_WITHIN_HOURS for a while (docs/cluster-trust.md)"
    )]
    LateFirst {
        /// The instance.
        instance: String,
        /// Seconds since it started.
        age: i64,
        /// The limit.
        limit: i64,
    },
    /// Revoked by an admin.
    #[error(
        "instance {0} is revoked (hostkeyctl enrolment revoke): it enrols no more; a replacement is a new instance"
    )]
    Revoked(String),
    /// A request not later than one already accepted.
    #[error(
        "a request made at {issued_at_ms} for instance {instance} is not later than the last accepted ({last}): a replay"
    )]
    Replay {
        /// The instance.
        instance: String,
        /// This request's time.
        issued_at_ms: i64,
        /// The last accepted.
        last: i64,
    },
    /// Another enrolment of the instance won the race.
    #[error("another enrolment of instance {0} ran at the same time; enrol again")]
    Raced(String),
    /// AWS could not be asked.
    #[error(transparent)]
    Aws(#[from] AwsError),
    /// The bindings could not be read or written.
    #[error("the enrolment bindings: {0}")]
    Bindings(String),
    /// Signing failed.
    #[error(transparent)]
    Sign(#[from] SignError),
}

/// What a request proves, before the bindings are read: the node's keys,
/// its identity and the cluster's record of it.
struct Proven {
    keys: Vec<ssh_key::PublicKey>,
    identity: identity::Identity,
    member: Member,
}

/// The checks that need no binding (module documentation), in order.
async fn prove(
    request: &EnrolRequest,
    asked: &[Principal],
    cluster: &impl ClusterNodes,
    policy: &Policy,
    now: i64,
) -> Result<Proven, EnrolError> {
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
    let keys = proof::check(request)?;
    let instance = identity.instance_id.clone();
    if identity.region != policy.region {
        return Err(EnrolError::Region {
            instance,
            region: identity.region,
            expected: policy.region.clone(),
        });
    }
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
    Ok(Proven { keys, identity, member })
}

/// Decides `request` and signs, or says why not (nothing signed, nothing
/// bound). `asked` are names the node expects: any that AWS does not give
/// it refuses the request, so a misconfigured node learns it at once.
pub async fn enrol(
    request: &EnrolRequest,
    asked: &[Principal],
    cluster: &impl ClusterNodes,
    bindings: &impl Bindings,
    ca: &CaKey,
    policy: &Policy,
    now: i64,
) -> Result<Enrolled, EnrolError> {
    let Proven { keys, identity, member } = prove(request, asked, cluster, policy, now).await?;
    let instance = identity.instance_id.clone();
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
        Some(b) if b.fingerprints != fingerprints => return Err(EnrolError::Bound(instance)),
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
        key_id: format!("hostkeyctl enrol instance={instance}"),
    };
    let certificates: Vec<Certificate> = sign_keys(ca, &keys, &sign)?.into_iter().map(|(_, c)| c).collect();
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

/// A login node's claim (`{"ca": true}` with its request): proven as an
/// enrolment is, it binds an unbound instance to the keys it serves (the
/// set's) and signs nothing. Its instance then enrols no other keys: a
/// user who can read the login node's IMDS cannot get certificates for
/// its names. A bound instance's claim is accepted as it is: the set
/// rotates, and a claim certifies nothing. Returns the instance.
pub async fn claim(
    request: &EnrolRequest,
    cluster: &impl ClusterNodes,
    bindings: &impl Bindings,
    policy: &Policy,
    now: i64,
) -> Result<String, EnrolError> {
    let Proven { keys, identity, .. } = prove(request, &[], cluster, policy, now).await?;
    let instance = identity.instance_id.clone();
    match bindings.get(&instance).await.map_err(EnrolError::Bindings)? {
        Some(b) if b.revoked => return Err(EnrolError::Revoked(instance)),
        Some(_) => return Ok(instance),
        None => {}
    }
    if now - identity.pending_time > policy.first_within {
        return Err(EnrolError::LateFirst {
            instance,
            age: now - identity.pending_time,
            limit: policy.first_within,
        });
    }
    let fingerprints = sorted_fingerprints(&keys);
    let binding = Binding {
        fingerprints,
        last_issued_at_ms: request.issued_at_ms,
        host_keys: public_lines(&keys),
        revoked: false,
    };
    if !bindings
        .put(&instance, &binding, None)
        .await
        .map_err(EnrolError::Bindings)?
    {
        return Err(EnrolError::Raced(instance));
    }
    Ok(instance)
}

/// The keys' SHA-256 fingerprints, sorted: what a binding compares.
fn sorted_fingerprints(keys: &[ssh_key::PublicKey]) -> Vec<String> {
    let mut out: Vec<String> = keys
        .iter()
        .map(|k| k.fingerprint(HashAlg::Sha256).to_string())
        .collect();
    out.sort();
    out
}

/// Keys as OpenSSH public lines, with no comment.
fn public_lines(keys: &[ssh_key::PublicKey]) -> Vec<String> {
    keys.iter()
        .filter_map(|k| ssh_key::PublicKey::from(k.key_data().clone()).to_openssh().ok())
        .collect()
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_host;
