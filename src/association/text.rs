//! The association flows' reports as a human reads them.

use std::fmt::Write as _;

use super::{Association, DeployOutcome, Deployed, DocumentCheck, Shown};
use crate::escape::escape;

impl Association {
    /// Its targets, schedule, last run and instance counts, indented.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let targets: Vec<String> = self.spec.targets.iter().map(ToString::to_string).collect();
        _ = writeln!(out, "  targets:   {}", targets.join(" and "));
        _ = writeln!(out, "  schedule:  {}", escape(&self.spec.schedule));
        _ = writeln!(
            out,
            "  last run:  {} ({})",
            self.last_execution
                .as_deref()
                .map_or_else(|| "never".to_owned(), escape),
            self.status
                .as_deref()
                .map_or_else(|| "no status yet".to_owned(), escape)
        );
        if !self.instances_by_status.is_empty() {
            let counts: Vec<String> = self
                .instances_by_status
                .iter()
                .map(|(status, n)| format!("{n} {}", escape(status)))
                .collect();
            _ = writeln!(out, "  instances: {}", counts.join(", "));
        }
        out
    }
}

impl DeployOutcome {
    /// What `association deploy` did to the association `name`.
    pub fn text(&self, name: &str) -> String {
        let done = match &self.deployed {
            Deployed::Created => "created; State Manager runs it on its targets now".to_owned(),
            Deployed::Updated { changed } => {
                format!("updated ({}); State Manager runs it again now", changed.join(", "))
            }
            Deployed::Unchanged => "unchanged".to_owned(),
        };
        format!(
            "association {} ({}): {done}\n{}  runs:      {}\n",
            escape(name),
            escape(&self.association.id),
            self.association.text(),
            self.document
        )
    }
}

impl Shown {
    /// The association `name` and whether it runs hostkeyctl's document.
    pub fn text(&self, name: &str) -> String {
        let runs = match &self.document {
            DocumentCheck::Ours => format!(
                "{} version {}, hostkeyctl's own (by SHA-256)",
                escape(&self.association.spec.document),
                escape(&self.association.spec.document_version)
            ),
            DocumentCheck::Other { reason } => {
                format!("NOT hostkeyctl's converge document: {reason}. `hostkeyctl association deploy` puts it right")
            }
        };
        format!(
            "association {} ({})\n{}  runs:      {runs}\n",
            escape(name),
            escape(&self.association.id),
            self.association.text()
        )
    }
}
