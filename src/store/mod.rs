//! The Secrets Manager store: the single source of truth for key sets.
//!
//! One secret holds the canonical key set as a [`crate::document::SecretDocument`]. Version
//! stages carry the rotation state (`AWSCURRENT`, `AWSPENDING`,
//! `AWSPREVIOUS`). Reads always name a stage or a version id explicitly;
//! the service's "default version" is never relied on.
//!
//! The public half of the current set is also recorded in the secret's tags
//! (`hostkeyctl:fp:<key type>` and `hostkeyctl:version`), readable with
//! `secretsmanager:DescribeSecret` alone, so auditors never need permission
//! to read private keys (docs/iam.md).

pub mod claim;
mod desired;
mod versions;

pub use desired::{
    DesiredState, Servable, announced_next, desired_state, names_the_retired, retiring_of, servable, servable_with,
    value_of,
};
pub use versions::*;
