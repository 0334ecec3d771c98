//! `hostkeyctl audit`: what clients see, against the expected set.

mod print;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::audit::{self, Endpoint, Expected, LbReport, NodeReport, ScanPolicy, Scanner, Verdict};
use crate::aws;
use crate::certificate::CertVerdict;
use crate::cli::{AuditArgs, GlobalArgs};
use crate::commands::{discovery_failure, store_failure};
use crate::discovery::{self, Ec2Fleet, Fleet};
use crate::dispatch::{CommandSpec, Dispatcher, SsmDispatcher};
use crate::exit::{Failure, Status};
use crate::hostport::HostPort;
use crate::install::InstallReport;
use crate::output::escape;
use crate::output::{self, OutputFormat};
use crate::scan::ScanAlgorithm;
use crate::shell::CommandLine;
use crate::store::{STAGE_CURRENT, SecretStore, SecretsManagerStore, StoreError, VersionSelector, stage};

/// The `--output json` document (schema: docs/audit.md).
#[derive(Serialize)]
struct AuditReport {
    /// `hostkeyctl-audit/v1`.
    schema: &'static str,
    /// Where the expected set came from.
    expected_source: String,
    /// The expected set.
    expected: Expected,
    /// Per node.
    nodes: Vec<NodeReport>,
    /// Through the load balancer.
    #[serde(skip_serializing_if = "Option::is_none")]
    lb: Option<LbReport>,
    /// With --via-ssm: `install --check` per instance.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    on_disk: BTreeMap<String, OnDisk>,
    /// With --via-ssm: the SSM document the check went out with.
    #[serde(skip_serializing_if = "Option::is_none")]
    on_disk_document: Option<crate::ssm_document::SentDocument>,
    /// Counts by verdict.
    summary: BTreeMap<String, usize>,
    /// The exit code.
    exit_code: u8,
}

/// What `install --check` on one node said through SSM.
#[derive(Serialize)]
#[serde(untagged)]
enum OnDisk {
    /// The node's report.
    Report(Box<InstallReport>),
    /// No report: SSM or the node failed; neither match nor drift.
    Unknown {
        /// Always `unknown`.
        result: &'static str,
        /// SSM's status.
        status: String,
        /// Why, escaped.
        error: String,
    },
}

impl OnDisk {
    fn result(&self) -> &str {
        match self {
            OnDisk::Report(r) => r.result.as_str(),
            OnDisk::Unknown { result, .. } => result,
        }
    }
}

/// The expected set from a known_hosts file: one key per type.
fn expected_from_known_hosts(path: &std::path::Path) -> Result<(Expected, String), Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Failure::usage(anyhow::anyhow!(
            "cannot read {} as a known_hosts file: {e}",
            path.display()
        ))
    })?;
    expected_from_known_hosts_text(&text, path)
}

/// The expected set from a known_hosts file's text (the parser of outside
/// data behind `--known-hosts`).
pub fn expected_from_known_hosts_text(text: &str, path: &std::path::Path) -> Result<(Expected, String), Failure> {
    let entries = ssh_key::known_hosts::KnownHosts::new(text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Failure::usage(anyhow::anyhow!(
                "cannot read {} as a known_hosts file: {e}",
                path.display()
            ))
        })?;
    let mut by_type = BTreeMap::new();
    for entry in entries {
        if entry.marker().is_some() {
            continue;
        }
        let key = entry.public_key();
        let name = key.algorithm().as_str().to_owned();
        let Some(algorithm) = ScanAlgorithm::ALL.into_iter().find(|a| a.key_type() == name) else {
            continue;
        };
        let fp = crate::keyset::fingerprint_of(key);
        if let Some(other) = by_type.insert(algorithm, fp.clone())
            && other != fp
        {
            return Err(Failure::usage(anyhow::anyhow!(
                "{} holds two different {name} keys ({other} and {fp}); give a file with the one expected key per type",
                path.display()
            )));
        }
    }
    if by_type.is_empty() {
        return Err(Failure::usage(anyhow::anyhow!("{} holds no host key", path.display())));
    }
    Ok((
        Expected {
            by_type,
            untyped: vec![],
        },
        format!("known_hosts file {}", path.display()),
    ))
}

async fn expected_set(args: &AuditArgs, config: Option<&aws_config::SdkConfig>) -> Result<(Expected, String), Failure> {
    if let Some(secret) = &args.secret_id {
        let config = config.ok_or_else(|| Failure::usage(anyhow::anyhow!("no AWS configuration")))?;
        let store = SecretsManagerStore::new(config);
        let explicit = match (&args.stage, &args.version_id) {
            (_, Some(v)) => Some(VersionSelector::VersionId(v.clone())),
            (Some(s), None) => Some(VersionSelector::Stage(s.clone())),
            (None, None) => None,
        };
        if explicit.is_none() {
            // Public fingerprints from the tags: DescribeSecret only.
            let info = store.describe(secret).await.map_err(store_failure)?;
            let current = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
            let tagged = info
                .tagged_fingerprints()
                .map_err(|e| Failure::usage(StoreError::from(e)))?;
            if let Some((version, fps)) = tagged
                && Some(&version) == current.as_ref()
                && !fps.is_empty()
            {
                let by_type = fps
                    .into_iter()
                    .map(|(a, fp)| (ScanAlgorithm::for_managed(a), fp))
                    .collect();
                return Ok((
                    Expected {
                        by_type,
                        untyped: vec![],
                    },
                    format!("tags of {} (version {version}, AWSCURRENT)", info.arn),
                ));
            }
            tracing::warn!(
                "the fingerprint tags of {secret} are missing or not of the AWSCURRENT version; reading the secret value instead"
            );
        }
        let selector = explicit.unwrap_or_else(|| VersionSelector::Stage(stage(STAGE_CURRENT)));
        let version = store.get(secret, &selector).await.map_err(store_failure)?;
        let by_type = version
            .document
            .keys
            .keys()
            .map(|k| (ScanAlgorithm::for_managed(k.algorithm()), k.fingerprint().clone()))
            .collect();
        return Ok((
            Expected {
                by_type,
                untyped: vec![],
            },
            format!("{} version {} ({selector})", version.arn, version.version_id),
        ));
    }
    if let Some(path) = &args.known_hosts {
        return expected_from_known_hosts(path);
    }
    if !args.expect.is_empty() {
        return Ok((
            Expected {
                by_type: BTreeMap::new(),
                untyped: args.expect.clone(),
            },
            "--expect".to_owned(),
        ));
    }
    Err(Failure::usage(anyhow::anyhow!(
        "name the expected set: --secret-id NAME, --known-hosts FILE or --expect SHA256:..."
    )))
}

fn endpoint_of(address: &HostPort) -> Endpoint {
    Endpoint {
        name: address.to_string(),
        host: address.host().to_owned(),
        port: address.port(),
    }
}

/// A node to audit: where to connect (none when it has no address) and
/// what discovery said about it.
struct AuditNode {
    endpoint: Endpoint,
    reachable: bool,
    health: Option<discovery::Health>,
}

/// The nodes to audit: discovered targets (with their private address
/// and health) and the endpoints given directly; and the instances SSM can
/// reach, for --via-ssm.
async fn endpoints(
    args: &AuditArgs,
    config: Option<&aws_config::SdkConfig>,
) -> Result<(Vec<discovery::Instance>, Vec<AuditNode>), Failure> {
    let mut nodes: Vec<AuditNode> = Vec::new();
    let mut instances = Vec::new();
    if let Some(config) = config
        && !args.targets.is_empty()
    {
        let fleet = Ec2Fleet::new(config).with_port(args.port);
        let targets = fleet.targets(&args.targets).await.map_err(discovery_failure)?;
        for t in targets {
            // SSM reaches EC2 instances, not IP targets or HyperPod nodes.
            if let Some(id) = &t.instance_id
                && !args
                    .targets
                    .iter()
                    .any(|s| matches!(s, discovery::TargetSpec::HyperPod { .. }))
            {
                instances.push(discovery::Instance {
                    instance_id: id.clone(),
                    private_ip: t.address.clone(),
                    name: Some(t.name.clone()),
                });
            }
            if t.address.is_none() {
                tracing::warn!("{} has no private address; reported unreachable", escape(&t.name));
            }
            nodes.push(AuditNode {
                endpoint: Endpoint {
                    name: t.name.clone(),
                    host: t.address.clone().unwrap_or_default(),
                    port: t.port.unwrap_or(args.port),
                },
                reachable: t.address.is_some(),
                health: t.health,
            });
        }
    }
    nodes.sort_by(|a, b| a.endpoint.name.cmp(&b.endpoint.name));
    nodes.extend(args.endpoints.iter().map(|a| AuditNode {
        endpoint: endpoint_of(a),
        reachable: true,
        health: None,
    }));
    if nodes.is_empty() && args.lb.is_none() {
        return Err(Failure::usage(anyhow::anyhow!(
            "no node to audit: the targets matched nothing; give --endpoint HOST[:PORT] instead"
        )));
    }
    Ok((instances, nodes))
}

/// `--lb`: where to sample, and the backend count when the load balancer
/// says (its registered targets: the healthy ones, or all of them when none
/// is healthy, since a Network Load Balancer then sends to every target).
async fn lb_endpoint(
    spec: &discovery::LbSpec,
    args: &AuditArgs,
    config: Option<&aws_config::SdkConfig>,
) -> Result<(Endpoint, Option<usize>), Failure> {
    match spec {
        discovery::LbSpec::Address(address) => Ok((endpoint_of(address), None)),
        discovery::LbSpec::LoadBalancer(name) => {
            let config = config.ok_or_else(|| Failure::usage(anyhow::anyhow!("no AWS configuration")))?;
            let fleet = Ec2Fleet::new(config).with_port(args.port);
            let (listener, targets) = fleet.load_balancer(name).await.map_err(discovery_failure)?;
            let mut all: Vec<&str> = targets.iter().map(|t| t.id.as_str()).collect();
            all.sort_unstable();
            all.dedup();
            let mut healthy: Vec<&str> = targets
                .iter()
                .filter(|t| !t.health.is_flagged())
                .map(|t| t.id.as_str())
                .collect();
            healthy.sort_unstable();
            healthy.dedup();
            let backends = if healthy.is_empty() { all.len() } else { healthy.len() };
            Ok((
                Endpoint {
                    name: format!("lb:{}", listener.name),
                    host: listener.dns_name,
                    port: listener.port,
                },
                Some(backends),
            ))
        }
    }
}

/// Counts by verdict, and the exit status: a node that said "drift" is
/// drift; one that could not answer (SSM failed, no report) is incomplete,
/// never drift.
fn verdict(
    nodes: &[NodeReport],
    lb: Option<&LbReport>,
    on_disk: &BTreeMap<String, OnDisk>,
) -> (BTreeMap<String, usize>, Status) {
    let mut summary: BTreeMap<String, usize> = BTreeMap::new();
    let mut verdicts: Vec<Verdict> = nodes.iter().flat_map(|n| n.findings.iter().map(|f| f.status)).collect();
    if let Some(lb) = lb {
        verdicts.extend(lb.types.iter().map(|t| t.status));
    }
    for v in &verdicts {
        *summary.entry(format!("{v:?}").to_uppercase()).or_default() += 1;
    }
    let mut certs: Vec<CertVerdict> = nodes
        .iter()
        .flat_map(|n| {
            n.findings
                .iter()
                .filter_map(|f| f.certificate.as_ref().map(|c| c.status))
        })
        .collect();
    if let Some(lb) = lb {
        certs.extend(lb.types.iter().filter_map(|t| t.certificate_status));
    }
    for c in &certs {
        let name = serde_json::to_value(c).ok().and_then(|v| v.as_str().map(str::to_owned));
        *summary.entry(format!("CERT_{}", name.unwrap_or_default())).or_default() += 1;
    }
    if certs.contains(&CertVerdict::Expiring) {
        tracing::warn!("some host certificates expire within --warn-days; renew them (`hostkeyctl sign`)");
    }
    let cert_drift = certs.iter().any(|c| c.is_drift());
    let disk_drift = on_disk.values().any(|v| v.result() == "drift");
    let disk_unknown = on_disk.values().any(|v| !matches!(v.result(), "match" | "drift"));
    let status = if verdicts.iter().any(|v| v.is_drift()) || disk_drift || cert_drift {
        Status::Drift
    } else if verdicts.contains(&Verdict::Unreachable) || disk_unknown {
        Status::Incomplete
    } else {
        Status::Success
    };
    (summary, status)
}

/// Judges each node from what it served (keys, and certificates when
/// `cert_policy` asks for them).
fn judge_nodes(
    audit_nodes: Vec<AuditNode>,
    probes: Vec<BTreeMap<ScanAlgorithm, audit::ServedProbe>>,
    expected: &Expected,
    cert_policy: Option<&crate::certificate::CertPolicy>,
    now: u64,
) -> Vec<NodeReport> {
    let mut probes = probes.into_iter();
    audit_nodes
        .into_iter()
        .map(|n| NodeReport {
            findings: match n.reachable {
                true => {
                    let served = probes.next().unwrap_or_default();
                    let keys = served.iter().map(|(a, p)| (*a, audit::to_probe(p.clone()))).collect();
                    let mut findings = audit::judge_node(expected, &keys);
                    if let Some(policy) = cert_policy {
                        audit::judge_certificates(&mut findings, &served, expected, policy, now);
                    }
                    findings
                }
                false => audit::no_address(),
            },
            endpoint: n.endpoint,
            health: n.health,
        })
        .collect()
}

/// What certificates must be, with `--ca-fingerprint`.
fn cert_policy(args: &AuditArgs) -> Option<crate::certificate::CertPolicy> {
    (!args.ca_fingerprints.is_empty()).then(|| crate::certificate::CertPolicy {
        ca_fingerprints: args.ca_fingerprints.clone(),
        principals: args.principals.clone(),
        warn_days: args.warn_days,
    })
}

/// Option combinations clap cannot check.
fn check_args(args: &AuditArgs) -> Result<(), Failure> {
    if args.targets.is_empty() && args.endpoints.is_empty() && args.lb.is_none() {
        return Err(Failure::usage(anyhow::anyhow!(
            "nothing to audit: give --target SPEC, --endpoint HOST[:PORT] or --lb HOST[:PORT]|lb:NAME"
        )));
    }
    if args.via_ssm
        && let Some(hp) = args
            .targets
            .iter()
            .find(|s| matches!(s, discovery::TargetSpec::HyperPod { .. }))
    {
        return Err(Failure::usage(anyhow::anyhow!(
            "--via-ssm cannot reach {hp}: SSM SendCommand does not reach HyperPod cluster nodes; audit them by handshake (without --via-ssm)"
        )));
    }
    if args.via_ssm && args.targets.is_empty() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--via-ssm needs --target (SSM reaches instances, not addresses)"
        )));
    }
    Ok(())
}

/// Runs `audit`.
pub async fn run(args: &AuditArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    check_args(args)?;
    let needs_aws = args.secret_id.is_some()
        || !args.targets.is_empty()
        || matches!(args.lb, Some(discovery::LbSpec::LoadBalancer(_)));
    let config = if needs_aws {
        Some(aws::load_config(&global.aws).await.map_err(Failure::aws_config)?)
    } else {
        None
    };
    let (expected, source) = expected_set(args, config.as_ref()).await?;
    let (instances, audit_nodes) = endpoints(args, config.as_ref()).await?;
    let endpoints: Vec<Endpoint> = audit_nodes
        .iter()
        .filter(|n| n.reachable)
        .map(|n| n.endpoint.clone())
        .collect();

    let scanner = Arc::new(Scanner::new(
        crate::scan::SshProber,
        ScanPolicy {
            concurrency: args.concurrency,
            per_host: args.per_host,
            timeout: Duration::from_secs(args.timeout.max(1)),
            attempts: args.attempts.max(1),
            algorithms: args.key_types.clone(),
        },
    ));
    let cert_policy = cert_policy(args);
    let asks = cert_policy.is_some();
    let now = crate::certificate::now_unix();
    let node_probes = scanner.scan_nodes_served(&endpoints, asks).await;
    let nodes = judge_nodes(audit_nodes, node_probes, &expected, cert_policy.as_ref(), now);

    let lb = match &args.lb {
        Some(spec) => {
            let (endpoint, registered) = lb_endpoint(spec, args, config.as_ref()).await?;
            let samples = scanner.scan_lb(&endpoint, args.samples, asks).await;
            let assumed = args.backends.is_none() && registered.is_none() && !nodes.is_empty();
            let backends = args.backends.or(registered).or(assumed.then_some(nodes.len()));
            Some(LbReport {
                types: samples
                    .iter()
                    .map(|(algorithm, served)| {
                        let probes: Vec<audit::Probe> = served.iter().cloned().map(audit::to_probe).collect();
                        let mut t = audit::judge_lb(&expected, *algorithm, &probes);
                        if let Some(policy) = &cert_policy
                            && (expected.by_type.contains_key(algorithm)
                                || (t.status == Verdict::Ok && !t.seen.is_empty()))
                            && let Some((worst, counts)) = audit::judge_lb_certificates(served, policy, now)
                        {
                            t.certificate_status = Some(worst);
                            t.certificates = counts;
                        }
                        t
                    })
                    .collect(),
                endpoint,
                samples: args.samples,
                backends,
                backends_assumed: assumed,
                miss_probability: backends.and_then(|k| audit::miss_probability(k, args.samples)),
            })
        }
        None => None,
    };

    let mut on_disk = BTreeMap::new();
    let mut on_disk_document = None;
    if args.via_ssm
        && let Some(config) = &config
    {
        let (checked, document) = check_on_disk(config, args, &expected, &instances).await?;
        on_disk = checked;
        on_disk_document = Some(document);
    }

    let (summary, status) = verdict(&nodes, lb.as_ref(), &on_disk);
    let report = AuditReport {
        schema: "hostkeyctl-audit/v1",
        expected_source: source,
        expected,
        nodes,
        lb,
        on_disk,
        on_disk_document,
        summary,
        exit_code: status.code(),
    };
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => print::print_table(&report),
    }
    Ok(status)
}

async fn check_on_disk(
    config: &aws_config::SdkConfig,
    args: &AuditArgs,
    expected: &Expected,
    instances: &[discovery::Instance],
) -> Result<(BTreeMap<String, OnDisk>, crate::ssm_document::SentDocument), Failure> {
    let fps: Vec<&crate::fingerprint::Fingerprint> = expected.by_type.values().chain(&expected.untyped).collect();
    let mut line = CommandLine::new(&args.node_command);
    line.arg("install").arg("--check").arg("--quiet");
    for fp in &fps {
        line.option("expect", *fp);
    }
    let line = line.build().map_err(Failure::usage)?;
    // Trusted by its hash, like push's: whoever may update a document named
    // hostkeyctl-Check must not get root on the nodes at the next audit.
    let document = crate::commands::resolve_document(
        &args.check_document,
        crate::ssm_document::Kind::Check,
        &args.node_command,
        config,
    )
    .await?;
    if fps.len() > 8 && document.trust != crate::ssm_document::Trust::Shell {
        return Err(Failure::usage(anyhow::anyhow!(
            "--via-ssm with the check document takes at most 8 expected fingerprints, not {}",
            fps.len()
        )));
    }
    let spec = CommandSpec {
        parameters: (document.trust != crate::ssm_document::Trust::Shell)
            .then(|| crate::ssm_document::check_parameters(&fps)),
        document: document.name.clone(),
        document_version: document.version.clone(),
        command_line: line,
        comment: "hostkeyctl audit --via-ssm".to_owned(),
        max_concurrency: "25%".to_owned(),
        max_errors: "100%".to_owned(),
        execution_timeout: Duration::from_secs(120),
    };
    let ids: Vec<String> = instances.iter().map(|i| i.instance_id.clone()).collect();
    let dispatcher = SsmDispatcher::new(config);
    let commands = dispatcher.send(&spec, &ids).await.map_err(Failure::aws)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    let (states, _) = dispatcher
        .wait(&commands, deadline, &|_, _| {})
        .await
        .map_err(Failure::aws)?;
    let checked = states
        .into_iter()
        .map(|(id, inv)| {
            let parsed = match InstallReport::from_output(&inv.stdout) {
                Ok(report) => OnDisk::Report(Box::new(report)),
                Err(e) => OnDisk::Unknown {
                    result: "unknown",
                    status: escape(&inv.status),
                    error: if inv.stderr.trim().is_empty() {
                        e.to_string()
                    } else {
                        escape(inv.stderr.trim())
                    },
                },
            };
            (id, parsed)
        })
        .collect();
    Ok((checked, document))
}
