//! `status`'s flow: the secret's versions and their stages, where a
//! rotation stands, and which nodes serve AWSCURRENT.

use std::sync::Arc;

use serde::Serialize;

use crate::audit::{Verdict, check_endpoints};
use crate::certificate::{CertRow, cert_rows};
use crate::discovery::{DiscoveryError, Fleet, TargetSpec};
use crate::ids::{SecretId, VersionId};
use crate::keyset::{KeyRow, KeySet, key_rows};
use crate::scan::Prober;
use crate::scan::{Endpoint, ScanPolicy};
use crate::store::{STAGE_CURRENT, STAGE_PENDING, STAGE_PREVIOUS, SecretStore, StoreError};

/// One version of the secret: its stages and its keys' public facts.
#[derive(Debug, Serialize)]
pub struct VersionRow {
    pub version_id: VersionId,
    pub stages: Vec<String>,
    /// Creation time (RFC 3339), when the store says.
    pub created: Option<String>,
    pub keys: Vec<KeyRow>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub certificates: Vec<CertRow>,
}

/// Where the fleet is in the rotation protocol, from the stages.
#[derive(Debug, Serialize)]
pub struct Phase {
    /// `announced` (a next set is AWSPENDING; nodes serve it as extra
    /// keys) or `steady` (AWSCURRENT alone).
    pub state: &'static str,
    /// When the next set was announced: when it was made (its document's
    /// `created`), which a renewal's new version keeps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// The set promoted last (AWSPREVIOUS), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promoted_from: Option<VersionId>,
    /// Until when nodes that installed the last promotion keep offering
    /// the set it retired as extra keys (while the others converge), when
    /// that is now ([`crate::document::Retiring`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retiring_until: Option<String>,
}

/// The notice for users: announced while a set is in flight or announced
/// for the next scheduled rotation, promoted while the retired set is
/// still offered, else steady. It names the secret by its name (users
/// need no account id).
fn notice(phase: &Phase, scheduled_next: bool, name: &str, arn: &SecretId) -> crate::notice::Notice {
    let users = if phase.state == "announced" || scheduled_next {
        crate::notice::Phase::Announced
    } else if phase.retiring_until.is_some() {
        crate::notice::Phase::Promoted
    } else {
        crate::notice::Phase::Steady
    };
    let secret = name.parse::<SecretId>().unwrap_or_else(|_| arn.clone());
    crate::notice::for_phase(users, &secret)
}

/// With targets: how many nodes serve AWSCURRENT (and nothing else).
#[derive(Debug, Serialize)]
pub struct Converged {
    pub nodes: usize,
    pub serving_current: usize,
    pub not_converged: Vec<String>,
}

/// What `status` reports.
#[derive(Debug, Serialize)]
pub struct StatusReport {
    pub arn: SecretId,
    pub name: String,
    pub kms_key_id: Option<String>,
    /// The AWSPENDING version, when it is not also AWSCURRENT.
    pub rotation_in_flight: Option<VersionId>,
    pub phase: Phase,
    /// The set announced for the next scheduled rotation
    /// (HOSTKEYCTL_NEXT), when it holds other keys than AWSCURRENT.
    pub announced: Option<VersionId>,
    /// Secrets Manager's rotation schedule.
    pub schedule: crate::store::RotationSchedule,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub converged: Option<Converged>,
    /// Newest first, as the store lists them.
    pub versions: Vec<VersionRow>,
    /// The State Manager association that keeps the nodes converged
    /// (`association deploy`), when there is one; `status` adds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub association: Option<crate::association::Association>,
    /// What to send users for this phase.
    pub user_notice: crate::notice::Notice,
}

/// Why `status` could not report.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
}

/// The flow: reads the store, and with targets, finds them and scans them.
pub struct Overview<'a, S, F, P> {
    pub store: &'a S,
    pub fleet: &'a F,
    pub prober: Arc<P>,
    /// How to scan: the audit's ([`ScanPolicy::default`]).
    pub policy: ScanPolicy,
}

/// Until when nodes still offer the set the last promotion retired, by the
/// rule `Servable` applies, from the versions `status` read: the retiring
/// the announced set names, AWSPREVIOUS and AWSCURRENT's keys.
fn retiring_until(
    retiring: Option<&crate::document::Retiring>,
    previous: Option<&crate::store::StoredVersion>,
    current: Option<&KeySet>,
) -> Option<String> {
    match (retiring, previous, current) {
        (Some(r), Some(p), Some(c)) if crate::store::names_the_retired(&r.version_id, p, c) => {
            Some(crate::rotation::gate::rfc3339(r.until))
        }
        _ => None,
    }
}

impl<S: SecretStore, F: Fleet, P: Prober> Overview<'_, S, F, P> {
    /// The report on `secret`; with `targets`, scanned at `port` unless a
    /// target says otherwise.
    pub async fn run(&self, secret: &SecretId, targets: &[TargetSpec], port: u16) -> Result<StatusReport, StatusError> {
        let info = self.store.describe_versions(secret).await?;
        let mut versions = Vec::new();
        let mut current_keys: Option<KeySet> = None;
        // When each set was made (the document's own date): a renewal
        // (`sign` during an overlap) stores the announced set again as a
        // new version, which must not restart the overlap's clock.
        let mut made: Vec<(VersionId, String)> = Vec::new();
        let mut next_keys: Option<(VersionId, KeySet)> = None;
        // The retiring the announced set names, and AWSPREVIOUS: what
        // `Servable` reads to tell whether nodes still offer a retired set.
        let mut retiring: Option<crate::document::Retiring> = None;
        let mut previous: Option<crate::store::StoredVersion> = None;
        for v in &info.versions {
            // The empty version Secrets Manager stages as AWSPENDING before
            // a scheduled rotation's createSecret (in progress, or a failed
            // one's) has no keys to show.
            let Some(stored) = crate::store::value_of(self.store, secret, &v.version_id).await? else {
                versions.push(VersionRow {
                    version_id: v.version_id.clone(),
                    stages: v.stages.clone(),
                    created: v.created.clone(),
                    keys: Vec::new(),
                    certificates: Vec::new(),
                });
                continue;
            };
            versions.push(VersionRow {
                version_id: v.version_id.clone(),
                stages: v.stages.clone(),
                created: v.created.clone(),
                keys: key_rows(&stored.document.keys),
                certificates: cert_rows(&stored.document.certificates),
            });
            made.push((v.version_id.clone(), stored.document.created.clone()));
            if v.stages.iter().any(|s| s == crate::store::STAGE_NEXT) {
                next_keys = Some((v.version_id.clone(), stored.document.keys.clone()));
                retiring = crate::store::retiring_of(&stored, self.store.clock()).cloned();
            }
            if v.stages.iter().any(|s| s == STAGE_CURRENT) {
                current_keys = Some(stored.document.keys);
            } else if v.stages.iter().any(|s| s == STAGE_PREVIOUS) {
                previous = Some(stored);
            }
        }
        let current = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
        let rotation_in_flight = info
            .version_with_stage(STAGE_PENDING)
            .filter(|v| Some(&v.version_id) != current.as_ref())
            .map(|v| v.version_id.clone());
        let retiring_until = retiring_until(retiring.as_ref(), previous.as_ref(), current_keys.as_ref());
        let phase = Phase {
            state: if rotation_in_flight.is_some() {
                "announced"
            } else {
                "steady"
            },
            since: rotation_in_flight.as_ref().and_then(|id| {
                let document = made
                    .iter()
                    .find(|(v, _)| v == id)
                    .map(|(_, c)| c.clone())
                    .filter(|c| !c.is_empty());
                document.or_else(|| {
                    info.versions
                        .iter()
                        .find(|v| &v.version_id == id)
                        .and_then(|v| v.created.clone())
                })
            }),
            promoted_from: info.version_with_stage(STAGE_PREVIOUS).map(|v| v.version_id.clone()),
            retiring_until,
        };
        let converged = match (&current_keys, targets.is_empty()) {
            (Some(keys), false) => Some(self.converged(targets, port, keys).await?),
            _ => None,
        };
        let announced = match (&next_keys, &current_keys) {
            (Some((id, next)), Some(current)) if !crate::store::same_keys(next, current) => Some(id.clone()),
            _ => None,
        };
        Ok(StatusReport {
            user_notice: notice(&phase, announced.is_some(), &info.name, &info.arn),
            announced,
            schedule: info.rotation.clone(),
            arn: info.arn.clone(),
            name: info.name.clone(),
            kms_key_id: info.kms_key_id.clone(),
            rotation_in_flight,
            phase,
            converged,
            versions,
            association: None,
        })
    }

    /// Audits the targets against `current` by handshake.
    async fn converged(&self, targets: &[TargetSpec], port: u16, current: &KeySet) -> Result<Converged, StatusError> {
        let endpoints: Vec<Endpoint> = self
            .fleet
            .targets(targets)
            .await?
            .into_iter()
            .map(|t| Endpoint {
                name: t.name,
                host: t.address.unwrap_or_default(),
                port: t.port.unwrap_or(port),
            })
            .collect();
        let findings = check_endpoints(self.prober.clone(), self.policy.clone(), &endpoints, current).await;
        let not_converged: Vec<String> = findings
            .into_iter()
            .filter(|(_, f)| f.iter().any(|f| f.status != Verdict::Ok))
            .map(|(name, _)| name)
            .collect();
        Ok(Converged {
            nodes: endpoints.len(),
            serving_current: endpoints.len() - not_converged.len(),
            not_converged,
        })
    }
}

impl crate::exit::ExitStatus for StatusError {
    /// The cause's status.
    fn status(&self) -> crate::exit::Status {
        match self {
            StatusError::Store(e) => e.status(),
            StatusError::Discovery(e) => e.status(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steady() -> Phase {
        Phase {
            state: "steady",
            since: None,
            promoted_from: None,
            retiring_until: None,
        }
    }

    /// A set announced for the next scheduled rotation is an announcement
    /// to users (their PuTTY files change at the promotion), and the notice
    /// names the secret by its name, never its ARN (no account id).
    #[test]
    fn a_scheduled_announcement_is_announced_to_users_by_the_secrets_name() {
        let arn: SecretId = "arn:aws:secretsmanager:us-east-1:111122223333:secret:hostkeys/c-AbCdEf"
            .parse()
            .unwrap();
        let scheduled = notice(&steady(), true, "hostkeys/c", &arn);
        assert_eq!(scheduled.phase, crate::notice::Phase::Announced);
        assert_eq!(
            notice(&steady(), false, "hostkeys/c", &arn).phase,
            crate::notice::Phase::Steady
        );
        let promoted = Phase {
            retiring_until: Some("2026-12-04T00:00:00Z".to_owned()),
            ..steady()
        };
        assert_eq!(
            notice(&promoted, false, "hostkeys/c", &arn).phase,
            crate::notice::Phase::Promoted
        );
        let steady = notice(&steady(), false, "hostkeys/c", &arn);
        assert!(
            steady
                .attach
                .iter()
                .all(|a| a.contains("--secret-id hostkeys/c ") && !a.contains("111122223333"))
        );
    }
}
