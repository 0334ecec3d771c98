//! The admin's side of enrolment (`hostkeyctl enrolment list|revoke`): the
//! bindings table as it stands, and revoking an instance. A revoked
//! instance enrols no more, and its keys reach every node's trust as
//! `@revoked` at that node's next renewal (every 15 minutes with the
//! shipped timer): its certificates stop working before they expire.

use crate::aws_error::AwsError;

use super::Binding;

/// The bindings table, as an admin uses it.
pub trait BindingsAdmin: Sync {
    /// Every binding, by instance id.
    fn list(&self) -> impl Future<Output = Result<Vec<(String, Binding)>, AwsError>> + Send;
    /// Marks `instance_id` revoked; `false` when it has no binding.
    fn revoke(&self, instance_id: &str) -> impl Future<Output = Result<bool, AwsError>> + Send;
}

/// What `revoke` did, per instance.
#[derive(Debug, serde::Serialize)]
pub struct Revoked {
    /// The instances now revoked.
    pub revoked: Vec<String>,
    /// The instances with no binding (nothing to revoke: they never
    /// enrolled, or a binding was removed).
    pub unknown: Vec<String>,
}

impl Revoked {
    /// Exit 3 when an instance had no binding: it is named, and the run
    /// did not do all it was asked.
    pub fn status(&self) -> crate::exit::Status {
        if self.unknown.is_empty() {
            crate::exit::Status::Success
        } else {
            crate::exit::Status::Incomplete
        }
    }
}

/// Revokes each of `instances` (each once, in order).
pub async fn revoke(table: &impl BindingsAdmin, instances: &[String]) -> Result<Revoked, AwsError> {
    let mut done = Revoked {
        revoked: Vec::new(),
        unknown: Vec::new(),
    };
    for id in instances {
        if done.revoked.contains(id) || done.unknown.contains(id) {
            continue;
        }
        if table.revoke(id).await? {
            done.revoked.push(id.clone());
        } else {
            done.unknown.push(id.clone());
        }
    }
    Ok(done)
}

/// `enrolment list --output json`: each binding as an admin reads it.
#[derive(Debug, serde::Serialize)]
pub struct BindingList<'a> {
    /// One row per instance.
    pub bindings: Vec<BindingRow<'a>>,
}

/// One binding of [`BindingList`].
#[derive(Debug, serde::Serialize)]
pub struct BindingRow<'a> {
    /// A login node's claim: certified for no key.
    pub claim: bool,
    /// Its host keys' fingerprints.
    pub fingerprints: &'a [String],
    /// The instance.
    pub instance_id: &'a str,
    /// The last enrolment accepted (Unix milliseconds).
    pub last_enrolled_ms: i64,
    /// Revoked by an admin.
    pub revoked: bool,
}

impl<'a> BindingList<'a> {
    /// The rows of `bindings`, as [`BindingsAdmin::list`] answers them.
    pub fn of(bindings: &'a [(String, Binding)]) -> Self {
        let bindings = bindings
            .iter()
            .map(|(id, b)| BindingRow {
                claim: b.claim,
                fingerprints: &b.fingerprints,
                instance_id: id,
                last_enrolled_ms: b.last_issued_at_ms,
                revoked: b.revoked,
            })
            .collect();
        Self { bindings }
    }
}
