//! The secret document: how a key set is stored in Secrets Manager.
//!
//! A `SecretString` holding JSON:
//!
//! ```json
//! {
//!   "format": "hostkeyctl/v1",
//!   "created": "2026-11-30T08:00:00Z",
//!   "keys": [
//!     { "algorithm": "ssh-ed25519",
//!       "public_key": "ssh-ed25519 AAAA... hostkeyctl",
//!       "fingerprint": "SHA256:...",
//!       "private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\n..." }
//!   ],
//!   "retiring": { "version_id": "...", "until": "2026-11-30T09:00:00Z" }
//! }
//! ```
//!
//! `retiring` is optional: on a set announced at a promotion, the set that
//! promotion retired, which nodes keep offering as extra keys until
//! `until` ([`Retiring`]).
//!
//! `keys` is a list rather than an object keyed by algorithm so that a
//! duplicated algorithm is seen and refused instead of silently collapsed by
//! the JSON parser. Parsing validates everything (see [`DocumentError`]) and
//! is all-or-nothing: a document with one bad entry yields no key set.

mod ca;
mod retiring;
mod secret;

pub use ca::{CA_FORMAT_V1, CaDocument, CaError, DEFAULT_KEY_SET_PREFIX, KeySetPrefix};
pub use retiring::{RETIRING_MAX_SECONDS, RETIRING_SECONDS, Retiring};
pub use secret::*;
