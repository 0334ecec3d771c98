//! The SSH host key scanner: what a client really sees.
//!
//! Like `ssh-keyscan`, it runs an SSH handshake up to the server's host key
//! and aborts right after, with no authentication: one connection per host
//! key algorithm, offering only that algorithm, so a server is asked for each
//! key type it might hold. The handshake uses russh; the key is captured in
//! its server-key check, which then refuses the key to end the connection.
//! The key exchange method offered first is the cheapest one OpenSSH
//! accepts (`curve25519-sha256`, ~5x cheaper for the server than its default
//! `sntrup761x25519-sha512`); the host key does not depend on it.

pub mod hello;
pub mod pacing;
mod prober;
mod record;
mod scanner;
pub mod warnings;
pub use hello::{Greeting, Hello};
pub use prober::*;
pub use scanner::{Endpoint, Probe, ScanPolicy, Scanner, ServedProbe, Usage, to_probe};
