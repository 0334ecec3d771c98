//! Rollout: install one pinned key set version on many nodes through a
//! [`crate::dispatch::Dispatcher`] (SSM Run Command), a canary wave first when asked, then
//! the rest in batches of at most 50 instance ids, and judge each node by
//! the install report it printed.

pub mod deliver;
mod push;
mod text;
mod waves;

pub use push::{Push, PushError, PushPlan, PushRequest};
pub use text::PushReport;
pub use waves::*;
