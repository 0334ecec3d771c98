//! A State Manager association of hostkeyctl's converge document: push
//! fleets stay converged, and an instance that comes online (an Auto
//! Scaling group's new login node) converges with no push, no timer and no
//! lifecycle hook.
//!
//! The association's node runs `hostkeyctl install --secret-id ARN`, which
//! installs what the secret's stages say, exactly as a pull fleet's timer
//! does. Its parameters name the secret, never a version: a rotation moves
//! the stages, and the association, run at any moment between its steps,
//! installs what that rotation itself pushes (docs/design-notes.md).
//!
//! [`deploy`] creates the association or brings it to what it must be,
//! [`show`] reads it back (is it still running hostkeyctl's document?),
//! [`delete`] removes it. Each is a flow over [`Associations`] (SSM, or an
//! in-memory double), the store and the documents SSM holds.

mod deleted;
mod name;
mod run;
mod setup;
mod text;
pub use deleted::{Deleted, delete};
pub use name::{default_name, name_for};
pub use run::*;
pub use setup::{DeployReport, SETUP_SCHEDULE, deploy_with_setup, follow_setup, setup_name};
