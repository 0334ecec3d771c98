//! Scheduled rotation, Secrets Manager's schedule driving the rotation
//! (docs/rotation.md, "Scheduled rotation"), by side:
//!
//! - [`admin`]: the admin's `hostkeyctl schedule enable|show|rotate|disable`
//!   over the store, its schedule and the function's configuration;
//! - [`steps`]: the steps the function runs on each event (`createSecret`,
//!   `setSecret`, `testSecret`, `finishSecret`), promoting the set
//!   announced one interval earlier and announcing the next;
//! - [`function`]: the function's configuration, the one secret it
//!   rotates and `rotate`'s options, in its environment.

pub mod admin;
pub mod function;
mod steps;

pub use steps::*;
