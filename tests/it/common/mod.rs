//! Helpers the tiers share: running the CLI and real OpenSSH tools
//! ([`support`]), the roles of docs/iam.md ([`roles`]), and the test bed
//! ([`bed`], bed tier only).

#[cfg(feature = "testbed")]
pub mod bed;
// Without the bed tier, part of these go unused.
#[cfg_attr(not(feature = "testbed"), allow(dead_code))]
pub mod roles;
#[cfg_attr(not(feature = "testbed"), allow(dead_code))]
pub mod support;
