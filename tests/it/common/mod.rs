//! Helpers the tiers share: running the CLI and real OpenSSH tools
//! ([`support`]), the roles of docs/iam.md ([`roles`]), and the test bed
//! ([`bed`], bed tier only).

#[cfg(feature = "testbed")]
pub mod bed;

/// The key set's secret the tests' command lines name (the roles'
/// policies cover `hostkeys/*`); the memory tier's doubles use `hk`.
pub const SECRET: &str = "hostkeys/hk";
// Without the bed tier, part of these go unused.
#[cfg_attr(not(feature = "testbed"), allow(dead_code))]
pub mod roles;
#[cfg_attr(not(feature = "testbed"), allow(dead_code))]
pub mod support;
