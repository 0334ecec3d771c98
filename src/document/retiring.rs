//! The set a promotion retired, still offered for a while: how a pull
//! fleet converges on a promotion without warning anyone.
//!
//! Nodes on timers install a promotion one by one over a timer period.
//! Until every node has, some still sign with the retired set. A node that
//! has installed it offers AWSCURRENT and one extra set; if that extra set
//! were the next one already, an OpenSSH client with `UpdateHostKeys`
//! logging in there would drop the retired keys, and its next login on a
//! node not converged yet would warn. So the set announced at a promotion
//! names the set the promotion retired, and until `until` nodes offer that
//! one as their extra set (the next is offered after): the stages alone
//! decide, on every node and for every reader ([`crate::store::Servable`]),
//! with no node-local memory.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::DocumentError;
use crate::ids::VersionId;

/// How long after a promotion the retired set is still offered by
/// default (`rotate --retire-for`): longer than the shipped timer's period
/// and randomised delay (15 and 5 minutes) with room for a node that was
/// rebooting.
pub const RETIRING_SECONDS: i64 = 3_600;

/// The longest `--retire-for`: a day, the minimum overlap's floor.
pub const RETIRING_MAX_SECONDS: i64 = 86_400;

/// The set a promotion retired (AWSPREVIOUS then), offered as extra keys
/// until `until`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retiring {
    /// The retired version.
    pub version_id: VersionId,
    /// Unix seconds until which nodes offer it.
    pub until: i64,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct RawRetiring {
    version_id: String,
    until: String,
}

impl Retiring {
    pub(super) fn to_raw(&self) -> RawRetiring {
        RawRetiring {
            version_id: self.version_id.to_string(),
            until: OffsetDateTime::from_unix_timestamp(self.until)
                .ok()
                .and_then(|t| t.format(&Rfc3339).ok())
                .unwrap_or_else(|| self.until.to_string()),
        }
    }

    pub(super) fn from_raw(raw: RawRetiring) -> Result<Retiring, DocumentError> {
        let version_id = VersionId::parse(&raw.version_id).map_err(|_| DocumentError::Schema {
            detail: format!("field `retiring.version_id` is {:?}, not a version id", raw.version_id),
        })?;
        let until = OffsetDateTime::parse(&raw.until, &Rfc3339).map_err(|_| DocumentError::Schema {
            detail: format!("field `retiring.until` is {:?}, not an RFC 3339 time", raw.until),
        })?;
        Ok(Retiring {
            version_id,
            until: until.unix_timestamp(),
        })
    }

    /// Whether nodes still offer the retired set at `now` (Unix seconds).
    pub fn offered_at(&self, now: i64) -> bool {
        now < self.until
    }
}

#[cfg(test)]
mod tests {
    use super::Retiring;
    use crate::document::SecretDocument;
    use crate::ids::VersionId;
    use crate::keyset::{KeyAlgorithm, KeySet};

    #[test]
    fn the_retired_set_round_trips_and_a_bad_one_is_refused_by_name() {
        let mut doc = SecretDocument::new(KeySet::generate(&[KeyAlgorithm::Ed25519], 2048).unwrap());
        let retiring = Retiring {
            version_id: VersionId::random(),
            until: 1_800_003_600,
        };
        doc.retiring = Some(retiring.clone());
        let text = doc.to_json().unwrap();
        assert!(text.contains("\"until\": \"2027-01-15T09:00:00Z\""), "{}", &*text);
        assert_eq!(SecretDocument::parse(&text).unwrap().retiring, Some(retiring));
        let plain = SecretDocument::new(doc.keys.clone()).to_json().unwrap();
        assert!(!plain.contains("retiring"), "{}", &*plain);
        let bad = text.replace("2027-01-15T09:00:00Z", "soon");
        let err = SecretDocument::parse(&bad).unwrap_err().to_string();
        assert!(err.contains("retiring.until") && err.contains("soon"), "{err}");
        assert!(
            Retiring {
                version_id: VersionId::random(),
                until: 10
            }
            .offered_at(9)
        );
        assert!(
            !Retiring {
                version_id: VersionId::random(),
                until: 10
            }
            .offered_at(10)
        );
    }
}
