//! Node-side install: fetch the key set, converge the host key files,
//! reload sshd, verify what it serves, and roll back on any failure.
//!
//! The node must never lose sshd: OpenSSH's sshd exits on SIGHUP when a host
//! key is corrupt, and `sshd -t` passes when one of several keys is bad. So
//! every key written is parsed back and checked against its `.pub` before a
//! reload, and what sshd serves after the reload is checked by a real SSH
//! handshake. Any failure after the first write restores the previous files
//! (no free disk space needed, see [`files`]), reloads, and checks that the
//! old keys are served again.

//!
//! The phases, one module each: [`plan`] (read the sets, lock, work out
//! every file), [`apply`] (back up, write, test, reload, roll back),
//! [`verify`] (read back, handshakes), [`check`](mod@check) (`--check`), and the
//! contract with the admin side, [`report`]. The outside systems are
//! seams: the secret store ([`crate::store::SecretStore`]), sshd ([`SshdControl`]) and
//! the handshake ([`crate::scan::Prober`]).

mod apply;
mod certs;
pub mod check;
pub mod compliance;
mod converge;
pub mod files;
pub mod kex;
pub mod metrics;
mod plan;
pub mod reload_marker;
pub mod report;
pub mod run;
pub mod sshd;
pub mod sshd_config;
pub mod verify;

pub use check::check;
pub use converge::*;
pub use plan::{next_private_path, next_public_path};
pub use report::{CheckRow, INSTALL_SCHEMA, InstallReport, InstallResult, LeftOut, Refusal};
use sshd::{ReloadMethod, SshdControl};
pub use verify::served_keys;
