//! `hostkeyctl audit`: what clients see, against the expected set. Parses,
//! runs [`crate::audit::Audit`], prints, and maps its conclusion to an exit
//! code.
mod run;

pub use run::*;
