//! The node's side of enrolment, `hostkeyctl enroll`, in the order it
//! runs:
//!
//! - [`enroll`]: the one flow (enrol, make sshd serve the certificates,
//!   make the ssh client trust the CA, strictly);
//! - [`request`]: its one request (read the node's own keys, prove them
//!   over the identity document, ask the signer, check and write what
//!   came back);
//! - [`configure`]: sshd's drop-in and the ssh client's trust;
//! - [`listener`]: a login node's listener for the cluster (its
//!   configuration and its service in files of their own).

pub mod configure;
pub mod enroll;
pub mod listener;
mod listener_config;
mod listener_service;
pub mod request;

pub use request::*;
