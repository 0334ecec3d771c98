//! The diagnosis as a person reads it: a table of findings, then what to
//! do, in the order checked.

use super::{Diagnosis, Level};

impl Diagnosis {
    /// The table, then each fix numbered, then the sum.
    pub fn text(&self) -> String {
        let mut table = crate::output::table(&["CHECK", "SUBJECT", "RESULT", "FOUND"]);
        for f in &self.findings {
            let level = match f.level {
                Level::Ok => "ok",
                Level::Warn => "WARN",
                Level::Fail => "FAIL",
            };
            crate::output::add_row(
                &mut table,
                vec![
                    f.check.to_owned(),
                    f.subject.clone(),
                    level.to_owned(),
                    f.message.clone(),
                ],
            );
        }
        let mut out = format!("{table}\n");
        let fixes: Vec<&super::Finding> = self.findings.iter().filter(|f| f.fix.is_some()).collect();
        if fixes.is_empty() {
            out.push_str(&format!(
                "Nothing to do: {} check(s) of {} are as they should be.\n",
                self.findings.len(),
                crate::escape::escape(&self.secret)
            ));
            return out;
        }
        out.push_str("What to do:\n");
        for (i, f) in fixes.iter().enumerate() {
            out.push_str(&format!(
                "{}. {} {}: {}\n",
                i + 1,
                f.check,
                f.subject,
                f.fix.as_deref().unwrap_or_default()
            ));
        }
        let failed = self.findings.iter().filter(|f| f.level == Level::Fail).count();
        let warned = self.findings.iter().filter(|f| f.level == Level::Warn).count();
        out.push_str(&format!("{failed} failed, {warned} warning(s).\n"));
        out
    }
}
