//! The audit's metrics (`audit --metrics-file PATH`, `--cloudwatch
//! NAMESPACE`): nodes by verdict, the load balancer's samples by verdict,
//! the fewest days left on a served certificate, how long the audit took,
//! and when it ran. Counts and durations only: never a fingerprint, an
//! instance id or an address, which would make a series (or a CloudWatch
//! dimension) per node and per key.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::judge::Verdict;
use super::report::{AuditReport, Conclusion};
use crate::scan::warnings::MessageCode;

/// Every verdict a node or a sample can have, in the order the metrics
/// list them (each one always present, 0 when none: an alarm on a series
/// that appears only when something is wrong never fires).
pub const VERDICTS: [Verdict; 6] = [
    Verdict::Ok,
    Verdict::Mismatch,
    Verdict::Unmanaged,
    Verdict::Missing,
    Verdict::Unreachable,
    Verdict::Penalized,
];

/// Every client message, listed in the metrics even when none was seen.
pub const MESSAGE_CODES: [MessageCode; 5] = [
    MessageCode::NoPostQuantumKex,
    MessageCode::DsaOnly,
    MessageCode::Sha1Only,
    MessageCode::SmallRsa,
    MessageCode::CheckHostIp,
];

/// A verdict's name in the metrics.
pub fn name(v: Verdict) -> &'static str {
    match v {
        Verdict::Ok => "ok",
        Verdict::Mismatch => "mismatch",
        Verdict::Unmanaged => "unmanaged",
        Verdict::Missing => "missing",
        Verdict::Unreachable => "unreachable",
        Verdict::Penalized => "penalized",
    }
}

/// How bad a verdict is, to pick a node's worst.
fn rank(v: Verdict) -> u8 {
    match v {
        Verdict::Ok => 0,
        Verdict::Penalized => 1,
        Verdict::Unreachable => 2,
        Verdict::Missing => 3,
        Verdict::Unmanaged => 4,
        Verdict::Mismatch => 5,
    }
}

/// What one audit measured.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct AuditMetrics {
    /// Nodes by their worst key verdict.
    pub nodes: BTreeMap<&'static str, usize>,
    /// Nodes whose worst verdict is not `ok`: what the alarm watches.
    pub nodes_not_ok: usize,
    /// The load balancer's samples by verdict (all key types), when it
    /// was audited.
    pub lb_samples: Option<BTreeMap<&'static str, usize>>,
    /// The fewest days left on any certificate a node served (negative:
    /// expired), when certificates were checked.
    pub certificate_days_left: Option<f64>,
    /// Messages OpenSSH clients print, by code
    /// ([`crate::scan::warnings::MessageCode`]): nodes and the balancer
    /// with each (every code listed, 0 included).
    pub client_messages: BTreeMap<&'static str, usize>,
    /// Those the client release judged against prints by default.
    pub client_warnings: usize,
    /// How long the audit took.
    pub duration_seconds: f64,
    /// What it came to.
    pub conclusion: Conclusion,
}

/// The metrics of `report`, which took `duration`, judged at `now`.
pub fn of(report: &AuditReport, duration: Duration, now: OffsetDateTime) -> AuditMetrics {
    let mut nodes: BTreeMap<&'static str, usize> = VERDICTS.iter().map(|v| (name(*v), 0)).collect();
    let mut nodes_not_ok = 0;
    for node in &report.nodes {
        let worst = node
            .findings
            .iter()
            .map(|f| f.status)
            .max_by_key(|v| rank(*v))
            .unwrap_or(Verdict::Unreachable);
        *nodes.entry(name(worst)).or_default() += 1;
        if worst != Verdict::Ok {
            nodes_not_ok += 1;
        }
    }
    let lb_samples = report.lb.as_ref().map(|lb| {
        let mut samples: BTreeMap<&'static str, usize> = VERDICTS.iter().map(|v| (name(*v), 0)).collect();
        for t in &lb.types {
            for seen in &t.seen {
                let verdict = if seen.expected {
                    Verdict::Ok
                } else if t.status == Verdict::Unmanaged {
                    Verdict::Unmanaged
                } else {
                    Verdict::Mismatch
                };
                *samples.entry(name(verdict)).or_default() += seen.count;
            }
            let failed: usize = t.failed.values().sum();
            let verdict = if t.status == Verdict::Penalized {
                Verdict::Penalized
            } else {
                Verdict::Unreachable
            };
            *samples.entry(name(verdict)).or_default() += failed;
        }
        samples
    });
    let certificate_days_left = report
        .nodes
        .iter()
        .flat_map(|n| n.findings.iter())
        .filter_map(|f| f.certificate.as_ref()?.valid_before.as_deref())
        .filter_map(|end| OffsetDateTime::parse(end, &Rfc3339).ok())
        .map(|end| (end - now).as_seconds_f64() / 86_400.0)
        .reduce(f64::min);
    let mut client_messages: BTreeMap<&'static str, usize> = MESSAGE_CODES.iter().map(|c| (c.as_str(), 0)).collect();
    let mut client_warnings = 0;
    let all = report.nodes.iter().flat_map(|n| &n.client_messages);
    for m in all.chain(report.lb.iter().flat_map(|lb| &lb.client_messages)) {
        *client_messages.entry(m.code.as_str()).or_default() += 1;
        client_warnings += usize::from(m.certain && !m.accepted);
    }
    AuditMetrics {
        nodes,
        nodes_not_ok,
        lb_samples,
        certificate_days_left,
        client_messages,
        client_warnings,
        duration_seconds: duration.as_secs_f64(),
        conclusion: report.conclusion,
    }
}

/// The Prometheus textfile of `m`, for node_exporter's textfile collector
/// on the host that runs the audit; `now` in Unix seconds.
pub fn textfile(m: &AuditMetrics, now: u64) -> String {
    use crate::install::metrics::gauge;
    let mut out = String::new();
    gauge(
        &mut out,
        "hostkeyctl_audit_nodes",
        "Nodes audited, by their worst key verdict (ok, mismatch, unmanaged, missing, unreachable, penalized).",
    );
    for (verdict, n) in &m.nodes {
        _ = writeln!(out, "hostkeyctl_audit_nodes{{verdict=\"{verdict}\"}} {n}");
    }
    gauge(
        &mut out,
        "hostkeyctl_audit_nodes_not_ok",
        "Nodes whose worst verdict is not ok: alert when at least 1.",
    );
    _ = writeln!(out, "hostkeyctl_audit_nodes_not_ok {}", m.nodes_not_ok);
    if let Some(samples) = &m.lb_samples {
        gauge(
            &mut out,
            "hostkeyctl_audit_lb_samples",
            "Handshakes through the load balancer, by verdict (every key type).",
        );
        for (verdict, n) in samples {
            _ = writeln!(out, "hostkeyctl_audit_lb_samples{{verdict=\"{verdict}\"}} {n}");
        }
    }
    if let Some(days) = m.certificate_days_left {
        gauge(
            &mut out,
            "hostkeyctl_audit_certificate_days_left",
            "The fewest days of validity left on a host certificate a node served (negative: expired).",
        );
        _ = writeln!(out, "hostkeyctl_audit_certificate_days_left {days:.3}");
    }
    gauge(
        &mut out,
        "hostkeyctl_audit_client_messages",
        "Messages an OpenSSH client prints, by code: one per node, load balancer or balancer address (docs/clients.md, \"Messages clients print\").",
    );
    for (code, n) in &m.client_messages {
        _ = writeln!(out, "hostkeyctl_audit_client_messages{{message=\"{code}\"}} {n}");
    }
    gauge(
        &mut out,
        "hostkeyctl_audit_client_warnings",
        "Messages the client release judged against prints by default: alert when at least 1.",
    );
    _ = writeln!(out, "hostkeyctl_audit_client_warnings {}", m.client_warnings);
    gauge(
        &mut out,
        "hostkeyctl_audit_consistent",
        "1 when the audit found every node and sample serving the expected set, 0 for drift or incomplete.",
    );
    _ = writeln!(
        out,
        "hostkeyctl_audit_consistent {}",
        u8::from(m.conclusion == Conclusion::Consistent)
    );
    gauge(
        &mut out,
        "hostkeyctl_audit_duration_seconds",
        "How long the audit took.",
    );
    _ = writeln!(out, "hostkeyctl_audit_duration_seconds {:.3}", m.duration_seconds);
    gauge(
        &mut out,
        "hostkeyctl_audit_last_run_timestamp_seconds",
        "When the audit ended (Unix time): alert when it is older than two audit periods.",
    );
    _ = writeln!(out, "hostkeyctl_audit_last_run_timestamp_seconds {now}");
    out
}

/// Writes the textfile atomically, mode 0644.
pub fn write(path: &std::path::Path, m: &AuditMetrics, now: u64) -> std::io::Result<()> {
    crate::install::metrics::write_textfile(path, &textfile(m, now))
}

/// One CloudWatch datum: name, the `Verdict` dimension's value (if any),
/// value and unit name.
#[derive(Clone, Debug, PartialEq)]
pub struct Datum {
    /// Metric name.
    pub name: &'static str,
    /// The `Verdict` dimension, for the breakdowns.
    pub verdict: Option<&'static str>,
    /// The value.
    pub value: f64,
    /// `Count` or `Seconds`.
    pub unit: &'static str,
}

/// The CloudWatch metrics of `m`. Dimensions are verdict names only.
pub fn datums(m: &AuditMetrics) -> Vec<Datum> {
    let count = |name, verdict, value: usize| Datum {
        name,
        verdict,
        #[allow(clippy::cast_precision_loss)]
        value: value as f64,
        unit: "Count",
    };
    let mut out = vec![
        count("NodesNotOk", None, m.nodes_not_ok),
        count("ClientWarnings", None, m.client_warnings),
    ];
    out.extend(m.nodes.iter().map(|(v, n)| count("Nodes", Some(*v), *n)));
    if let Some(samples) = &m.lb_samples {
        out.extend(samples.iter().map(|(v, n)| count("LbSamples", Some(*v), *n)));
    }
    if let Some(days) = m.certificate_days_left {
        out.push(Datum {
            name: "CertificateDaysLeft",
            verdict: None,
            value: days,
            unit: "None",
        });
    }
    out.push(Datum {
        name: "AuditDuration",
        verdict: None,
        value: m.duration_seconds,
        unit: "Seconds",
    });
    out
}

/// The datums in CloudWatch's embedded metric format (EMF), for an audit
/// that runs in Lambda: one JSON document per line on stdout, which
/// CloudWatch Logs turns into the same metrics `PutMetricData` would
/// publish, with no call and no `cloudwatch:PutMetricData` permission. A
/// document holds one value per dimension, so there is one per verdict
/// (`Nodes`, `LbSamples`) and one with no dimension (`NodesNotOk`,
/// `CertificateDaysLeft`, `AuditDuration`). `timestamp_ms`: Unix
/// milliseconds.
pub fn emf(namespace: &str, datums: &[Datum], timestamp_ms: u64) -> Vec<String> {
    let mut groups: BTreeMap<Option<&'static str>, Vec<&Datum>> = BTreeMap::new();
    for d in datums {
        groups.entry(d.verdict).or_default().push(d);
    }
    groups
        .into_iter()
        .map(|(verdict, data)| {
            let dimensions: &[&str] = if verdict.is_some() { &["Verdict"] } else { &[] };
            let metrics: Vec<serde_json::Value> = data
                .iter()
                .map(|d| serde_json::json!({ "Name": d.name, "Unit": d.unit }))
                .collect();
            let mut doc = serde_json::Map::new();
            doc.insert(
                "_aws".to_owned(),
                serde_json::json!({
                    "Timestamp": timestamp_ms,
                    "CloudWatchMetrics": [{
                        "Namespace": namespace,
                        "Dimensions": [dimensions],
                        "Metrics": metrics,
                    }],
                }),
            );
            if let Some(v) = verdict {
                doc.insert("Verdict".to_owned(), v.into());
            }
            for d in data {
                doc.insert(d.name.to_owned(), d.value.into());
            }
            serde_json::Value::Object(doc).to_string()
        })
        .collect()
}

/// Where the audit's metrics go: CloudWatch, or a double.
pub trait MetricsSink: Sync {
    /// `PutMetricData` of `datums` under `namespace`.
    fn put(
        &self,
        namespace: &str,
        datums: &[Datum],
    ) -> impl std::future::Future<Output = Result<(), crate::aws_error::AwsError>> + Send;
}

/// Where `publish` sends the audit's metrics.
pub struct Destinations<'a, M> {
    /// A Prometheus textfile (`--metrics-file`).
    pub file: Option<&'a std::path::Path>,
    /// A CloudWatch namespace (`--cloudwatch`) and the sink to put them in.
    pub cloudwatch: Option<(&'a str, Option<&'a M>)>,
    /// Running in Lambda: the embedded metric format on stdout instead of
    /// a call (CloudWatch Logs makes the metrics, with no permission).
    pub in_lambda: bool,
}

/// `--metrics-file` and `--cloudwatch`: the metrics of `report`, written
/// and published; what could not be, as warnings (the audit's report and
/// exit code stand, and the template's alarm on missing data catches
/// metrics that stop coming). Lines for stdout (the embedded metric
/// format) are returned.
pub async fn publish<M: MetricsSink>(
    report: &AuditReport,
    elapsed: Duration,
    now: OffsetDateTime,
    to: &Destinations<'_, M>,
) -> (Vec<String>, Vec<String>) {
    let (mut lines, mut warnings) = (Vec::new(), Vec::new());
    if to.file.is_none() && to.cloudwatch.is_none() {
        return (lines, warnings);
    }
    let m = of(report, elapsed, now);
    if let Some(path) = to.file {
        let unix = u64::try_from(now.unix_timestamp()).unwrap_or_default();
        if let Err(e) = write(path, &m, unix) {
            warnings.push(format!(
                "cannot write the metrics file {}: {e}; the audit's result stands",
                path.display()
            ));
        }
    }
    let Some((namespace, sink)) = to.cloudwatch else {
        return (lines, warnings);
    };
    let datums = datums(&m);
    if to.in_lambda {
        let ms = u64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or_default();
        lines.extend(emf(namespace, &datums, ms));
    } else if let Some(sink) = sink
        && let Err(e) = sink.put(namespace, &datums).await
    {
        warnings.push(format!(
            "cannot publish the audit's metrics to CloudWatch: {e}; the audit's result stands"
        ));
    }
    (lines, warnings)
}

#[cfg(test)]
mod tests {
    use super::{AuditMetrics, Conclusion, datums, textfile};

    fn metrics() -> AuditMetrics {
        AuditMetrics {
            nodes: [
                ("ok", 2),
                ("mismatch", 1),
                ("unmanaged", 0),
                ("missing", 0),
                ("unreachable", 0),
                ("penalized", 0),
            ]
            .into_iter()
            .collect(),
            nodes_not_ok: 1,
            lb_samples: Some([("ok", 40), ("mismatch", 20)].into_iter().collect()),
            client_messages: [("no_post_quantum_kex", 2)].into_iter().collect(),
            client_warnings: 2,
            certificate_days_left: Some(6.5),
            duration_seconds: 1.25,
            conclusion: Conclusion::Drift,
        }
    }

    #[test]
    fn the_textfile_has_every_verdict_and_no_identity() {
        let text = textfile(&metrics(), 1_790_000_000);
        assert!(
            text.contains("\nhostkeyctl_audit_nodes{verdict=\"mismatch\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("\nhostkeyctl_audit_nodes{verdict=\"unmanaged\"} 0\n"),
            "{text}"
        );
        assert!(text.contains("\nhostkeyctl_audit_nodes_not_ok 1\n"), "{text}");
        assert!(
            text.contains("\nhostkeyctl_audit_lb_samples{verdict=\"ok\"} 40\n"),
            "{text}"
        );
        assert!(text.contains("\nhostkeyctl_audit_consistent 0\n"), "{text}");
        assert!(
            text.contains("\nhostkeyctl_audit_client_messages{message=\"no_post_quantum_kex\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("\nhostkeyctl_audit_client_warnings 2\n"), "{text}");
        assert!(
            text.contains("\nhostkeyctl_audit_certificate_days_left 6.500\n"),
            "{text}"
        );
        assert!(!text.contains("SHA256:") && !text.contains("i-"), "{text}");
    }

    #[test]
    fn cloudwatch_dimensions_are_verdicts_only() {
        let all = datums(&metrics());
        assert_eq!(all[0].name, "NodesNotOk");
        assert_eq!(all[0].value, 1.0);
        let dims: Vec<&str> = all.iter().filter_map(|d| d.verdict).collect();
        assert!(
            dims.iter()
                .all(|d| super::VERDICTS.iter().any(|v| super::name(*v) == *d)),
            "{dims:?}"
        );
        assert!(all.iter().any(|d| d.name == "AuditDuration" && d.unit == "Seconds"));
    }

    /// What the EMF specification asks of each document: `_aws` with a
    /// millisecond `Timestamp` and one directive whose dimension sets and
    /// metric names are members of the document itself, at most one value
    /// per dimension per document, and nothing that names a node.
    #[test]
    fn emf_documents_follow_the_specification() {
        let all = datums(&metrics());
        let lines = super::emf("hostkeyctl/test", &all, 1_790_000_000_123);
        let mut seen = 0;
        for line in &lines {
            assert!(!line.contains('\n'), "one document per line: {line}");
            let doc: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(doc["_aws"]["Timestamp"], 1_790_000_000_123_u64);
            let directives = doc["_aws"]["CloudWatchMetrics"].as_array().unwrap();
            assert_eq!(directives.len(), 1, "{line}");
            assert_eq!(directives[0]["Namespace"], "hostkeyctl/test");
            for set in directives[0]["Dimensions"].as_array().unwrap() {
                for key in set.as_array().unwrap() {
                    assert_eq!(key, "Verdict", "{line}");
                    assert!(doc[key.as_str().unwrap()].is_string(), "{line}");
                }
            }
            for metric in directives[0]["Metrics"].as_array().unwrap() {
                let name = metric["Name"].as_str().unwrap();
                assert!(doc[name].is_number(), "{name} has no value: {line}");
                seen += 1;
            }
            assert!(!line.contains("SHA256:") && !line.contains("i-"), "{line}");
        }
        assert_eq!(seen, all.len(), "every datum once: {lines:?}");
        let not_ok: Vec<&String> = lines.iter().filter(|l| l.contains("\"NodesNotOk\":1")).collect();
        assert_eq!(not_ok.len(), 1, "{lines:?}");
        assert!(
            !not_ok[0].contains("\"Verdict\""),
            "the alarm's metric has no dimension"
        );
    }
}
