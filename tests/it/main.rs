//! Integration tests, built as one binary (docs/design-notes.md, "The house"), in three
//! tiers, one folder each, each gated once here:
//!
//! - [`memory`]: no outside system: the flows over the doubles of
//!   `hostkeyctl::testing`, documents, the policies' text. Plain
//!   `cargo test` runs it.
//! - [`tools`] (feature `tools`): the built `hostkeyctl` binary and
//!   OpenSSH's tools (`ssh-keygen`, `sshd -t`), no root and no network: the
//!   CLI's transcripts and help, keygen, known_hosts against `ssh-keygen`,
//!   the reports against docs/schemas/ (Python's `jsonschema`), and the
//!   house's rules (`scripts/check_house.py`).
//! - [`bed`] (feature `testbed`, which `make test` turns on): the real
//!   binary against real sshd, HAProxy and the AWS emulator with IAM
//!   enforced; `make deps` installs the parts.
//!
//! [`common`] holds what the tiers share: running the CLI, the roles of
//! docs/iam.md, and the bed's helpers.

// Test code: a panic with the value is the clearest failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod memory;

#[cfg(feature = "tools")]
mod tools;

#[cfg(feature = "testbed")]
mod bed;
