//! Rotation: the Secrets Manager rotation protocol for host keys, as steps
//! that can be called one at a time.
//!
//! The secret's stages are the only state, and they say what every node
//! must serve ([`crate::store::DesiredState`]): AWSCURRENT, plus AWSPENDING
//! as extra host keys once a rotation has announced it. `install` without a
//! version (the nodes' timers) and `push` converge nodes to exactly that,
//! so the two never disagree.
//!
//! create (announce: a new set staged AWSPENDING) → set (push the desired
//! state: every target keeps serving AWSCURRENT and also loads the new set,
//! which clients with UpdateHostKeys learn) → test (audit every target still
//! serves AWSCURRENT and nothing else) → finish (AWSCURRENT moves to the new
//! set, AWSPREVIOUS keeps the old one, AWSPENDING comes off) → converge (push
//! the new desired state and audit every target serves it). AWSCURRENT
//! never moves before every target installed the new set. Each step is
//! idempotent, so a crash anywhere is resumed by running the rotation again.
//!
//! A pull fleet (nodes SSM cannot reach, e.g. HyperPod) runs the same
//! stage moves without pushing: announce, let the timers install, finish,
//! and wait for the handshakes to show the new set.
//!
//! [`run`] holds the flow ([`Rotation`]); each step has a file of its own.

mod converge;
mod create;
pub mod gate;
mod promote;
mod rollback;
mod run;
pub mod scheduled;
pub mod setup;
mod start;
mod text;

pub use gate::{Gate, Held, MinOverlap};
pub use run::*;
pub use scheduled::{
    Announcer, FleetMode, LambdaStep, announce_token, check_event_secret, next_label, release_staging,
};
pub use start::{Start, age, plan_start};
