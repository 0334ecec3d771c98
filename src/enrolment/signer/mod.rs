//! The signer's side of enrolment:
//!
//! - [`decide`]: what a node's request gets, each check in the order of
//!   its cost (whatever can be refused is refused before any AWS call, and
//!   a refused request never reaches KMS);
//! - [`binding`]: what the signer holds and decides with (a cluster's
//!   members, the bindings of instances to keys, the signing policy) and
//!   why nothing was signed.

pub mod binding;
pub mod decide;

pub use decide::*;
