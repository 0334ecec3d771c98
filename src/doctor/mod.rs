//! `hostkeyctl doctor`: what a set-up lacks, read-only, each finding with
//! what to do. For a secret and its targets: the secret (its fingerprint
//! tags, its `Cluster` tag), hostkeyctl's SSM documents (deployed, and
//! pinned by their hash), the setup document and what it pins, the
//! targets (found, inside the secret's cluster), each target's SSM
//! registration, and on each registered node, through the read-only check
//! document: whether hostkeyctl is there, which release, and whether it
//! serves the set.
//!
//! Nothing is written anywhere: the only command sent is the check
//! document, which reads no secret and changes nothing.

pub mod balancer;
pub mod functions;
mod nodes;
mod run;
mod text;

pub use run::*;
