//! hostkeyctl: one SSH host identity for every login node behind a load
//! balancer.
//!
//! The data path: an admin stores one key set in Secrets Manager
//! ([`store`], as a [`document`] of a [`keyset`]); [`rollout`] sends
//! `hostkeyctl install` to the nodes through SSM Run Command ([`dispatch`]),
//! on command lines built from typed values ([`shell`], [`ids`],
//! [`fingerprint`]); on each node [`install`] fetches the set, writes it,
//! reloads sshd, verifies by handshake and rolls back on failure, and
//! answers with a typed report; [`rotation`] replaces the set step by step
//! with the secret's stages as its only state; [`audit`] checks by real
//! handshakes ([`scan`]) what every node ([`discovery`], [`hostport`]) and
//! the load balancer serve.
//!
//! Every module:
//!
//! - [`keyset`], [`document`], [`fingerprint`], [`ids`], [`hostport`]: the
//!   values, parsed strictly where they enter;
//! - [`store`] (Secrets Manager), [`dispatch`] (SSM), [`scan`] (SSH),
//!   [`discovery`] (EC2), [`aws`] (SDK configuration, errors): the outside
//!   systems, each behind a trait where the flows need a seam;
//! - [`rollout`], [`rotation`], [`install`], [`audit`]: the flows;
//! - [`shell`], [`fsutil`], [`process`]: quoting for node shells,
//!   crash-safe writes, no core dumps;
//! - [`cli`], [`commands`], [`output`], [`exit`]: the command line, printing
//!   and exit codes (only `commands` maps outcomes to exit codes);
//! - `testing` (feature `testing`): in-memory doubles of the outside systems.

#[cfg(feature = "admin")]
pub mod audit;
pub mod aws;
pub mod certificate;
pub mod cli;
pub mod commands;
#[cfg(feature = "admin")]
pub mod discovery;
#[cfg(feature = "admin")]
pub mod dispatch;
pub mod document;
pub mod exit;
pub mod fingerprint;
pub mod fsutil;
pub mod hostport;
pub mod ids;
pub mod install;
pub mod keyset;
pub mod output;
#[cfg(test)]
mod parser_properties;
pub mod process;
#[cfg(feature = "admin")]
pub mod rollout;
#[cfg(feature = "admin")]
pub mod rotation;
pub mod scan;
pub mod shell;
#[cfg(feature = "admin")]
pub mod ssm_document;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
