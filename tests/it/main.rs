//! Integration tests, built as one binary (see STYLE.md), in two tiers:
//!
//! - what needs no outside system: the in-memory flows over the doubles of
//!   `hostkeyctl::testing` ([`memory`]), the CLI's transcripts, document
//!   parsing, the policies' text. Plain `cargo test` runs it.
//! - the bed tier (feature `testbed`, which `make test` turns on): the real
//!   `hostkeyctl` binary against real sshd, OpenSSH's tools, HAProxy and
//!   the AWS emulator with IAM enforced; `make deps` installs the parts.

// Test code: a panic with the value is the clearest failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cli;
mod common;
mod document;
mod memory;
mod policies;

#[cfg(feature = "testbed")]
mod admin;
#[cfg(feature = "testbed")]
mod association;
#[cfg(feature = "testbed")]
mod audit;
#[cfg(feature = "testbed")]
mod bootstrap;
#[cfg(feature = "testbed")]
mod certificates;
#[cfg(feature = "testbed")]
mod clients;
#[cfg(feature = "testbed")]
mod iam;
#[cfg(feature = "testbed")]
mod install;
#[cfg(feature = "testbed")]
mod keygen;
#[cfg(feature = "testbed")]
mod known_hosts;
#[cfg(feature = "testbed")]
mod profiles;
#[cfg(feature = "testbed")]
mod releases;
#[cfg(feature = "testbed")]
mod rotate;
#[cfg(feature = "testbed")]
mod scheduled;
#[cfg(feature = "testbed")]
mod ssm_document;
#[cfg(feature = "testbed")]
mod store;
#[cfg(feature = "testbed")]
mod targets;
#[cfg(feature = "testbed")]
mod testbed;
#[cfg(feature = "testbed")]
mod unit_sandbox;
