//! The enrolment signer (docs/cluster-trust.md): the same
//! `bootstrap`, configured with `HOSTKEYCTL_FUNCTION=enrolment`, answers a
//! node's `EnrolRequest` with host certificates for its own keys
//! ([`hostkeyctl::enrolment::enrol`]). Its configuration says which
//! cluster, CA and bindings table; an event chooses none of them, and the
//! audience a request must name is this function's own ARN.

use std::sync::Arc;

use lambda_runtime::{LambdaEvent, service_fn};

use hostkeyctl::aws::dynamodb::DynamoBindings;
use hostkeyctl::aws::ec2_members::TaggedNodes;
use hostkeyctl::aws::sagemaker::HyperPodNodes;
use hostkeyctl::certificate::{CaKey, Principal};
use hostkeyctl::enrolment::identity::IidKeys;
use hostkeyctl::enrolment::proof::EnrolRequest;
use hostkeyctl::enrolment::{Cache, ClusterNodes, Member, Policy, SetKeys, claim, enrol, revoked, trust};
use hostkeyctl::ids::SecretId;
use hostkeyctl::store::SecretStore;

/// The cluster whose nodes enrol: a HyperPod cluster's name or ARN, a
/// ParallelCluster cluster's name, or an Auto Scaling group's name.
pub const CLUSTER_VAR: &str = "HOSTKEYCTL_ENROL_CLUSTER";
/// What the cluster is: `hyperpod` (the default: DescribeClusterNode),
/// `parallelcluster` (DescribeInstances and the cluster's tag) or
/// `autoscaling` (DescribeInstances and the group's `aws:` tag, which only
/// Auto Scaling writes).
pub const KIND_VAR: &str = "HOSTKEYCTL_ENROL_CLUSTER_KIND";
/// The CA secret.
pub const CA_VAR: &str = "HOSTKEYCTL_ENROL_CA_SECRET_ID";
/// The bindings' DynamoDB table.
pub const TABLE_VAR: &str = "HOSTKEYCTL_ENROL_TABLE";
/// Certificate validity in hours (default 48).
pub const VALIDITY_VAR: &str = "HOSTKEYCTL_ENROL_VALIDITY_HOURS";
/// How long after an instance's start its first enrolment is accepted,
/// in hours (default 1). Raised for a while to enrol nodes that were
/// running before enrolment was set up (docs/cluster-trust.md).
pub const FIRST_WITHIN_VAR: &str = "HOSTKEYCTL_ENROL_FIRST_WITHIN_HOURS";
/// Identity keys for Regions AWS's table lacks: `REGION=SPKI_BASE64`,
/// comma-separated. A Region the table has is refused.
pub const IID_KEYS_VAR: &str = "HOSTKEYCTL_ENROL_IID_KEYS";
/// Identity keys in place of AWS's, same form: a test bed's own signer.
/// Logged at every start, and with every document it verifies.
pub const IID_KEYS_REPLACE_VAR: &str = "HOSTKEYCTL_ENROL_IID_KEYS_REPLACE";
/// The canonical set's secret: its `hostkeyctl:fp:*` tags name the keys
/// no instance is certified for (DescribeSecret alone).
pub const SET_SECRET_VAR: &str = "HOSTKEYCTL_ENROL_SET_SECRET_ID";

/// A renewal sooner than this after the last signing is answered with
/// that signing's certificates: the shipped timer renews every 15
/// minutes, so its renewals are always signed, and a node that asks in a
/// loop costs no more than one signing per 10 minutes.
const RENEW_EVERY_SECS: i64 = 600;
/// How long the revoked keys and the set's fingerprints are kept between
/// reads, in seconds (default 60, at most 900; 0 reads them for every
/// answer): a revocation reaches the nodes' next renewals within that much
/// more, and a flood of requests is at most one scan per period per signer
/// environment.
pub const CACHE_VAR: &str = "HOSTKEYCTL_ENROL_CACHE_SECONDS";

/// What an invocation carries: a node's request; with `"ca": true` a
/// login node's claim (no listener: certified for no key, the cluster's
/// trust alone); with `"trust": true` the trust alone, binding nothing.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Event {
    #[serde(default)]
    request: Option<EnrolRequest>,
    #[serde(default)]
    asked: Vec<String>,
    #[serde(default)]
    ca: bool,
    #[serde(default)]
    trust: bool,
}

/// Where membership comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    HyperPod,
    ParallelCluster,
    AutoScaling,
}

/// The cluster's nodes: HyperPod's, or instances known by a tag.
enum Nodes {
    HyperPod(HyperPodNodes),
    Tagged(TaggedNodes),
}

impl ClusterNodes for Nodes {
    fn membership(&self) -> String {
        match self {
            Nodes::HyperPod(n) => n.membership(),
            Nodes::Tagged(n) => n.membership(),
        }
    }

    async fn member(&self, instance_id: &str) -> Result<Option<Member>, hostkeyctl::aws_error::AwsError> {
        match self {
            Nodes::HyperPod(n) => n.member(instance_id).await,
            Nodes::Tagged(n) => n.member(instance_id).await,
        }
    }
}

/// The signer's settings, read once when the function starts.
struct Settings {
    cluster: String,
    kind: Kind,
    ca: SecretId,
    table: String,
    validity_hours: u64,
    first_within_hours: u64,
    keys: IidKeys,
    set: Option<SecretId>,
    cache_seconds: i64,
}

fn settings(var: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
    let need = |name: &str| {
        var(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("{name} is not set: the enrolment function needs it (docs/cluster-trust.md)"))
    };
    let hours = |name: &str, default: u64, most: u64| match var(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|h| (1..=most).contains(h))
            .ok_or_else(|| format!("{name} must be 1 to {most} hours")),
    };
    let validity_hours = hours(VALIDITY_VAR, 48, 24 * 30)?;
    let first_within_hours = hours(FIRST_WITHIN_VAR, 1, 24 * 366)?;
    let mut keys = IidKeys::aws();
    for (name, replace) in [(IID_KEYS_REPLACE_VAR, true), (IID_KEYS_VAR, false)] {
        for pair in var(name)
            .unwrap_or_default()
            .split(',')
            .filter(|p| !p.trim().is_empty())
        {
            let (region, spki) = pair
                .split_once('=')
                .ok_or_else(|| format!("{name}: {} is not REGION=SPKI", hostkeyctl::escape::escape(pair)))?;
            let added = if replace {
                keys.replace(region.trim(), spki)
            } else {
                keys.add(region.trim(), spki)
            };
            added.map_err(|e| format!("{name}: {e}"))?;
        }
    }
    let cache_seconds = match var(CACHE_VAR) {
        None => 60,
        Some(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|s| (0..=900).contains(s))
            .ok_or_else(|| format!("{CACHE_VAR} must be 0 to 900 seconds"))?,
    };
    let set = var(SET_SECRET_VAR)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .map(|v| SecretId::parse(&v).map_err(|e| format!("{SET_SECRET_VAR}: {e}")))
        .transpose()?;
    let kind = match var(KIND_VAR).as_deref().map(str::trim) {
        None | Some("" | "hyperpod") => Kind::HyperPod,
        Some("parallelcluster") => Kind::ParallelCluster,
        Some("autoscaling") => Kind::AutoScaling,
        Some(other) => {
            return Err(format!(
                "{KIND_VAR} is {}: it is hyperpod, parallelcluster or autoscaling",
                hostkeyctl::escape::escape(other)
            ));
        }
    };
    Ok(Settings {
        cluster: need(CLUSTER_VAR)?,
        kind,
        ca: SecretId::parse(&need(CA_VAR)?).map_err(|e| format!("{CA_VAR}: {e}"))?,
        table: need(TABLE_VAR)?,
        validity_hours,
        first_within_hours,
        keys,
        set,
        cache_seconds,
    })
}

/// The canonical set's keys, from its secret's tags (module
/// documentation of [`hostkeyctl::enrolment::SetKeys`]), kept a minute.
struct SetTags {
    store: hostkeyctl::aws::SecretsManagerStore,
    secret: Option<SecretId>,
    cache: Cache<Vec<String>>,
    last_good: std::sync::Mutex<Vec<String>>,
}

impl SetKeys for SetTags {
    /// Never fails an answer: a set that cannot be read (denied, or tags
    /// that do not parse: anyone with TagResource on the secret could
    /// write them) is logged and the last good reading kept. Claims, not
    /// this list, are what keep a login node's names from the set.
    async fn fingerprints(&self) -> Result<Vec<String>, String> {
        let Some(secret) = &self.secret else {
            return Ok(Vec::new());
        };
        let now = i64::try_from(hostkeyctl::certificate::now_unix()).unwrap_or(i64::MAX);
        let read = self
            .cache
            .get(now, || async {
                let info = self.store.describe(secret).await.map_err(|e| e.to_string())?;
                let tagged = info.tagged_fingerprints().map_err(|e| e.to_string())?;
                Ok::<_, String>(
                    tagged
                        .map(|(_, fps)| fps.into_iter().map(|(_, fp)| fp.to_string()).collect())
                        .unwrap_or_default(),
                )
            })
            .await;
        let mut last = self.last_good.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match read {
            Ok(fps) => {
                last.clone_from(&fps);
                Ok(fps)
            }
            Err(e) => {
                eprintln!(
                    "the canonical set's fingerprints ({secret}) could not be read, the last good reading ({} keys) stands: {}",
                    last.len(),
                    hostkeyctl::escape::escape_lines(&e)
                );
                Ok(last.clone())
            }
        }
    }
}

/// What every answer is made from, for the function's life.
struct Signer {
    settings: Settings,
    region: String,
    ca: CaKey,
    cluster: Nodes,
    bindings: DynamoBindings,
    set: SetTags,
    revoked: Cache<Vec<String>>,
}

/// Runs the enrolment function until the runtime stops it.
pub fn main(
    runtime: &tokio::runtime::Runtime,
    usage: impl Fn(String) -> std::process::ExitCode,
) -> std::process::ExitCode {
    let settings = match settings(|v| std::env::var(v).ok()) {
        Ok(s) => s,
        Err(message) => return usage(message),
    };
    let started = runtime.block_on(async {
        let config = hostkeyctl::aws::load_config(&hostkeyctl::aws::AwsArgs {
            region: None,
            profile: None,
            endpoint_url: None,
            max_attempts: 5,
        })
        .await
        .map_err(|e| e.to_string())?;
        let region = config.region().map(ToString::to_string).ok_or("no AWS region")?;
        let ca = hostkeyctl::aws::SecretsManagerStore::new(&config)
            .get_ca(&settings.ca)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((config, region, ca.key))
    });
    let (config, region, ca) = match started {
        Ok(s) => s,
        Err(message) => return usage(message),
    };
    let cluster = match settings.kind {
        Kind::HyperPod => Nodes::HyperPod(HyperPodNodes::new(&config, &settings.cluster)),
        Kind::ParallelCluster => Nodes::Tagged(TaggedNodes::parallelcluster(&config, &settings.cluster)),
        Kind::AutoScaling => Nodes::Tagged(TaggedNodes::auto_scaling_group(&config, &settings.cluster)),
    };
    let bindings = DynamoBindings::new(&config, &settings.table);
    for (region, source) in settings.keys.configured() {
        eprintln!("identity documents of {region} are verified with {source}");
    }
    match &settings.set {
        Some(secret) => eprintln!("the canonical set's keys ({secret}'s hostkeyctl:fp:* tags) are never certified"),
        None => eprintln!(
            "{SET_SECRET_VAR} is not set: the signer cannot refuse the canonical set's keys by name (login nodes' claims still certify none)"
        ),
    }
    let cache_seconds = settings.cache_seconds;
    let set = SetTags {
        store: hostkeyctl::aws::SecretsManagerStore::new(&config),
        secret: settings.set.clone(),
        cache: Cache::new(cache_seconds),
        last_good: std::sync::Mutex::new(Vec::new()),
    };
    // Read once at start: a wrong secret or a missing grant shows in the
    // first log lines, not only at the first signing.
    if let Some(secret) = &settings.set
        && let Ok(fps) = runtime.block_on(set.fingerprints())
    {
        eprintln!("the canonical set ({secret}): {} key(s) known", fps.len());
    }
    let shared = Arc::new(Signer {
        settings,
        region,
        ca,
        cluster,
        bindings,
        set,
        revoked: Cache::new(cache_seconds),
    });
    let handler = service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let shared = shared.clone();
        async move {
            answer(&shared, event).await.map_err(|message| {
                eprintln!("refused: {}", hostkeyctl::escape::escape_lines(&message));
                lambda_runtime::Error::from(message)
            })
        }
    });
    match runtime.block_on(lambda_runtime::run(handler)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => usage(format!("the Lambda runtime stopped: {e}")),
    }
}

async fn answer(signer: &Signer, event: LambdaEvent<serde_json::Value>) -> Result<serde_json::Value, String> {
    let Signer {
        settings,
        region,
        ca,
        cluster,
        bindings,
        set,
        revoked: revoked_cache,
    } = signer;
    let audience = event.context.invoked_function_arn.clone();
    let parsed: Event = serde_json::from_value(event.payload).map_err(|e| format!("not an enrolment request: {e}"))?;
    let Some(request) = parsed.request else {
        return Err("not an enrolment request: it has no request".to_owned());
    };
    let asked = parsed
        .asked
        .iter()
        .map(|p| Principal::parse(p))
        .collect::<Result<Vec<_>, _>>()?;
    let policy = Policy {
        keys: settings.keys.clone(),
        region: region.to_owned(),
        audience,
        validity: settings.validity_hours * 3_600,
        skew: 300,
        first_within: i64::try_from(settings.first_within_hours * 3_600).unwrap_or(i64::MAX),
        renew_every: RENEW_EVERY_SECS,
    };
    let now = i64::try_from(hostkeyctl::certificate::now_unix()).unwrap_or(i64::MAX);
    // Read after a request is accepted, never for a refused one.
    let revoked_keys = || async {
        revoked_cache
            .get(now, || async {
                revoked(bindings, set).await.map_err(|e| e.to_string())
            })
            .await
    };
    if parsed.ca || parsed.trust {
        if !asked.is_empty() {
            return Err("a claim or a request for the trust asks for no names".to_owned());
        }
        if parsed.ca && parsed.trust {
            return Err("a request is a claim (ca) or for the trust (trust), not both".to_owned());
        }
        let trusted = if parsed.ca {
            claim(&request, cluster, bindings, &policy, now).await
        } else {
            trust(&request, cluster, bindings, &policy, now).await
        }
        .map_err(|e| e.to_string())?;
        let what = if parsed.ca {
            "claimed (a login node: certified for no key)"
        } else {
            "gave the trust to"
        };
        eprintln!(
            "{what} {} (its identity document verified with {})",
            trusted.instance_id, trusted.verified_by
        );
        let revoked = revoked_keys().await?;
        return Ok(serde_json::json!({ "ca": ca.public_line(), "revoked": revoked }));
    }
    let enrolled = enrol(&request, &asked, cluster, bindings, set, ca, &policy, now)
        .await
        .map_err(|e| e.to_string())?;
    eprintln!(
        "{} {} for {} (its identity document verified with {})",
        if enrolled.signed {
            "enrolled"
        } else {
            "answered from its binding (signed less than 10 minutes ago)"
        },
        enrolled.instance_id,
        enrolled
            .principals
            .iter()
            .map(Principal::as_str)
            .collect::<Vec<_>>()
            .join(","),
        enrolled.verified_by
    );
    // Every node learns the revoked keys at each renewal.
    let revoked = revoked_keys().await?;
    Ok(serde_json::json!({
        "instance_id": enrolled.instance_id,
        "principals": enrolled.principals,
        "certificates": enrolled.certificates.iter().map(hostkeyctl::certificate::certificate_line).collect::<Vec<_>>(),
        "revoked": revoked,
    }))
}

#[cfg(test)]
mod tests {
    use super::{
        CA_VAR, CLUSTER_VAR, FIRST_WITHIN_VAR, IID_KEYS_REPLACE_VAR, IID_KEYS_VAR, KIND_VAR, Kind, TABLE_VAR,
        VALIDITY_VAR, settings,
    };

    #[test]
    fn the_signer_is_configured_whole_or_not_at_all() {
        let with = |pairs: &[(&str, &str)]| {
            let owned: Vec<(String, String)> = pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
            settings(move |k| owned.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
        };
        let base = [
            (CLUSTER_VAR, "hp"),
            (CA_VAR, "hostkeyctl-ca/hp"),
            (TABLE_VAR, "hostkeyctl-enrolment"),
        ];
        assert!(with(&base).is_ok());
        let missing = with(&base[..2]).err().unwrap();
        assert!(missing.contains(TABLE_VAR), "{missing}");
        let mut long = base.to_vec();
        long.push((VALIDITY_VAR, "10000"));
        assert!(with(&long).err().unwrap().contains("1 to 720"));
        let mut window = base.to_vec();
        window.push((FIRST_WITHIN_VAR, "0"));
        assert!(with(&window).err().unwrap().contains("1 to 8784"));
        window.pop();
        window.push((FIRST_WITHIN_VAR, "720"));
        assert_eq!(with(&window).ok().unwrap().first_within_hours, 720);
        assert_eq!(with(&base).ok().unwrap().first_within_hours, 1);
        assert_eq!(with(&base).ok().unwrap().kind, Kind::HyperPod);
        let mut kind = base.to_vec();
        kind.push((KIND_VAR, "parallelcluster"));
        assert_eq!(with(&kind).ok().unwrap().kind, Kind::ParallelCluster);
        kind.pop();
        kind.push((KIND_VAR, "slurm"));
        assert!(
            with(&kind)
                .err()
                .unwrap()
                .contains("hyperpod, parallelcluster or autoscaling")
        );
        kind.pop();
        kind.push((KIND_VAR, "autoscaling"));
        assert_eq!(with(&kind).ok().unwrap().kind, Kind::AutoScaling);
        let mut bad = base.to_vec();
        bad.push((IID_KEYS_VAR, "us-east-1"));
        assert!(with(&bad).err().unwrap().contains("REGION=SPKI"));
        // A key for a Region AWS's table holds is refused, named; the same
        // key in place of AWS's needs its own, explicit setting.
        let spki = "MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQCHvRjf/0kStpJ248khtIaN8qkDN3tkw4VjvA9nvPl2anJO+eIBUqPfQG09kZlwpWpmyO8bGB2RWqWxCwuB/dcnIob6w420k9WY5C0IIGtDRNauN3kuvGXkw3HEnF0EjYr0pcyWUvByWY4KswZV42X7Y7XSS13hOIcL6NLA+H94/QIDAQAB";
        let over = format!("us-east-1={spki}");
        let mut known = base.to_vec();
        known.push((IID_KEYS_VAR, over.as_str()));
        let said = with(&known).err().unwrap();
        assert!(
            said.contains(IID_KEYS_VAR) && said.contains("may only add a Region"),
            "{said}"
        );
        let mut replaced = base.to_vec();
        replaced.push((IID_KEYS_REPLACE_VAR, over.as_str()));
        let keys = with(&replaced).ok().unwrap().keys;
        assert_eq!(
            keys.configured(),
            [(
                "us-east-1".to_owned(),
                hostkeyctl::enrolment::identity::KeySource::Replaced
            )]
        );
        let added = format!("mars-1={spki}");
        let mut new_region = base.to_vec();
        new_region.push((IID_KEYS_VAR, added.as_str()));
        assert!(with(&new_region).is_ok());
        assert_eq!(with(&base).ok().unwrap().validity_hours, 48);
    }
}
