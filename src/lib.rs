//! hostkeyctl: one SSH host identity for every login node behind a load
//! balancer.
//!
//! The binary (`src/main.rs`) only parses arguments and maps results to exit
//! codes; everything else lives here, one module per concern:
//!
//! - [`keyset`]: host keys and key sets (generate, adopt from files, write);
//! - [`document`]: the JSON document stored in Secrets Manager;
//! - [`fsutil`]: crash-safe file writes;
//! - [`cli`], [`commands`], [`output`], [`exit`]: the command-line surface.

pub mod audit;
pub mod aws;
pub mod cli;
pub mod commands;
pub mod discovery;
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
pub mod rollout;
pub mod rotation;
pub mod scan;
pub mod shell;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
