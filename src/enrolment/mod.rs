//! Enrolment: a cluster node proves which instance it is and receives host
//! certificates for its own keys (which never leave it), for the names AWS
//! gives that instance, never for names it asks for.
//!
//! docs/cluster-trust.md has the design, the checks and what they prove.
//!
//! The signer's side: [`signer`] (what a request gets, and in which order
//! it is checked: everything that needs no AWS call first, KMS last),
//! [`identity`] and [`proof`] (what a request proves); the node's side:
//! [`host`] (`enroll`'s flow), [`node`] (one request), [`configure`] and
//! the listener's files.

#[cfg(feature = "admin")]
pub mod admin;
mod binding;
pub mod configure;
pub mod host;
pub mod identity;
pub mod listener;
mod listener_config;
mod listener_service;
pub mod node;
pub mod proof;
pub mod signer;

pub use binding::*;
use identity::{IdentityError, IidKeys};
use proof::ProofError;
pub use signer::{Cache, Trusted, claim, enrol, revoked, trust};
