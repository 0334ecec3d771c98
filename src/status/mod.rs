//! `status`'s flow over the store (and, with targets, the fleet and a
//! prober): every version of the secret with its stages and public facts,
//! where the rotation protocol stands, and how many nodes serve AWSCURRENT
//! and nothing else, by handshake with the audit's [`crate::scan::ScanPolicy`].

mod run;
mod text;

pub use run::*;
