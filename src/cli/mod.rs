//! The command-line surface (clap). These structs only describe arguments;
//! each command turns its arguments into a validated plan before acting.

#[cfg(feature = "admin")]
mod admin;
#[cfg(feature = "admin")]
mod admit;
mod args;
mod enroll;
#[cfg(feature = "admin")]
mod known_hosts;
pub mod renamed;
#[cfg(feature = "admin")]
mod rotate;
#[cfg(feature = "admin")]
mod schedule;
#[cfg(feature = "admin")]
mod setup;
pub use admin::*;
pub use admit::*;
pub use args::*;
pub use enroll::*;
pub use known_hosts::*;
pub use rotate::*;
pub use schedule::*;
pub use setup::*;
