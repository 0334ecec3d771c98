//! Admission as an operator reads it (`admit`'s table output): the target
//! group and the set, a row per node, what was done.

use super::{AdmissionReport, Decision, Serving};
use crate::output;

/// The header line, a row per node, and the summary.
pub fn table(report: &AdmissionReport, width: Option<u16>) -> String {
    let group = &report.target_group;
    let mut out = output::wrap(
        &format!(
            "target group {} ({} targets), set from {}, at most {} drained per run{}",
            group.name,
            group.target_type,
            report.expected_source,
            report.limits.max_drain,
            if report.dry_run {
                "; dry run: nothing changed"
            } else {
                ""
            }
        ),
        width,
        "  ",
    );
    out.push('\n');
    let mut table = output::table_fit(width, &["NODE", "TARGET", "SERVES", "DECISION", "WHY"]);
    for p in &report.nodes {
        let o = &p.observed;
        output::add_row(
            &mut table,
            vec![
                o.name.clone(),
                match &o.target_state {
                    Some(state) => format!("{} {state}", o.target_id),
                    None => format!("{} (not a target)", o.target_id),
                },
                match &o.serving {
                    Serving::Set => "the set".to_owned(),
                    Serving::Other(_) => "other keys".to_owned(),
                    Serving::Promoting(_) => "the set, as extra keys".to_owned(),
                    Serving::Unknown(_) => "unknown".to_owned(),
                    Serving::NotAsked => "not checked".to_owned(),
                },
                match p.lifecycle {
                    Some(hook) => format!("{}\nlaunch hook: {hook}", name(p.decision, report.dry_run)),
                    None => name(p.decision, report.dry_run).to_owned(),
                },
                p.reason.clone(),
            ],
        );
    }
    out.push_str(&table.to_string());
    out.push('\n');
    let counts: Vec<String> = report
        .summary
        .iter()
        .map(|(d, n)| format!("{} {n}", name(*d, report.dry_run)))
        .collect();
    out.push_str(&format!("{}\n", counts.join(", ")));
    for e in &report.errors {
        out.push_str(&format!("refused: {}\n", crate::escape::escape(e)));
    }
    out
}

/// A decision's name; in a dry run, what would be done.
fn name(decision: Decision, dry_run: bool) -> &'static str {
    match (decision, dry_run) {
        (Decision::Admit, false) => "admitted",
        (Decision::Admit, true) => "would admit",
        (Decision::Drain, false) => "drained",
        (Decision::Drain, true) => "would drain",
        (Decision::Remove, false) => "removed",
        (Decision::Remove, true) => "would remove",
        (Decision::Hold, _) => "held out",
        (Decision::HeldBack, _) => "held back",
        (Decision::Keep, _) => "kept",
    }
}
