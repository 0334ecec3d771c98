//! `known-hosts --output json`: what it made, as one object of schema
//! [`SCHEMA`], for a script that wants the text and what it is.

use serde::Serialize;

/// The schema's name and version.
pub const SCHEMA: &str = "hostkeyctl-known-hosts/v1";

/// Text made for a client (known_hosts lines, SSHFP records, a config
/// block, `@revoked` lines).
#[derive(Debug, Serialize)]
pub struct MadeText<'a> {
    /// `--client`'s name.
    pub client: Option<&'a str>,
    /// What the text is.
    pub kind: &'a str,
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// The text, as the default output prints it.
    pub text: &'a str,
}

/// A KRL written to a file.
#[derive(Debug, Serialize)]
pub struct MadeKrl<'a> {
    /// `--client`'s name.
    pub client: Option<&'a str>,
    /// Always `krl`.
    pub kind: &'static str,
    /// Where it was written.
    pub path: String,
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    /// What it revokes, and until when.
    pub summary: &'a str,
}

impl<'a> MadeText<'a> {
    /// `text` of `kind`, made for `client`.
    pub fn new(kind: &'a str, client: Option<&'a str>, text: &'a str) -> Self {
        Self {
            client,
            kind,
            schema: SCHEMA,
            text,
        }
    }
}

impl<'a> MadeKrl<'a> {
    /// A KRL at `path`, made for `client`.
    pub fn new(path: &std::path::Path, client: Option<&'a str>, summary: &'a str) -> Self {
        Self {
            client,
            kind: "krl",
            path: path.display().to_string(),
            schema: SCHEMA,
            summary,
        }
    }
}
