//! The node's Prometheus textfile (`install --metrics-file PATH`): what the
//! last install or check came to, for node_exporter's textfile collector
//! (docs/operations.md). Written atomically (a temporary file beside it,
//! renamed), so the collector never reads half a file; it reads only
//! `*.prom` files, so the temporary one is never scraped. No key material
//! and no fingerprints: results, a flag, timestamps.
//!
//! The text format is four gauges; writing it needs no library, and the
//! node build stays small (check_dist.py's size limit).

use std::fmt::Write as _;
use std::path::Path;

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::report::{InstallReport, InstallResult};

/// Every result, in the order the textfile lists them: one series each.
pub const RESULTS: [InstallResult; 11] = [
    InstallResult::Changed,
    InstallResult::Unchanged,
    InstallResult::Reloaded,
    InstallResult::InstalledWithoutCertificates,
    InstallResult::Refused,
    InstallResult::RolledBack,
    InstallResult::RollbackFailed,
    InstallResult::Failed,
    InstallResult::Match,
    InstallResult::Drift,
    InstallResult::Incomplete,
];

/// Whether the node serves the set it was asked for (install), or what it
/// serves matches (check): the keys, certificates aside.
pub fn converged(result: InstallResult) -> bool {
    matches!(
        result,
        InstallResult::Changed
            | InstallResult::Unchanged
            | InstallResult::Reloaded
            | InstallResult::InstalledWithoutCertificates
            | InstallResult::Match
    )
}

/// A gauge's `# HELP` and `# TYPE` lines.
pub fn gauge(out: &mut String, name: &str, help: &str) {
    _ = writeln!(out, "# HELP {name} {help}");
    _ = writeln!(out, "# TYPE {name} gauge");
}

/// The textfile for `report`, ended at `now` (Unix seconds).
pub fn render(report: &InstallReport, now: u64) -> String {
    let mut out = String::new();
    gauge(
        &mut out,
        "hostkeyctl_install_result",
        "1 for what the last hostkeyctl install or check came to, 0 for every other result.",
    );
    for result in RESULTS {
        _ = writeln!(
            out,
            "hostkeyctl_install_result{{result=\"{}\"}} {}",
            result.as_str(),
            u8::from(result == report.result)
        );
    }
    gauge(
        &mut out,
        "hostkeyctl_host_keys_converged",
        "1 when sshd serves the host keys the secret's stages name (install) or the expected ones (check).",
    );
    _ = writeln!(
        out,
        "hostkeyctl_host_keys_converged {}",
        u8::from(converged(report.result))
    );
    gauge(
        &mut out,
        "hostkeyctl_last_run_timestamp_seconds",
        "When the last hostkeyctl install or check ended (Unix time).",
    );
    _ = writeln!(out, "hostkeyctl_last_run_timestamp_seconds {now}");
    gauge(
        &mut out,
        "hostkeyctl_certificate_expiry_timestamp_seconds",
        "End of validity of each host certificate of the installed set, by key type (Unix time).",
    );
    for (key_type, cert) in &report.certificates {
        if let Ok(end) = OffsetDateTime::parse(&cert.valid_before, &Rfc3339) {
            _ = writeln!(
                out,
                "hostkeyctl_certificate_expiry_timestamp_seconds{{key_type=\"{}\"}} {}",
                escape_label(key_type),
                end.unix_timestamp()
            );
        }
    }
    out
}

/// A label value as the text format quotes it.
fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Writes the textfile for `report` to `path`, atomically, mode 0644 (the
/// collector runs as its own user).
pub fn write(path: &Path, report: &InstallReport, now: u64) -> std::io::Result<()> {
    write_textfile(path, &render(report, now))
}

/// Writes a textfile atomically, mode 0644 (the collector reads only
/// `*.prom` files, so the temporary one beside it is never scraped).
pub fn write_textfile(path: &Path, text: &str) -> std::io::Result<()> {
    let options = crate::fsutil::WriteOptions {
        mode: 0o644,
        owner: None,
        overwrite: true,
    };
    crate::fsutil::write_atomic(path, text.as_bytes(), &options)
}

#[cfg(test)]
mod tests {
    use super::{RESULTS, render};
    use crate::install::report::{CertificateRow, InstallReport, InstallResult};

    #[test]
    fn one_series_per_result_and_the_certificates_by_type() {
        let mut report = InstallReport {
            result: InstallResult::InstalledWithoutCertificates,
            ..InstallReport::default()
        };
        report.certificates.insert(
            "ssh-ed25519".to_owned(),
            CertificateRow {
                serial: 3,
                valid_before: "2026-12-09T00:00:00Z".to_owned(),
            },
        );
        let text = render(&report, 1_790_000_000);
        let ones: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("hostkeyctl_install_result{") && l.ends_with(" 1"))
            .collect();
        assert_eq!(
            ones,
            ["hostkeyctl_install_result{result=\"installed_without_certificates\"} 1"]
        );
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("hostkeyctl_install_result{"))
                .count(),
            RESULTS.len()
        );
        assert!(text.contains("\nhostkeyctl_host_keys_converged 1\n"), "{text}");
        assert!(
            text.contains("\nhostkeyctl_last_run_timestamp_seconds 1790000000\n"),
            "{text}"
        );
        assert!(
            text.contains("\nhostkeyctl_certificate_expiry_timestamp_seconds{key_type=\"ssh-ed25519\"} 1796774400\n"),
            "{text}"
        );
    }

    /// A new result must join RESULTS: this match stops compiling first.
    #[test]
    fn every_result_has_its_series() {
        for result in RESULTS {
            match result {
                InstallResult::Changed
                | InstallResult::Unchanged
                | InstallResult::Reloaded
                | InstallResult::InstalledWithoutCertificates
                | InstallResult::Refused
                | InstallResult::RolledBack
                | InstallResult::RollbackFailed
                | InstallResult::Failed
                | InstallResult::Match
                | InstallResult::Drift
                | InstallResult::Incomplete => {}
            }
        }
        let mut names: Vec<&str> = RESULTS.iter().map(|r| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), RESULTS.len());
    }

    #[test]
    fn a_drift_or_a_failure_is_not_converged() {
        for result in [InstallResult::Drift, InstallResult::RolledBack, InstallResult::Refused] {
            let report = InstallReport {
                result,
                ..InstallReport::default()
            };
            assert!(
                render(&report, 0).contains("\nhostkeyctl_host_keys_converged 0\n"),
                "{result:?}"
            );
        }
    }
}
