//! The install report: the contract between a node and the admin side.
//!
//! `install` prints it as one JSON line on stdout; `push`, `rotate` and
//! `audit --via-ssm` read it back from SSM's output. It is versioned
//! ([`INSTALL_SCHEMA`]): within a version, fields are only ever added, so an
//! older reader ignores what it does not know. Reading parses every value
//! into its type: a node's report is input from a machine the admin does not
//! control.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;
use crate::ids::{SecretId, VersionId};
use crate::scan::ScanError;

/// The schema name and version every report carries.
pub const INSTALL_SCHEMA: &str = "hostkeyctl-install/v1";

/// Why an install stopped before writing anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// Bad input: the set, the options, the files found.
    BadInput,
    /// AWS refused or could not be reached.
    Aws,
    /// Busy or out of resources: another install holds the lock, no room
    /// for a backup. Try again.
    Unavailable,
}

/// What an install (or `install --check`) came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallResult {
    /// Files written, sshd reloaded and verified.
    Changed,
    /// Already installed and served.
    Unchanged,
    /// Files were right but sshd served others; reloaded and verified.
    Reloaded,
    /// Refused before writing anything.
    #[default]
    Refused,
    /// Failed after writing; the previous files are back and served.
    RolledBack,
    /// Failed, and the rollback failed too: the node needs a human.
    RollbackFailed,
    /// Failed without writing (e.g. the repairing reload failed).
    Failed,
    /// `--check`: disk and sshd match the expected set.
    Match,
    /// `--check`: they do not.
    Drift,
    /// `--check`: sshd could not be asked.
    Incomplete,
    /// The keys converged (files written or already right, served and
    /// verified), but some of the set's certificates are expired or not
    /// yet valid and were left out (`certificates_left_out`): exit 6, the
    /// certificates need renewal (`hostkeyctl sign`). Never a reason to keep
    /// a node's own keys: plain-key clients need the canonical ones.
    InstalledWithoutCertificates,
}

impl InstallResult {
    /// Whether the node now serves what it was asked to.
    pub fn is_done(self) -> bool {
        matches!(
            self,
            InstallResult::Changed | InstallResult::Unchanged | InstallResult::Reloaded
        )
    }

    /// The name used in the JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            InstallResult::Changed => "changed",
            InstallResult::Unchanged => "unchanged",
            InstallResult::Reloaded => "reloaded",
            InstallResult::Refused => "refused",
            InstallResult::RolledBack => "rolled_back",
            InstallResult::RollbackFailed => "rollback_failed",
            InstallResult::Failed => "failed",
            InstallResult::Match => "match",
            InstallResult::Drift => "drift",
            InstallResult::Incomplete => "incomplete",
            InstallResult::InstalledWithoutCertificates => "installed_without_certificates",
        }
    }
}

fn schema() -> String {
    INSTALL_SCHEMA.to_owned()
}

/// One certificate of the set, as the report names it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertificateRow {
    /// Its serial.
    pub serial: u64,
    /// End of validity (RFC 3339).
    pub valid_before: String,
}

/// A certificate of the set that install did not serve, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    /// Its key type.
    pub algorithm: String,
    /// Why (expired, or not valid yet), with what to do.
    pub reason: String,
}

/// What happened, as printed on stdout (one JSON line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InstallReport {
    /// Always [`INSTALL_SCHEMA`].
    #[serde(default = "schema")]
    pub schema: String,
    /// The hostkeyctl release that wrote it (none from releases before
    /// the field: `doctor` compares it with its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostkeyctl: Option<String>,
    /// The outcome.
    pub result: InstallResult,
    /// With `refused`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<Refusal>,
    /// The secret's ARN, when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretId>,
    /// The version installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<VersionId>,
    /// Fingerprints of the set, by key type.
    #[serde(default)]
    pub fingerprints: BTreeMap<String, Fingerprint>,
    /// During a rotation's overlap phase: the next set's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_version_id: Option<VersionId>,
    /// And its fingerprints, served as extra host keys.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub next_fingerprints: BTreeMap<String, Fingerprint>,
    /// The set's host certificates by key type: serial and end of validity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub certificates: BTreeMap<String, CertificateRow>,
    /// The set's certificates left out because they are expired or not yet
    /// valid (result `installed_without_certificates`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub certificates_left_out: Vec<LeftOut>,
    /// Files written (empty when unchanged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_files: Vec<PathBuf>,
    /// Whether any host key file changed (false when only the sshd
    /// setting that pins the served key types was written).
    #[serde(default)]
    pub keys_changed: bool,
    /// Whether sshd was reloaded.
    #[serde(default)]
    pub reloaded: bool,
    /// Whether a handshake confirmed the served keys.
    #[serde(default)]
    pub verified: bool,
    /// The backup of the previous files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<PathBuf>,
    /// With `--check`: what each key type looks like on disk and served.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckRow>,
    /// With `--check` as root: whether the instance metadata service is
    /// kept to root (`imds-guard --check`; `doctor` reports open nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imds: Option<crate::imds_guard::Access>,
    /// What install did about the post-quantum key exchange (docs/clients.md,
    /// "Messages clients print").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kex: Option<super::kex::KexReport>,
    /// The error, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The rollback's own error, when that failed too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_error: Option<String>,
}

impl Default for InstallReport {
    fn default() -> Self {
        InstallReport {
            schema: schema(),
            hostkeyctl: Some(env!("CARGO_PKG_VERSION").to_owned()),
            result: InstallResult::default(),
            refusal: None,
            secret: None,
            version_id: None,
            fingerprints: BTreeMap::new(),
            next_version_id: None,
            next_fingerprints: BTreeMap::new(),
            certificates: BTreeMap::new(),
            certificates_left_out: Vec::new(),
            changed_files: Vec::new(),
            keys_changed: false,
            reloaded: false,
            verified: false,
            backup: None,
            checks: Vec::new(),
            imds: None,
            kex: None,
            error: None,
            rollback_error: None,
        }
    }
}

/// Why a node's output holds no usable report.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// No line of the output is a JSON object.
    #[error("the node printed no hostkeyctl report; does --node-command run hostkeyctl?")]
    Missing,
    /// The last JSON line does not parse as a report.
    #[error("the node's report does not parse ({0})")]
    Malformed(String),
    /// Another schema.
    #[error(
        "the node reports schema {0}, but this hostkeyctl reads {INSTALL_SCHEMA}; upgrade hostkeyctl on the admin side or on the node"
    )]
    Schema(String),
}

impl InstallReport {
    /// The report in a command's stdout: its last line that is a JSON
    /// object, parsed strictly into types.
    pub fn from_output(stdout: &str) -> Result<Self, ReportError> {
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .ok_or(ReportError::Missing)?;
        let report: InstallReport =
            serde_json::from_str(line).map_err(|e| ReportError::Malformed(crate::escape::escape(&e.to_string())))?;
        if report.schema != INSTALL_SCHEMA {
            return Err(ReportError::Schema(crate::escape::quoted_prefix(&report.schema, 40)));
        }
        Ok(report)
    }
}

/// One row of `install --check`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckRow {
    /// Key type.
    pub key_type: String,
    /// Expected fingerprint (none: must not be served).
    pub expected: Option<Fingerprint>,
    /// On disk (managed types only).
    pub on_disk: Option<Fingerprint>,
    /// Served, or why not.
    pub served: Result<Fingerprint, ScanError>,
    /// Whether this row is as it should be.
    pub ok: bool,
}

#[cfg(test)]
mod tests {
    use super::{INSTALL_SCHEMA, InstallReport, InstallResult, ReportError};
    use crate::fingerprint::Fingerprint;

    #[test]
    fn a_report_round_trips_and_is_found_after_other_output() {
        let mut report = InstallReport {
            result: InstallResult::Changed,
            ..InstallReport::default()
        };
        report
            .fingerprints
            .insert("ssh-ed25519".into(), Fingerprint::from_digest(&[7; 32]));
        let line = serde_json::to_string(&report).unwrap();
        assert!(line.contains(&format!("\"schema\":\"{INSTALL_SCHEMA}\"")), "{line}");
        let output = format!("some noise\n{line}\n");
        assert_eq!(InstallReport::from_output(&output).unwrap(), report);
    }

    /// The bed's stand-in for virtual instances (testbed/virtual-bin)
    /// writes exactly this schema: every field it prints is one the report
    /// has, with the values it was given.
    #[test]
    fn the_beds_stand_in_writes_exactly_the_schema() {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testbed/virtual-bin/hostkeyctl");
        let fp = Fingerprint::from_digest(&[9; 32]);
        let out = std::process::Command::new("bash")
            .arg(&script)
            .args([
                "install",
                "--secret-id=arn:aws:secretsmanager:us-east-1:123456789012:secret:hk-AbCdEf",
                "--version-id=0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6c",
            ])
            .arg(["--expect=", fp.as_str()].concat())
            .arg("--quiet")
            .output()
            .unwrap();
        let stdout = String::from_utf8(out.stdout).unwrap();
        let report = InstallReport::from_output(&stdout).unwrap();
        assert_eq!(report.result, InstallResult::Unchanged);
        assert_eq!(
            report.version_id.as_ref().map(|v| v.as_str()),
            Some("0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6c")
        );
        assert_eq!(report.fingerprints.values().collect::<Vec<_>>(), [&fp]);
        let written: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        let typed = serde_json::to_value(&report).unwrap();
        for key in written.as_object().unwrap().keys() {
            assert!(
                typed.get(key).is_some(),
                "the stand-in writes {key:?}, which the schema lacks"
            );
        }
    }

    #[test]
    fn hostile_or_foreign_output_is_refused() {
        assert_eq!(InstallReport::from_output("no json"), Err(ReportError::Missing));
        let bad_fp =
            r#"{"schema":"hostkeyctl-install/v1","result":"changed","fingerprints":{"ssh-ed25519":"SHA256:x $(id)"}}"#;
        assert!(matches!(
            InstallReport::from_output(bad_fp),
            Err(ReportError::Malformed(_))
        ));
        let other = r#"{"schema":"hostkeyctl-install/v9","result":"changed"}"#;
        assert!(matches!(InstallReport::from_output(other), Err(ReportError::Schema(_))));
        let unknown = r#"{"schema":"hostkeyctl-install/v1","result":"exploded"}"#;
        assert!(matches!(
            InstallReport::from_output(unknown),
            Err(ReportError::Malformed(_))
        ));
    }
}
