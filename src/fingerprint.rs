//! The `SHA256:` fingerprint of a public key, as `ssh-keygen -l` prints it.
//!
//! Fingerprints arrive from outside in many places: `--expect` options, the
//! secret's `hostkeyctl:fp:*` tags, a node's install report read back
//! through SSM, the secret document. Each of those is parsed into a
//! [`Fingerprint`] at the boundary, strictly: `SHA256:` followed by exactly
//! 43 characters of unpadded standard base64 that decode canonically to 32
//! bytes. Anything else (a space, a quote, a second option smuggled into a
//! tag value) is refused before it can reach a command line or a report.

use std::fmt;
use std::str::FromStr;

use base64ct::{Base64Unpadded, Encoding};
use ssh_key::{HashAlg, PublicKey};

/// A strictly parsed `SHA256:<43 base64 characters>` fingerprint.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fingerprint(String);

/// Why a text is not a fingerprint. Names what is wrong, never echoes more
/// than a short, escaped prefix of the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{shown} is not a SHA256 fingerprint ({why}); expected SHA256: followed by 43 base64 characters, as `ssh-keygen -l` prints"
)]
pub struct FingerprintError {
    shown: String,
    why: &'static str,
}

const PREFIX: &str = "SHA256:";
const BODY_LEN: usize = 43;

impl Fingerprint {
    /// Parses a fingerprint, strictly.
    pub fn parse(text: &str) -> Result<Self, FingerprintError> {
        let fail = |why| FingerprintError {
            shown: crate::escape::quoted_prefix(text, 60),
            why,
        };
        let body = text
            .strip_prefix(PREFIX)
            .ok_or_else(|| fail("it does not start with SHA256:"))?;
        if body.len() != BODY_LEN {
            return Err(fail("the part after SHA256: is not 43 characters long"));
        }
        let mut digest = [0u8; 32];
        match Base64Unpadded::decode(body, &mut digest) {
            Ok(bytes) if bytes.len() == 32 => Ok(Fingerprint(text.to_owned())),
            _ => Err(fail(
                "the part after SHA256: is not canonical base64 of a SHA-256 digest",
            )),
        }
    }

    /// The fingerprint of a public key.
    pub fn of(public: &PublicKey) -> Self {
        // ssh-key prints exactly the form `parse` accepts.
        Fingerprint(public.fingerprint(HashAlg::Sha256).to_string())
    }

    /// The fingerprint of a SHA-256 digest.
    pub fn from_digest(digest: &[u8; 32]) -> Self {
        Fingerprint(format!("{PREFIX}{}", Base64Unpadded::encode_string(digest)))
    }

    /// The text, `SHA256:...`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Fingerprint {
    type Err = FingerprintError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Fingerprint::parse(s)
    }
}

impl AsRef<str> for Fingerprint {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for Fingerprint {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl serde::Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Fingerprint::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::Fingerprint;

    const GOOD: &str = "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s";

    #[test]
    fn a_real_fingerprint_parses_and_prints_unchanged() {
        let fp = Fingerprint::parse(GOOD).unwrap();
        assert_eq!(fp.to_string(), GOOD);
    }

    #[test]
    fn anything_else_is_refused_with_the_reason() {
        for bad in [
            "",
            "SHA256:",
            "MD5:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s",
            "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s ",
            "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s=",
            "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2",
            "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2$",
            // Same length, but the last character carries bits a 32-byte
            // digest cannot have: not canonical.
            "SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2t",
            "SHA256:x --reload-command 'touch /tmp/pwned'aaaaaaaa",
        ] {
            let err = Fingerprint::parse(bad).unwrap_err().to_string();
            assert!(err.contains("is not a SHA256 fingerprint"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn the_error_escapes_control_characters() {
        let err = Fingerprint::parse("SHA256:\x1b[31mred").unwrap_err().to_string();
        assert!(!err.contains('\x1b'), "{err:?}");
        assert!(err.contains("\\x1b"), "{err}");
    }
}
