//! Client-side trust in the canonical set: known_hosts lines, plain or
//! hashed (`ssh-keygen -H`'s format: `|1|base64(salt)|base64(HMAC-SHA1(salt,
//! host))`), DNS SSHFP records (`ssh-keygen -r`'s: SHA-1 and SHA-256 of the
//! key blob), `@cert-authority` lines, and the ssh_config block that makes
//! every name of the fleet check one identity; what other clients need is
//! in [`clients`] and [`putty`]. `hostkeyctl known-hosts` prints what this
//! module renders.

pub mod clients;
pub mod made;
pub mod putty;
mod sshfp;
mod trust;
pub use sshfp::sshfp;
pub use trust::*;
