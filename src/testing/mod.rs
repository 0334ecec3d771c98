//! In-memory doubles of the outside systems, for testing the flows without
//! AWS, sshd or a network (cargo feature `testing`, as mountpoint-s3 ships
//! its mock client):
//!
//! - [`MemoryStore`]: a secret store with Secrets Manager's stage rules;
//! - [`Faulty`]: wraps a store and fails, or stops dead like a crash, at
//!   the Nth call (of one operation, or of any);
//! - [`MemFleet`]: login nodes as temporary directories, each with an sshd
//!   double ([`MemNode`], an [`crate::install::sshd::SshdControl`]) whose
//!   served keys change only on reload; the fleet answers handshakes
//!   ([`crate::scan::Prober`]) and runs `hostkeyctl install` command lines
//!   in-process ([`MemDispatcher`], a [`crate::dispatch::Dispatcher`]).
//!
//! The real adapters are what the test bed runs; these never replace it.

mod faulty;
mod fleet;
mod memory_store;

#[cfg(test)]
mod flows;
#[cfg(test)]
mod hardening;
#[cfg(test)]
mod matrix;

pub use faulty::{Fault, Faulty};
pub use fleet::{MemDispatcher, MemFleet, MemNode, NodeFaults};
pub use memory_store::MemoryStore;
