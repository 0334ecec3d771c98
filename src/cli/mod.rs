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
#[cfg(feature = "admin")]
pub use admin::*;
#[cfg(feature = "admin")]
pub use admit::*;
pub use args::*;
pub use enroll::*;
#[cfg(feature = "admin")]
pub use known_hosts::*;
#[cfg(feature = "admin")]
pub use rotate::*;
#[cfg(feature = "admin")]
pub use schedule::*;
#[cfg(feature = "admin")]
pub use setup::*;
