//! Enrolment: a cluster node proves which instance it is and receives host
//! certificates for its own keys (which never leave it), for the names AWS
//! gives that instance, never for names it asks for.
//!
//! docs/cluster-trust.md has the design, the checks and what they prove.
//!
//! - [`node`]: the node's side, `hostkeyctl enroll`, top to bottom: its
//!   flow, its one request, and what it sets up (sshd, the ssh client, a
//!   login node's listener);
//! - [`signer`]: the signer's side, what a request gets (everything that
//!   needs no AWS call first, KMS last), and what it holds (bindings);
//! - [`proof`] and [`identity`]: what a request carries and proves, made
//!   on the node and checked by the signer;
//! - `admin`: the admin's side (`hostkeyctl enrolment list|revoke`).

#[cfg(feature = "admin")]
pub mod admin;
pub mod identity;
pub mod node;
pub mod proof;
pub mod signer;

use identity::{IdentityError, IidKeys};
use proof::ProofError;
pub use signer::binding::*;
pub use signer::{Cache, Trusted, claim, enrol, revoked, trust};
