//! SSM: Run Command ([`SsmDispatcher`], the [`crate::dispatch::Dispatcher`]
//! of push, rotate and `audit --via-ssm`), hostkeyctl's documents
//! ([`documents`]), State Manager associations ([`associations`]), a
//! node's compliance report ([`compliance`]) and which instances SSM
//! manages (`doctor`).

#[cfg(feature = "admin")]
pub mod associations;
pub mod compliance;
#[cfg(feature = "admin")]
pub mod documents;

#[cfg(feature = "admin")]
mod dispatcher;
#[cfg(feature = "admin")]
mod registrations;

#[cfg(feature = "admin")]
pub use associations::SsmAssociations;
#[cfg(feature = "admin")]
pub use dispatcher::{SsmDispatcher, split_output};
