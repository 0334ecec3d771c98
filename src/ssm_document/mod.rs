//! hostkeyctl's own SSM Command documents: one can only run
//! `hostkeyctl install` of a pinned version with typed parameters, one only
//! the read-only `hostkeyctl install --check`, and one (a State Manager
//! association's) only `hostkeyctl install` of what the stages say.
//!
//! `AWS-RunShellScript` runs any shell line as root, so a role that may send
//! it has root on every node it targets. These documents run one program
//! with parameters whose `allowedPattern` admits only their grammar (a
//! secret name or ARN, a UUID, SHA256 fingerprints, a region): no quote,
//! space, `;`, `$` or newline can reach the shell on any SSM Agent version,
//! and the values are single-quoted in the script as well.
//!
//! A document is trusted by its content, never by its name: anyone who may
//! update a document named `hostkeyctl-Install` could otherwise make the
//! next routine push run anything as root on every node. So `push`,
//! `rotate` and `audit --via-ssm` read the default version's SHA-256
//! (`DescribeDocument`), refuse one that is not the document this binary
//! deploys, and send exactly that version ([`resolve`]).
//!
//! This module owns the documents' content and parameters; `deployed`
//! owns what SSM holds: reading a document's hash, trusting it, deploying.

mod deployed;
mod kinds;
#[cfg(feature = "admin")]
pub mod publish;
pub mod setup;
#[cfg(test)]
mod tests_setup;

pub use deployed::{ResolveError, SentDocument, Trust, resolve, settle};
pub use kinds::*;
