//! Integration tests, built as one binary (see STYLE.md). They run the real
//! `hostkeyctl` binary and real OpenSSH tools; the test bed tests need the
//! parts `make test` installs.

// Test code: a panic with the value is the clearest failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod admin;
mod audit;
mod bed;
mod bootstrap;
mod certificates;
mod cli;
mod document;
mod iam;
mod install;
mod keygen;
mod known_hosts;
mod profiles;
mod rotate;
mod ssm_document;
mod store;
mod support;
mod targets;
mod testbed;
mod unit_sandbox;
