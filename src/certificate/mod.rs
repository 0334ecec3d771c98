//! Host certificates: signing the canonical keys with a CA, checking a
//! certificate before a node serves it, and judging what a node serves.
//!
//! A certificate is public data (an OpenSSH `*-cert-v01@openssh.com` line);
//! it lives beside its key in the secret document. The CA's private key
//! lives in a secret of its own ([`crate::document::CaDocument`], `hostkeyctl-ca/v1`), which
//! the key set parser refuses, so a CA can never be installed as host keys.

mod ca;
pub mod kms;
mod signer;
mod verdict;

pub use ca::{CaKey, CaReport};
pub use signer::*;
pub use verdict::{CertFinding, CertPolicy, CertVerdict, judge};
