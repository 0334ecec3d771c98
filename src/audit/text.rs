//! The audit as a human reads it (`audit`'s table output): the expected set, a row per node and key type,
//! the load balancer's samples, the summary.

use super::{AuditReport, LbReport};
use crate::discovery;
use crate::escape::escape;
use crate::output;

/// `writeln!` into a `String`, which cannot fail.
macro_rules! outln {
    ($out:expr, $($arg:tt)*) => {{
        use std::fmt::Write as _;
        let _ = writeln!($out, $($arg)*);
    }};
}

/// The load balancer's findings, as a header line and a table.
fn lb_table(out: &mut String, lb: &LbReport, width: Option<u16>) {
    let header = format!(
        "load balancer {}:{}, {} samples per key type{}",
        escape(&lb.endpoint.host),
        lb.endpoint.port,
        lb.samples,
        match (lb.backends, lb.miss_probability) {
            (Some(k), Some(p)) => format!(
                "; with {k} backends{}, chance a given backend was never sampled: {p:.2e}",
                if lb.backends_assumed {
                    " (assumed: the nodes audited; pass --backends K)"
                } else {
                    ""
                }
            ),
            _ => String::new(),
        }
    );
    outln!(out, "{}", output::wrap(&header, width, "  "));
    let mut table = output::table_fit(width, &["KEY TYPE", "STATUS", "KEYS SEEN", "NO ANSWER"]);
    for t in &lb.types {
        output::add_row(
            &mut table,
            vec![
                t.key_type.clone(),
                match t.certificate_status {
                    Some(c) => format!("{}\ncert {}", format!("{:?}", t.status).to_uppercase(), cert_name(c)),
                    None => format!("{:?}", t.status).to_uppercase(),
                },
                if t.seen.is_empty() {
                    "not served".to_owned()
                } else {
                    t.seen
                        .iter()
                        .map(|s| {
                            format!(
                                "{} x{}{}",
                                s.fingerprint,
                                s.count,
                                if s.expected { "" } else { " (unexpected)" }
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                },
                t.failed
                    .iter()
                    .map(|(k, v)| format!("{k} x{v}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ],
        );
    }
    outln!(out, "{table}");
}

/// A certificate verdict as in the JSON (`WRONG_CA`, ...).
fn cert_name(v: crate::certificate::CertVerdict) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

impl AuditReport {
    /// The audit as a human reads it, fitted to `width` columns (see
    /// [`output::columns`]).
    pub fn table(&self, width: Option<u16>) -> String {
        table(self, width)
    }
}

/// Who is where, and what clients print.
fn after_the_tables(out: &mut String, report: &AuditReport, width: Option<u16>) {
    membership(out, report);
    client_messages(out, report, width);
}

/// What clients print about each node and the balancer, and the
/// balancer's addresses that serve another key.
fn client_messages(out: &mut String, report: &AuditReport, width: Option<u16>) {
    let lb = report.lb.iter().map(|lb| (&lb.endpoint, &lb.client_messages));
    let all = report.nodes.iter().map(|n| (&n.endpoint, &n.client_messages)).chain(lb);
    for (endpoint, messages) in all {
        for m in messages {
            let line = format!(
                "{} {}: {} ({}{}); fix: {}",
                if m.certain { "WARNS" } else { "MAY WARN" },
                escape(&endpoint.name),
                m.text,
                m.clients,
                if m.certain {
                    ""
                } else {
                    "; not the client judged against"
                },
                m.fix
            );
            outln!(out, "{}", output::wrap(&line, width, "  "));
        }
    }
    for a in report.lb.iter().flat_map(|lb| &lb.addresses) {
        let line = format!(
            "load balancer address {}: {} {}{}",
            escape(&a.address),
            a.key_type,
            format!("{:?}", a.status).to_uppercase(),
            match (&a.served, &a.detail) {
                (Some(fp), _) if a.status != super::Verdict::Ok => format!(", serves {fp}"),
                (_, Some(d)) => format!(", {}", escape(d)),
                _ => String::new(),
            }
        );
        outln!(out, "{}", output::wrap(&line, width, "  "));
    }
}

/// The cluster against the load balancer's targets, a line each.
fn membership(out: &mut String, report: &AuditReport) {
    let Some(m) = &report.membership else { return };
    for f in &m.findings {
        let what = match f.verdict {
            "NOT_A_TARGET" => "a cluster node the load balancer never sends users to",
            _ => "a target that is no node of the cluster",
        };
        let address = f.address.as_ref().map(|a| format!(" ({})", escape(a)));
        outln!(
            out,
            "{} {}{}: {what} (hostkeyctl admit acts on it)",
            f.verdict,
            escape(&f.name),
            address.unwrap_or_default()
        );
    }
}

/// The audit as a human reads it, fitted to `width` columns (see
/// [`output::columns`]): the expected set, a row per node and key type, the
/// load balancer's samples, the summary.
fn table(report: &AuditReport, width: Option<u16>) -> String {
    let mut out = String::new();
    let out = &mut out;
    outln!(
        out,
        "{}",
        output::wrap(
            &format!("expected set: {}", escape(&report.expected_source)),
            width,
            "  "
        )
    );
    for (key_type, fp) in &report.expected.by_type {
        outln!(out, "  {key_type:<20} {fp}");
    }
    for fp in &report.expected.untyped {
        outln!(out, "  {:<20} {fp}", "(any type)");
    }
    // The served fingerprint only where it differs from the expected one:
    // two 50-character columns do not fit a terminal.
    let mut table = output::table_fit(
        width,
        &["NODE", "ADDRESS", "KEY TYPE", "STATUS", "SERVED INSTEAD / DETAIL"],
    );
    for node in &report.nodes {
        for (i, f) in node.findings.iter().enumerate() {
            let served_instead = match (&f.served, &f.expected) {
                (Some(s), Some(e)) if s == e => None,
                (Some(s), _) => Some(s.to_string()),
                (None, _) => None,
            };
            let name = match (&node.health, i) {
                (Some(h), 0) if h.is_flagged() => format!(
                    "{}\n({}{})",
                    node.endpoint.name,
                    h.state,
                    h.reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default()
                ),
                (_, 0) => node.endpoint.name.clone(),
                _ => String::new(),
            };
            output::add_row(
                &mut table,
                vec![
                    name,
                    if i == 0 {
                        format!("{}:{}", node.endpoint.host, node.endpoint.port)
                    } else {
                        String::new()
                    },
                    f.key_type.clone(),
                    match &f.certificate {
                        Some(c) => format!(
                            "{}\ncert {}",
                            format!("{:?}", f.status).to_uppercase(),
                            cert_name(c.status)
                        ),
                        None => format!("{:?}", f.status).to_uppercase(),
                    },
                    [
                        served_instead.or_else(|| f.detail.clone()),
                        f.certificate
                            .as_ref()
                            .and_then(|c| c.detail.as_ref().map(|d| escape(d))),
                    ]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join("\n"),
                ],
            );
        }
    }
    if !report.nodes.is_empty() {
        outln!(out, "{table}");
    }
    if let Some(lb) = &report.lb {
        lb_table(out, lb, width);
    }
    if let Some(document) = &report.on_disk_document {
        outln!(out, "on disk, checked with {}:", document);
    }
    for (id, v) in &report.on_disk {
        outln!(out, "on disk {}: {}", escape(id), v.result());
    }
    after_the_tables(out, report, width);
    let mut summary: Vec<String> = report.summary.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let flagged = report
        .nodes
        .iter()
        .filter(|n| n.health.as_ref().is_some_and(discovery::Health::is_flagged))
        .count();
    if flagged > 0 {
        summary.push(format!(
            "{flagged} node(s) not healthy in their target group or cluster (audited all the same)"
        ));
    }
    outln!(out, "{}", summary.join(", "));
    std::mem::take(out)
}
