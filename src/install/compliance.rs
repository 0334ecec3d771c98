//! SSM Compliance for the node: one item per key type under the compliance
//! type `Custom:HostKeys` (`PutComplianceItems`, upload type `COMPLETE`, so
//! each report replaces the last), COMPLIANT when sshd serves the key the
//! stages (or the check) expect. The SSM console's Compliance page, Config
//! and Security Hub then show every node. Items carry fingerprints and the
//! result, never key material.

use std::collections::BTreeMap;

use super::{InstallReport, InstallResult};

/// The compliance type.
pub const COMPLIANCE_TYPE: &str = "Custom:HostKeys";
/// Every item's severity: a wrong host key is what makes users type `yes`
/// to a warning, or locks them out.
pub const SEVERITY: &str = "HIGH";

/// One compliance item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// The key type (`ssh-ed25519`), or `hostkeyctl` for a run that read
    /// no set.
    pub id: String,
    /// For people.
    pub title: String,
    /// COMPLIANT or NON_COMPLIANT.
    pub compliant: bool,
    /// What was expected, found and done (fingerprints, result, version).
    pub details: BTreeMap<String, String>,
}

/// The items of a report: one per key type.
pub fn items(report: &InstallReport) -> Vec<Item> {
    let result = report.result.as_str().to_owned();
    let mut base = BTreeMap::from([("Result".to_owned(), result.clone())]);
    if let Some(v) = &report.version_id {
        base.insert("VersionId".to_owned(), v.to_string());
    }
    if !report.checks.is_empty() {
        return report
            .checks
            .iter()
            .map(|row| {
                let mut details = base.clone();
                if let Some(fp) = &row.expected {
                    details.insert("ExpectedFingerprint".to_owned(), fp.to_string());
                }
                if let Some(fp) = &row.on_disk {
                    details.insert("OnDiskFingerprint".to_owned(), fp.to_string());
                }
                details.insert(
                    "Served".to_owned(),
                    match &row.served {
                        Ok(fp) => fp.to_string(),
                        Err(e) => format!("not served: {e}"),
                    },
                );
                Item {
                    id: row.key_type.clone(),
                    title: format!("SSH host key {}", row.key_type),
                    compliant: row.ok,
                    details,
                }
            })
            .collect();
    }
    let converged = matches!(
        report.result,
        InstallResult::Changed
            | InstallResult::Unchanged
            | InstallResult::Reloaded
            | InstallResult::InstalledWithoutCertificates
    ) && report.verified;
    if report.fingerprints.is_empty() {
        let mut details = base;
        if let Some(e) = &report.error {
            details.insert("Error".to_owned(), cut(e));
        }
        return vec![Item {
            id: "hostkeyctl".to_owned(),
            title: "hostkeyctl install".to_owned(),
            compliant: false,
            details,
        }];
    }
    report
        .fingerprints
        .iter()
        .map(|(key_type, fp)| {
            let mut details = base.clone();
            details.insert("ExpectedFingerprint".to_owned(), fp.to_string());
            if converged {
                details.insert("Served".to_owned(), fp.to_string());
            } else {
                let why = report.error.as_deref().map_or_else(
                    || format!("not verified ({result})"),
                    |e| format!("not verified ({result}): {}", cut(e)),
                );
                details.insert("Served".to_owned(), why);
            }
            if let Some(next) = report.next_fingerprints.get(key_type) {
                details.insert("NextFingerprint".to_owned(), next.to_string());
            }
            Item {
                id: key_type.clone(),
                title: format!("SSH host key {key_type}"),
                compliant: converged,
                details,
            }
        })
        .collect()
}

/// A detail value: SSM takes at most 4,096 characters.
fn cut(text: &str) -> String {
    text.chars().take(1000).collect()
}

#[cfg(test)]
mod tests {
    use super::items;
    use crate::fingerprint::Fingerprint;
    use crate::install::{InstallReport, InstallResult};

    fn report(result: InstallResult, verified: bool) -> InstallReport {
        let mut report = InstallReport {
            result,
            verified,
            ..InstallReport::default()
        };
        report
            .fingerprints
            .insert("ssh-ed25519".into(), Fingerprint::from_digest(&[1; 32]));
        report
            .fingerprints
            .insert("ssh-rsa".into(), Fingerprint::from_digest(&[2; 32]));
        report
    }

    #[test]
    fn a_verified_install_is_compliant_for_every_key_type() {
        let got = items(&report(InstallResult::Unchanged, true));
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|i| i.compliant), "{got:?}");
        assert_eq!(got[0].id, "ssh-ed25519");
        assert_eq!(got[0].details["ExpectedFingerprint"], got[0].details["Served"]);
    }

    #[test]
    fn a_rollback_or_an_unverified_install_is_not() {
        let mut rolled = report(InstallResult::RolledBack, false);
        rolled.error = Some("sshd -t failed".to_owned());
        let got = items(&rolled);
        assert!(got.iter().all(|i| !i.compliant), "{got:?}");
        assert!(got[0].details["Served"].contains("sshd -t failed"), "{got:?}");
        assert!(
            items(&report(InstallResult::Changed, false))
                .iter()
                .all(|i| !i.compliant)
        );
        // A run that read no set: one item, not compliant.
        let refused = InstallReport::default();
        let got = items(&refused);
        assert_eq!(
            (got.len(), got[0].id.as_str(), got[0].compliant),
            (1, "hostkeyctl", false)
        );
    }
}
