//! The audit's report (`--output json`, schema in docs/audit.md) and what it
//! comes to: drift, incomplete, or consistent.

use std::collections::BTreeMap;

use serde::Serialize;

use super::judge::{Expected, LbReport, NodeReport, Verdict};
use crate::certificate::CertVerdict;
use crate::install::InstallReport;
use crate::ssm_document::SentDocument;

/// What an audit comes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Conclusion {
    /// Every node and sample serves the expected set.
    Consistent,
    /// A node or sample serves something else (or a node's disk does).
    Drift,
    /// Nothing wrong was seen, but something could not be asked.
    Incomplete,
    /// Every node serves the set, but the client release judged against
    /// prints a message about one (`client_messages` with `certain`):
    /// drift's exit status, since users see it.
    ClientWarnings,
}

/// What `install --check` on one node said through SSM.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum OnDisk {
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
    /// `match`, `drift`, or what else the node said (`unknown`).
    pub fn result(&self) -> &str {
        match self {
            OnDisk::Report(r) => r.result.as_str(),
            OnDisk::Unknown { result, .. } => result,
        }
    }
}

/// The `--output json` document (schema: docs/audit.md).
#[derive(Debug, Serialize)]
pub struct AuditReport {
    /// `hostkeyctl-audit/v1`.
    pub schema: &'static str,
    /// Where the expected set came from.
    pub expected_source: String,
    /// The expected set.
    pub expected: Expected,
    /// Per node.
    pub nodes: Vec<NodeReport>,
    /// Through the load balancer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lb: Option<LbReport>,
    /// With --via-ssm: `install --check` per instance.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub on_disk: BTreeMap<String, OnDisk>,
    /// With --via-ssm: the SSM document the check went out with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_disk_document: Option<SentDocument>,
    /// With a cluster (`hyperpod:`) and a load balancer (`lb:`, `tg:`,
    /// `--lb lb:NAME`): who is where, as admission sees it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub membership: Option<Membership>,
    /// Counts by verdict.
    pub summary: BTreeMap<String, usize>,
    /// What it comes to.
    pub conclusion: Conclusion,
    /// The exit code (set by the command that maps the conclusion).
    pub exit_code: u8,
}

impl AuditReport {
    /// A report of these findings, with their summary and conclusion.
    pub fn new(
        expected_source: String,
        expected: Expected,
        nodes: Vec<NodeReport>,
        lb: Option<LbReport>,
        on_disk: BTreeMap<String, OnDisk>,
        on_disk_document: Option<SentDocument>,
    ) -> Self {
        let (summary, conclusion) = conclude(&nodes, lb.as_ref(), &on_disk);
        AuditReport {
            schema: "hostkeyctl-audit/v1",
            expected_source,
            expected,
            nodes,
            lb,
            on_disk,
            on_disk_document,
            membership: None,
            summary,
            conclusion,
            exit_code: 0,
        }
    }
}

/// Counts by verdict, and the conclusion: a node that said "drift" is
/// drift; one that could not answer (SSM failed, no report) is incomplete,
/// never drift.
fn conclude(
    nodes: &[NodeReport],
    lb: Option<&LbReport>,
    on_disk: &BTreeMap<String, OnDisk>,
) -> (BTreeMap<String, usize>, Conclusion) {
    let mut summary: BTreeMap<String, usize> = BTreeMap::new();
    let mut verdicts: Vec<Verdict> = nodes.iter().flat_map(|n| n.findings.iter().map(|f| f.status)).collect();
    if let Some(lb) = lb {
        verdicts.extend(lb.types.iter().map(|t| t.status));
        // An address that did not answer (an IPv6 one from a host
        // without IPv6) says nothing the samples did not: only one
        // serving another key counts.
        verdicts.extend(lb.addresses.iter().map(|a| a.status).filter(|v| v.is_drift()));
    }
    let messages = nodes
        .iter()
        .flat_map(|n| &n.client_messages)
        .chain(lb.iter().flat_map(|lb| &lb.client_messages));
    let mut warned = false;
    for m in messages {
        *summary
            .entry(format!("CLIENT_{}", m.code.as_str().to_uppercase()))
            .or_default() += 1;
        warned |= m.certain && !m.accepted;
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
    if verdicts.contains(&Verdict::Penalized) {
        tracing::warn!(
            "sshd's PerSourcePenalties refused this host's connections: exempt this host's and the load balancer's addresses (PerSourcePenaltyExemptList), set `PerSourcePenalties noauth:0s`, or wait (docs/audit.md)"
        );
    }
    let cert_drift = certs.iter().any(|c| c.is_drift());
    let disk_drift = on_disk.values().any(|v| v.result() == "drift");
    let disk_unknown = on_disk.values().any(|v| !matches!(v.result(), "match" | "drift"));
    let conclusion = if verdicts.iter().any(|v| v.is_drift()) || disk_drift || cert_drift {
        Conclusion::Drift
    } else if verdicts.contains(&Verdict::Unreachable) || verdicts.contains(&Verdict::Penalized) || disk_unknown {
        Conclusion::Incomplete
    } else if let Some(lb) = lb.filter(|lb| lb.alone) {
        // Issue 27: a balancer that pins this host to one backend shows
        // only that one, however many samples; only the backends audited
        // directly show all of them.
        tracing::warn!(
            "the load balancer alone was audited: its {} samples per type saw {} distinct key(s) per type, and a balancer that pins a client to one backend (source affinity, NLB flow hashing) hides the others: audit the backends too, with --lb lb:NAME (or tg:ARN) or --target; incomplete",
            lb.samples,
            lb.distinct
        );
        Conclusion::Incomplete
    } else if warned {
        Conclusion::ClientWarnings
    } else {
        Conclusion::Consistent
    };
    (summary, conclusion)
}

/// A cluster node missing from the target group, or a target that is no
/// node of the cluster: what `hostkeyctl admit` would act on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemberFinding {
    /// The node's name, or the target's id.
    pub name: String,
    /// Its address, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// `NOT_A_TARGET` (a cluster node the load balancer never sends users
    /// to) or `NOT_IN_CLUSTER` (a target that is no cluster node: a
    /// replaced node's old address, a stray instance).
    pub verdict: &'static str,
}

/// The cluster against the load balancer's targets. Reported, not part
/// of the conclusion: the keys decide the exit code; `admit` acts on this.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Membership {
    /// Cluster nodes that are no target, then targets that are no node.
    pub findings: Vec<MemberFinding>,
}
