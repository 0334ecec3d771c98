//! Host keys and key sets: one OpenSSH host key per algorithm.
//!
//! This module owns what a "canonical host identity" is: which algorithms
//! hostkeyctl manages, how a set is generated, how an existing node's
//! `ssh_host_<alg>_key` files are adopted, and how a set is written back out
//! as host key files. Private key material lives only inside
//! [`ssh_key::PrivateKey`] (zeroized on drop, redacted by `Debug`) and in
//! [`zeroize::Zeroizing`] buffers.

mod dir;
mod set;
mod short_scalar;
pub use dir::{LoadError, WriteError, WrittenKey};
pub use set::*;
