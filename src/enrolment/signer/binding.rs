//! What enrolment holds and decides with: a cluster's members, the bindings
//! of instances to keys, the signing policy, and why nothing was signed.

use crate::enrolment::*;

use std::net::IpAddr;

use ssh_key::Certificate;

use crate::aws_error::AwsError;
use crate::certificate::{Principal, SignError};

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
    /// The machine image it runs, when the cluster says (HyperPod's
    /// `CurrentImageId`): a patch that replaced its root volume changes it.
    pub image_id: Option<String>,
    /// When the cluster last updated its software (HyperPod's
    /// `LastSoftwareUpdateTime`, Unix seconds), when it says.
    pub software_updated_at: Option<i64>,
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
/// (trust on first use, as SPIRE and Teleport do), the last request time
/// it accepted (a replay is never later), and the certificates it last
/// signed for them (answered again, without a Sign, to a renewal that
/// comes sooner than [`Policy::renew_every`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Binding {
    /// SHA-256 fingerprints of its host keys, sorted; of a claim, the
    /// keys that made it (the set the login node served then).
    pub fingerprints: Vec<String>,
    /// The last `issued_at_ms` accepted (Unix milliseconds).
    pub last_issued_at_ms: i64,
    /// Its certified host keys (OpenSSH public lines): what a revocation
    /// names. A claim's are none: it was certified for no key.
    #[serde(default)]
    pub host_keys: Vec<String>,
    /// Revoked by an admin (`hostkeyctl enrolment revoke`): it enrols no
    /// more, and every node's trust lists its keys as `@revoked`.
    #[serde(default)]
    pub revoked: bool,
    /// A login node's claim (`enroll --login-node` without a listener):
    /// its instance is taken, and no key is ever certified for it. A login
    /// node's certificates are for keys of its own, on its listener.
    #[serde(default)]
    pub claim: bool,
    /// The certificates last signed for these keys (OpenSSH lines).
    #[serde(default)]
    pub certificates: Vec<String>,
    /// When they were signed (Unix seconds; 0: none kept).
    #[serde(default)]
    pub certified_at: i64,
    /// When the last signing started (Unix seconds): until it ends, or a
    /// minute passes, no other request of the instance starts one.
    #[serde(default)]
    pub signing_at: i64,
    /// The machine image the cluster reported when these keys were last
    /// signed for: a later image (a patch that replaced the root volume,
    /// and with it the keys) lets the node bind new keys once.
    #[serde(default)]
    pub image_id: Option<String>,
    /// When a request with other keys last had the cluster's record looked
    /// up for a patch (Unix seconds): at most once a minute an instance.
    #[serde(default)]
    pub rekey_looked_at: i64,
}

/// Where bindings are kept, with a compare and swap.
pub trait Bindings: Sync {
    /// The binding of `instance_id`.
    fn get(&self, instance_id: &str) -> impl Future<Output = Result<Option<Binding>, String>> + Send;
    /// Stores `binding` if the instance's binding is still `previous`;
    /// `false` when another enrolment (or a revocation) changed it first.
    fn put(
        &self,
        instance_id: &str,
        binding: &Binding,
        previous: Option<&Binding>,
    ) -> impl Future<Output = Result<bool, String>> + Send;
    /// The host keys of each revoked binding.
    fn revoked_keys(&self) -> impl Future<Output = Result<Vec<Vec<String>>, String>> + Send;
}

/// The canonical set's keys as the signer knows them: the public
/// fingerprints `hostkeyctl` keeps in the set's secret's tags
/// (`hostkeyctl:fp:*`, written by `init` and every promotion, readable
/// with `DescribeSecret` alone: never a private key). The signer never
/// certifies them, and never lists them as revoked: they are every login
/// node's, for users behind the load balancer.
pub trait SetKeys: Sync {
    /// Their SHA-256 fingerprints (empty when no set is configured).
    fn fingerprints(&self) -> impl Future<Output = Result<Vec<String>, String>> + Send;
}

/// No canonical set configured: nothing to refuse by it.
impl SetKeys for () {
    async fn fingerprints(&self) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
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
    /// A renewal sooner than this after the last signing (seconds) is
    /// answered with the certificates of that signing: at most one set of
    /// KMS signatures per instance per period, however often it asks.
    pub renew_every: i64,
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
    /// Signed for this request (`false`: the binding's certificates of a
    /// signing less than [`Policy::renew_every`] ago, no KMS call).
    pub signed: bool,
    /// Which key verified the identity document.
    pub verified_by: identity::KeySource,
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
        "instance {0} enrolled other host keys before: a node keeps its keys; a replaced node is a new instance; a patched one (its root volume replaced) binds new keys once, within the first-enrolment window, when the cluster reports it on a new image. If this node's keys really changed otherwise, remove its binding first (docs/cluster-trust.md, \"Bindings\")"
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
    /// A login node's claim: certified for no key.
    #[error(
        "instance {0} is a login node that took the cluster's trust alone (its claim): it is certified for no key. To serve the cluster from a listener of its own (enroll --cluster-port), remove its binding first and enrol it within the first-enrolment window (docs/cluster-trust.md, \"Bindings\")"
    )]
    Claimed(String),
    /// Keys of the canonical set, which every login node serves to users.
    #[error(
        "instance {instance} asked certificates for {fingerprints:?}, keys of the canonical set that every login node serves to users behind the load balancer: a login node is certified for keys of its own, on its listener for the cluster (enroll --login-node --cluster-port); nothing was signed or bound"
    )]
    SetKeys {
        /// The instance.
        instance: String,
        /// The set's keys it presented.
        fingerprints: Vec<String>,
    },
    /// A login node's claim over a binding that certifies keys.
    #[error(
        "instance {0} holds certificates for keys that are not this login node's (a binding made before claims certified no key, for a set rotated since; or someone else's enrolment with its identity document): a login node without a listener is certified for no key. Remove its binding (docs/cluster-trust.md, \"Bindings\"); its next run claims it again"
    )]
    ClaimOverBinding(String),
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

// Its flows' tests are the memory tier's (tests/it/memory/enrolment*.rs),
// over src/testing's doubles.
