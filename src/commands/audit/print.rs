//! `audit`'s table output: the expected set, a row per node and key type,
//! the load balancer's samples, the summary.

use crate::audit::{AuditReport, LbReport};
use crate::discovery;
use crate::escape::escape;
use crate::output;

/// The load balancer's findings, as a header line and a table.
fn print_lb(lb: &LbReport) {
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
    println!("{}", output::wrap(&header, output::columns(), "  "));
    let mut table = output::table(&["KEY TYPE", "STATUS", "KEYS SEEN", "NO ANSWER"]);
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
    println!("{table}");
}

/// A certificate verdict as in the JSON (`WRONG_CA`, ...).
fn cert_name(v: crate::certificate::CertVerdict) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

pub(super) fn print_table(report: &AuditReport) {
    println!(
        "{}",
        output::wrap(
            &format!("expected set: {}", escape(&report.expected_source)),
            output::columns(),
            "  "
        )
    );
    for (key_type, fp) in &report.expected.by_type {
        println!("  {key_type:<20} {fp}");
    }
    for fp in &report.expected.untyped {
        println!("  {:<20} {fp}", "(any type)");
    }
    // The served fingerprint only where it differs from the expected one:
    // two 50-character columns do not fit a terminal.
    let mut table = output::table(&["NODE", "ADDRESS", "KEY TYPE", "STATUS", "SERVED INSTEAD / DETAIL"]);
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
        println!("{table}");
    }
    if let Some(lb) = &report.lb {
        print_lb(lb);
    }
    if let Some(document) = &report.on_disk_document {
        println!("on disk, checked with {}:", document);
    }
    for (id, v) in &report.on_disk {
        println!("on disk {}: {}", escape(id), v.result());
    }
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
    println!("{}", summary.join(", "));
}
