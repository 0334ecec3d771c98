//! The audit's flow ([`Audit`]): the expected set, the handshakes, the
//! verdicts and the report.

use super::*;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::certificate::CertPolicy;
use crate::discovery::{self, DiscoveryError, Fleet, LbSpec, TargetSpec};
use crate::dispatch::{CommandSpec, Dispatcher};
use crate::escape::escape;
use crate::hostport::HostPort;
use crate::ids::Program;
use crate::install::InstallReport;
use crate::keyset::KeySet;
use crate::scan::{Endpoint, Probe, Prober, ScanAlgorithm, ScanPolicy, Scanner, ServedProbe, to_probe};
use crate::shell::{CommandLine, QuoteError};
use crate::ssm_document::{SentDocument, Trust};
use crate::store::{SecretStore, StoreError};

/// Why an audit could not run (as opposed to one that ran and found
/// drift, which is its report).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The expected set could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The targets could not be found.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// SSM refused `--via-ssm`'s command or its polling.
    #[error(transparent)]
    Dispatch(crate::aws_error::AwsError),
    /// The command line for `--via-ssm` cannot be built.
    #[error(transparent)]
    Quote(#[from] QuoteError),
    /// `--via-ssm`'s document is not one to send.
    #[error(transparent)]
    Document(Box<crate::ssm_document::ResolveError>),
    /// The request does not make sense; says why and what to do.
    #[error("{0}")]
    Refused(String),
}

/// The on-disk check of `--via-ssm`: `install --check` on every target
/// instance, through this document.
#[derive(Clone, Debug)]
pub struct OnDiskCheck {
    /// The document's name, settled by its hash before anything is sent
    /// ([`crate::ssm_document::settle`]).
    pub document: String,
    /// How the nodes call hostkeyctl.
    pub node_command: Program,
}

/// What to audit.
#[derive(Clone, Debug)]
pub struct AuditRequest {
    /// Where the expected set comes from.
    pub expected: ExpectedSource,
    /// The nodes, by target spec (discovered with their health).
    pub targets: Vec<TargetSpec>,
    /// Nodes given directly.
    pub endpoints: Vec<HostPort>,
    /// sshd port of discovered nodes.
    pub port: u16,
    /// The load balancer to sample.
    pub lb: Option<LbSpec>,
    /// Connections per key type through the load balancer.
    pub samples: usize,
    /// Backends behind it, when told.
    pub backends: Option<usize>,
    /// What certificates must be, when they are judged.
    pub certificates: Option<CertPolicy>,
    /// `--via-ssm`.
    pub on_disk: Option<OnDiskCheck>,
    /// Now (Unix seconds), for certificate validity.
    pub now: u64,
    /// The OpenSSH client release whose messages are certain
    /// (`--client-version`; default the newest).
    pub client: crate::scan::warnings::ClientVersion,
    /// Messages the site accepts (`--accept-message`): reported, not
    /// counted in the conclusion.
    pub accepted: Vec<crate::scan::warnings::MessageCode>,
}

/// A node to audit: where to connect (none when it has no address) and
/// what discovery said about it.
struct AuditNode {
    endpoint: Endpoint,
    reachable: bool,
    health: Option<discovery::Health>,
}

/// The audit over its outside systems. The store, fleet and dispatcher are
/// needed only by what a request names (a secret, targets, a load balancer
/// by name, `--via-ssm`); `None` where the caller has no AWS at all.
pub struct Audit<'a, S, F, D, P> {
    /// Where the expected set is read.
    pub store: Option<&'a S>,
    /// Where targets are discovered.
    pub fleet: Option<&'a F>,
    /// Sends `--via-ssm`'s check.
    pub dispatcher: Option<&'a D>,
    /// The handshakes.
    pub prober: Arc<P>,
    /// How to scan.
    pub policy: ScanPolicy,
}

fn needs(what: &str) -> AuditError {
    AuditError::Refused(format!("no AWS configuration to {what}"))
}

impl<S: SecretStore, F: Fleet, D: Dispatcher, P: Prober> Audit<'_, S, F, D, P> {
    /// Runs the audit.
    pub async fn run(&self, req: &AuditRequest) -> Result<AuditReport, AuditError> {
        check(req)?;
        let (expected, source) = match &req.expected {
            ExpectedSource::Given { expected, source } => (expected.clone(), source.clone()),
            secret => expected::read(self.store.ok_or_else(|| needs("read the secret"))?, secret).await?,
        };
        let (instances, audit_nodes) = self.nodes(req).await?;
        let endpoints: Vec<Endpoint> = audit_nodes
            .iter()
            .filter(|n| n.reachable)
            .map(|n| n.endpoint.clone())
            .collect();
        let scanner = Arc::new(Scanner::new(self.prober.clone(), self.policy.clone()));
        let asks = req.certificates.is_some();
        let node_probes = scanner.scan_nodes_served(&endpoints, asks).await;
        let messages = messages::for_nodes(&scanner, &endpoints, &node_probes, req.client);
        // Asking for certificates shows the certified keys; the plain keys
        // every other client sees are asked for too (issue 27: a node
        // serving the set's certificate and another plain key was OK).
        let plain_probes = match asks {
            true => Some(scanner.scan_nodes(&endpoints).await),
            false => None,
        };
        let mut nodes = judge_nodes(
            audit_nodes,
            node_probes,
            plain_probes,
            &expected,
            req.certificates.as_ref(),
            req.now,
        );
        for node in &mut nodes {
            node.usage = scanner.usage(&node.endpoint);
            let key = (node.endpoint.host.clone(), node.endpoint.port);
            node.client_messages = messages.get(&key).cloned().unwrap_or_default();
        }
        let mut lb = match &req.lb {
            Some(spec) => Some(self.sample_lb(&scanner, spec, req, &expected, nodes.len()).await?),
            None => None,
        };
        let (on_disk, on_disk_document) = match &req.on_disk {
            Some(check) => {
                let (found, document) = self.check_on_disk(check, &expected, &instances).await?;
                (found, Some(document))
            }
            None => (BTreeMap::new(), None),
        };
        messages::accept(&mut nodes, lb.as_mut(), &req.accepted);
        let mut report = AuditReport::new(source, expected, nodes, lb, on_disk, on_disk_document);
        report.membership = self.membership(req).await?;
        Ok(report)
    }

    /// With a cluster and a load balancer or target group among what was
    /// asked: the cluster's nodes that are no target, and the targets that
    /// are no node of the cluster (matched by instance id or address).
    async fn membership(&self, req: &AuditRequest) -> Result<Option<Membership>, AuditError> {
        let cluster: Vec<TargetSpec> = req
            .targets
            .iter()
            .filter(|s| matches!(s, TargetSpec::HyperPod { .. }))
            .cloned()
            .collect();
        let mut group: Vec<TargetSpec> = req
            .targets
            .iter()
            .filter(|s| matches!(s, TargetSpec::LoadBalancer(_) | TargetSpec::TargetGroup(_)))
            .cloned()
            .collect();
        if let (true, Some(LbSpec::LoadBalancer(name))) = (group.is_empty(), &req.lb) {
            group.push(TargetSpec::LoadBalancer(name.clone()));
        }
        let Some(fleet) = self.fleet.filter(|_| !cluster.is_empty() && !group.is_empty()) else {
            return Ok(None);
        };
        let nodes = fleet.targets(&cluster).await?;
        // A draining target takes no new connection (ELB, "Deregistration delay").
        let targets: Vec<discovery::Target> = fleet
            .targets(&group)
            .await?
            .into_iter()
            .filter(|t| t.health.as_ref().is_none_or(|h| h.state != "draining"))
            .collect();
        let same = |a: &discovery::Target, b: &discovery::Target| {
            (a.instance_id.is_some() && a.instance_id == b.instance_id)
                || (a.address.is_some() && a.address == b.address)
        };
        let finding = |t: &discovery::Target, verdict| MemberFinding {
            name: t.name.clone(),
            address: t.address.clone(),
            verdict,
        };
        let mut findings: Vec<MemberFinding> = nodes
            .iter()
            .filter(|n| !targets.iter().any(|t| same(n, t)))
            .map(|n| finding(n, "NOT_A_TARGET"))
            .collect();
        findings.extend(
            targets
                .iter()
                .filter(|t| !nodes.iter().any(|n| same(n, t)))
                .map(|t| finding(t, "NOT_IN_CLUSTER")),
        );
        Ok(Some(Membership { findings }))
    }

    /// The nodes to audit: discovered targets (with their private address
    /// and health) and the endpoints given directly; and the instances SSM
    /// can reach, for `--via-ssm`.
    async fn nodes(&self, req: &AuditRequest) -> Result<(Vec<discovery::Instance>, Vec<AuditNode>), AuditError> {
        let mut nodes: Vec<AuditNode> = Vec::new();
        let mut instances = Vec::new();
        // `--lb lb:NAME` without targets audits its backends directly too:
        // the samples alone cannot show a backend the balancer never picks
        // for this host (issue 27).
        let mut targets = req.targets.clone();
        if let (true, Some(LbSpec::LoadBalancer(name))) = (targets.is_empty(), &req.lb) {
            targets.push(TargetSpec::LoadBalancer(name.clone()));
        }
        if !targets.is_empty() {
            let fleet = self.fleet.ok_or_else(|| needs("find the targets"))?;
            let hyperpod = targets.iter().any(|s| matches!(s, TargetSpec::HyperPod { .. }));
            for t in fleet.targets(&targets).await? {
                // SSM reaches EC2 instances, not IP targets or HyperPod nodes.
                if let Some(id) = &t.instance_id
                    && !hyperpod
                {
                    instances.push(discovery::Instance {
                        instance_id: id.clone(),
                        private_ip: t.address.clone(),
                        name: Some(t.name.clone()),
                        clusters: t.clusters.clone(),
                    });
                }
                if t.address.is_none() {
                    tracing::warn!("{} has no private address; reported unreachable", escape(&t.name));
                }
                nodes.push(AuditNode {
                    endpoint: Endpoint {
                        name: t.name.clone(),
                        host: t.address.clone().unwrap_or_default(),
                        port: t.port.unwrap_or(req.port),
                    },
                    reachable: t.address.is_some(),
                    health: t.health,
                });
            }
        }
        nodes.sort_by(|a, b| a.endpoint.name.cmp(&b.endpoint.name));
        nodes.extend(req.endpoints.iter().map(|a| AuditNode {
            endpoint: endpoint_of(a),
            reachable: true,
            health: None,
        }));
        if nodes.is_empty() && req.lb.is_none() {
            return Err(AuditError::Refused(
                "no node to audit: the targets matched nothing; give --endpoint HOST[:PORT] instead".to_owned(),
            ));
        }
        Ok((instances, nodes))
    }

    /// `--lb`: samples through the load balancer, judged per key type.
    async fn sample_lb(
        &self,
        scanner: &Arc<Scanner<Arc<P>>>,
        spec: &LbSpec,
        req: &AuditRequest,
        expected: &Expected,
        audited: usize,
    ) -> Result<LbReport, AuditError> {
        let (endpoint, registered) = self.lb_endpoint(spec).await?;
        let assumed = req.backends.is_none() && registered.is_none() && audited > 0;
        let backends = req.backends.or(registered).or(assumed.then_some(audited));
        let samples = scanner
            .scan_lb(
                &endpoint,
                req.samples,
                req.certificates.is_some(),
                backends.unwrap_or(1),
            )
            .await;
        let types: Vec<LbType> = samples
            .iter()
            .map(|(algorithm, served)| {
                let probes: Vec<Probe> = served.iter().cloned().map(to_probe).collect();
                let mut t = judge_lb(expected, *algorithm, &probes);
                if let Some(policy) = &req.certificates
                    && (expected.by_type.contains_key(algorithm) || (t.status == Verdict::Ok && !t.seen.is_empty()))
                    && let Some((worst, counts)) = judge_lb_certificates(served, policy, req.now)
                {
                    t.certificate_status = Some(worst);
                    t.certificates = counts;
                }
                t
            })
            .collect();
        let mut client_messages = messages::for_endpoint(scanner, &endpoint, None, req.client);
        let (addresses, check_host_ip) = messages::lb_addresses(scanner, &endpoint, expected, req.client).await;
        client_messages.extend(check_host_ip);
        Ok(LbReport {
            client_messages,
            addresses,
            usage: scanner.usage(&endpoint),
            distinct: types.iter().map(|t| t.seen.len()).max().unwrap_or(0),
            alone: audited == 0,
            types,
            endpoint,
            samples: req.samples,
            backends,
            backends_assumed: assumed,
            miss_probability: backends.and_then(|k| miss_probability(k, req.samples)),
        })
    }

    /// Where to sample, and the backend count when the load balancer says
    /// (its registered targets: the healthy ones, or all of them when none
    /// is healthy, since a Network Load Balancer then sends to every target).
    async fn lb_endpoint(&self, spec: &LbSpec) -> Result<(Endpoint, Option<usize>), AuditError> {
        match spec {
            LbSpec::Address(address) => Ok((endpoint_of(address), None)),
            LbSpec::LoadBalancer(name) => {
                let fleet = self.fleet.ok_or_else(|| needs("find the load balancer"))?;
                let (listener, targets) = fleet.load_balancer(name).await?;
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

    /// `--via-ssm`: `install --check` on every instance, through the
    /// settled document; a node without a parsable report is unknown,
    /// never drift.
    async fn check_on_disk(
        &self,
        check: &OnDiskCheck,
        expected: &Expected,
        instances: &[discovery::Instance],
    ) -> Result<(BTreeMap<String, OnDisk>, SentDocument), AuditError> {
        let dispatcher = self.dispatcher.ok_or_else(|| needs("run the check through SSM"))?;
        // Trusted by its hash, like push's: whoever may update a document
        // named hostkeyctl-Check must not get root on the nodes at the next
        // audit.
        let document = crate::ssm_document::settle(
            dispatcher,
            &check.document,
            crate::ssm_document::Kind::Check,
            &check.node_command,
        )
        .await
        .map_err(|e| AuditError::Document(Box::new(e)))?;
        let fps: Vec<&crate::fingerprint::Fingerprint> = expected.by_type.values().chain(&expected.untyped).collect();
        let mut line = CommandLine::new(&check.node_command);
        line.arg("install").arg("--check").arg("--quiet");
        for fp in &fps {
            line.option("expect", *fp);
        }
        let line = line.build()?;
        let shell = document.trust == Trust::Shell;
        if fps.len() > 8 && !shell {
            return Err(AuditError::Refused(format!(
                "--via-ssm with the check document takes at most 8 expected fingerprints, not {}",
                fps.len()
            )));
        }
        let spec = CommandSpec {
            parameters: (!shell).then(|| crate::ssm_document::check_parameters(&fps)),
            document: document.name.clone(),
            document_version: document.version.clone(),
            command_line: line,
            comment: "hostkeyctl audit --via-ssm".to_owned(),
            max_concurrency: "25%".to_owned(),
            max_errors: "100%".to_owned(),
            execution_timeout: Duration::from_secs(120),
        };
        let ids: Vec<String> = instances.iter().map(|i| i.instance_id.clone()).collect();
        let commands = dispatcher.send(&spec, &ids).await.map_err(AuditError::Dispatch)?;
        let deadline = std::time::Instant::now() + Duration::from_secs(180);
        let (states, _) = dispatcher
            .wait(&commands, deadline, &|_, _| {})
            .await
            .map_err(AuditError::Dispatch)?;
        let found = states
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
        Ok((found, document))
    }
}

/// Option combinations that make no audit.
fn check(req: &AuditRequest) -> Result<(), AuditError> {
    if req.targets.is_empty() && req.endpoints.is_empty() && req.lb.is_none() {
        return Err(AuditError::Refused(
            "nothing to audit: give --target SPEC, --endpoint HOST[:PORT] or --lb HOST[:PORT]|lb:NAME".to_owned(),
        ));
    }
    if req.on_disk.is_some() {
        if let Some(hp) = req.targets.iter().find(|s| matches!(s, TargetSpec::HyperPod { .. })) {
            return Err(AuditError::Refused(format!(
                "--via-ssm cannot reach {hp}: SSM SendCommand does not reach HyperPod cluster nodes; audit them by handshake (without --via-ssm)"
            )));
        }
        if req.targets.is_empty() {
            return Err(AuditError::Refused(
                "--via-ssm needs --target (SSM reaches instances, not addresses)".to_owned(),
            ));
        }
    }
    Ok(())
}

fn endpoint_of(address: &HostPort) -> Endpoint {
    Endpoint {
        name: address.to_string(),
        host: address.host().to_owned(),
        port: address.port(),
    }
}

/// Judges each node from what it served (keys, and certificates when
/// `cert_policy` asks for them).
fn judge_nodes(
    audit_nodes: Vec<AuditNode>,
    probes: Vec<BTreeMap<ScanAlgorithm, ServedProbe>>,
    plain: Option<Vec<BTreeMap<ScanAlgorithm, Probe>>>,
    expected: &Expected,
    cert_policy: Option<&CertPolicy>,
    now: u64,
) -> Vec<NodeReport> {
    let mut probes = probes.into_iter();
    let mut plain = plain.map(Vec::into_iter);
    audit_nodes
        .into_iter()
        .map(|n| NodeReport {
            findings: match n.reachable {
                true => {
                    let served = probes.next().unwrap_or_default();
                    let keys = served.iter().map(|(a, p)| (*a, to_probe(p.clone()))).collect();
                    let mut findings = judge_node(expected, &keys);
                    if let Some(policy) = cert_policy {
                        judge_certificates(&mut findings, &served, expected, policy, now);
                    }
                    if let Some(keys) = plain.as_mut().and_then(Iterator::next) {
                        with_plain_keys(&mut findings, judge_node(expected, &keys));
                    }
                    findings
                }
                false => no_address(),
            },
            endpoint: n.endpoint,
            health: n.health,
            usage: Default::default(),
            client_messages: Vec::new(),
        })
        .collect()
}

/// The expected set of a key set: one fingerprint per managed type.
pub fn expect_keys(keys: &KeySet) -> Expected {
    Expected {
        by_type: keys
            .keys()
            .map(|k| (ScanAlgorithm::for_managed(k.algorithm()), k.fingerprint().clone()))
            .collect(),
        untyped: vec![],
    }
}

/// Audits `endpoints` against `keys` by handshake alone, with `policy`:
/// each endpoint's findings, by name. What a rotation's test step and
/// `status --target` check.
pub async fn check_endpoints<P: Prober>(
    prober: Arc<P>,
    policy: ScanPolicy,
    endpoints: &[Endpoint],
    keys: &KeySet,
) -> Vec<(String, Vec<Finding>)> {
    check_against(prober, policy, endpoints, &expect_keys(keys)).await
}

/// Audits `endpoints` against `expected` by handshake alone, with
/// `policy`: each endpoint's findings, by name. What admission checks.
pub async fn check_against<P: Prober>(
    prober: Arc<P>,
    policy: ScanPolicy,
    endpoints: &[Endpoint],
    expected: &Expected,
) -> Vec<(String, Vec<Finding>)> {
    let scanner = Arc::new(Scanner::new(prober, policy));
    let reachable: Vec<Endpoint> = endpoints.iter().filter(|e| !e.host.is_empty()).cloned().collect();
    let mut probes = scanner.scan_nodes(&reachable).await.into_iter();
    endpoints
        .iter()
        .map(|e| {
            let findings = if e.host.is_empty() {
                no_address()
            } else {
                judge_node(expected, &probes.next().unwrap_or_default())
            };
            (e.name.clone(), findings)
        })
        .collect()
}

impl crate::exit::ExitStatus for AuditError {
    /// The cause's status; the rest 2.
    fn status(&self) -> crate::exit::Status {
        match self {
            AuditError::Store(s) => s.status(),
            AuditError::Discovery(d) => d.status(),
            AuditError::Dispatch(a) => a.status(),
            AuditError::Document(d) => d.status(),
            _ => crate::exit::Status::Usage,
        }
    }
}

impl crate::exit::ExitStatus for Conclusion {
    /// Consistent 0, drift 1 (and a message a current client prints),
    /// incomplete 3.
    fn status(&self) -> crate::exit::Status {
        match self {
            Conclusion::Consistent => crate::exit::Status::Success,
            Conclusion::Drift | Conclusion::ClientWarnings => crate::exit::Status::Drift,
            Conclusion::Incomplete => crate::exit::Status::Incomplete,
        }
    }
}
