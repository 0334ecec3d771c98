//! `status` as a human reads it: the secret, where the rotation is, the
//! schedule, the association, the nodes, and a row per version and key.

use super::StatusReport;
use crate::output;
use crate::store::STAGE_CURRENT;

/// Where the rotation is.
fn phase_line(out: &mut String, report: &StatusReport) {
    use std::fmt::Write as _;
    match &report.rotation_in_flight {
        Some(v) => {
            _ = writeln!(
                out,
                "phase    announced: version {v} is AWSPENDING ({}); nodes serve it as extra host keys; `rotate --finish` promotes it\nclients  at the promotion, Paramiko, Dropbear and PuTTY's cache users fetch their files again (`known-hosts --client paramiko|dropbear|putty`, docs/clients.md)",
                crate::rotation::age(report.phase.since.as_deref())
            )
        }
        None if report.phase.retiring_until.is_some() => {
            _ = writeln!(
                out,
                "phase    promoted: until {}, nodes that installed the promotion offer the retired set ({}) as extra host keys, so that clients of nodes not converged yet keep its keys; then the announced set{}",
                report.phase.retiring_until.as_deref().unwrap_or_default(),
                report
                    .phase
                    .promoted_from
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                report
                    .announced
                    .as_ref()
                    .map(|a| format!(" (version {a}, HOSTKEYCTL_NEXT)"))
                    .unwrap_or_default()
            )
        }
        None if report.announced.is_some() => {
            _ = writeln!(
                out,
                "phase    scheduled: nodes serve AWSCURRENT and offer version {} (HOSTKEYCTL_NEXT) as extra host keys; the next scheduled rotation promotes it",
                report.announced.as_ref().map(ToString::to_string).unwrap_or_default()
            )
        }
        None => {
            _ = writeln!(
                out,
                "phase    steady: nodes serve AWSCURRENT alone{}",
                report
                    .phase
                    .promoted_from
                    .as_ref()
                    .map(|p| format!(" (promoted from {p}, now AWSPREVIOUS)"))
                    .unwrap_or_default()
            )
        }
    }
}

/// The rotation schedule's line, when the secret has one.
fn schedule_line(out: &mut String, r: &crate::store::RotationSchedule) {
    use std::fmt::Write as _;
    if r.enabled || r.lambda_arn.is_some() {
        let or_none = |v: &Option<String>| v.as_deref().map_or_else(|| "-".to_owned(), crate::escape::escape);
        _ = writeln!(
            out,
            "schedule {} {}, last rotated {}, next {}",
            if r.enabled { "on," } else { "off," },
            or_none(&r.schedule),
            or_none(&r.last_rotated),
            or_none(&r.next_rotation)
        );
    }
}

impl StatusReport {
    /// The report as a human reads it, fitted to `width` columns (see
    /// [`output::columns`]).
    pub fn table(&self, width: Option<u16>) -> String {
        table(self, width)
    }
}

/// The report as a human reads it, fitted to `width` columns.
fn table(report: &StatusReport, width: Option<u16>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    _ = writeln!(out, "secret   {}", report.arn);
    _ = writeln!(
        out,
        "kms key  {}",
        report.kms_key_id.as_deref().unwrap_or("aws/secretsmanager (default)")
    );
    phase_line(&mut out, report);
    schedule_line(&mut out, &report.schedule);
    if let Some(a) = &report.association {
        _ = writeln!(
            out,
            "assoc    {} ({}), {}, last run {} ({})",
            crate::escape::escape(&a.spec.name),
            crate::escape::escape(&a.id),
            crate::escape::escape(&a.spec.schedule),
            a.last_execution
                .as_deref()
                .map_or_else(|| "never".to_owned(), crate::escape::escape),
            a.status
                .as_deref()
                .map_or_else(|| "no status yet".to_owned(), crate::escape::escape)
        );
    }
    if let Some(c) = &report.converged {
        _ = writeln!(
            out,
            "nodes    {} of {} serve AWSCURRENT{}",
            c.serving_current,
            c.nodes,
            if c.not_converged.is_empty() {
                String::new()
            } else {
                format!("; not yet: {}", crate::escape::escape(&c.not_converged.join(", ")))
            }
        );
    }
    let mut table = output::table_fit(width, &["VERSION", "STAGES", "CREATED", "ALGORITHM", "FINGERPRINT"]);
    for v in &report.versions {
        for (i, k) in v.keys.iter().enumerate() {
            let first = i == 0;
            output::add_row(
                &mut table,
                vec![
                    if first { v.version_id.to_string() } else { String::new() },
                    if first { v.stages.join(",") } else { String::new() },
                    if first {
                        v.created.clone().unwrap_or_default()
                    } else {
                        String::new()
                    },
                    k.algorithm.clone(),
                    k.fingerprint.to_string(),
                ],
            );
        }
    }
    output::keep_whole(&mut table, 4);
    _ = writeln!(out, "{table}");
    let current = report
        .versions
        .iter()
        .find(|v| v.stages.iter().any(|s| s == STAGE_CURRENT));
    if let Some(c) = current.and_then(|v| v.certificates.first()) {
        _ = writeln!(
            out,
            "certificates on AWSCURRENT: serial {}, from CA {}, for {}, valid before {}",
            c.serial,
            c.ca_fingerprint,
            c.principals.join(", "),
            c.valid_before
        );
    }
    for line in report.user_notice.lines() {
        _ = writeln!(out, "{line}");
    }
    out
}
