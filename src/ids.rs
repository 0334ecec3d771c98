//! Identifiers that cross trust boundaries, parsed into types by their
//! AWS grammar: secret ids (names and ARNs), version ids, staging labels,
//! regions, and the program a node runs.
//!
//! They reach nodes on SSM command lines, so each is checked here, once,
//! where it enters (clap, the secret's metadata, a node's report), and is
//! then quoted again by [`crate::shell`] on the way out: two independent
//! layers, so neither alone decides whether a tag writer gets a shell.

use std::fmt;
use std::str::FromStr;

use crate::escape::quoted_prefix;

/// Why a text is not a valid identifier of some kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{shown} is not a valid {kind}: {why}")]
pub struct IdError {
    kind: &'static str,
    shown: String,
    why: String,
}

fn invalid(kind: &'static str, text: &str, why: impl Into<String>) -> IdError {
    IdError {
        kind,
        shown: quoted_prefix(text, 80),
        why: why.into(),
    }
}

/// Characters AWS allows in a secret name: ASCII letters, digits, `/_+=.@-`.
fn secret_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "/_+=.@-".contains(c)
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            /// The text, as AWS spells it.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::parse(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = String::deserialize(deserializer)?;
                $name::parse(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

string_id!(
    /// A secret's name or ARN, as Secrets Manager accepts it.
    SecretId
);

impl SecretId {
    /// Parses a secret name (1–512 of `A-Za-z0-9/_+=.@-`) or a Secrets
    /// Manager ARN (`arn:<partition>:secretsmanager:<region>:<account>:secret:<name>`).
    pub fn parse(text: &str) -> Result<Self, IdError> {
        const KIND: &str = "secret id";
        if text.is_empty() || text.len() > 2048 {
            return Err(invalid(KIND, text, "it must be 1 to 2048 characters long"));
        }
        if let Some(rest) = text.strip_prefix("arn:") {
            let parts: Vec<&str> = rest.splitn(6, ':').collect();
            let ok = parts.len() == 6
                && !parts[0].is_empty()
                && parts[0].chars().all(|c| c.is_ascii_lowercase() || c == '-')
                && parts[1] == "secretsmanager"
                && Region::parse(parts[2]).is_ok()
                && parts[3].len() == 12
                && parts[3].chars().all(|c| c.is_ascii_digit())
                && parts[4] == "secret"
                && !parts[5].is_empty()
                && parts[5].chars().all(secret_name_char);
            return if ok {
                Ok(SecretId(text.to_owned()))
            } else {
                Err(invalid(
                    KIND,
                    text,
                    "an ARN must read arn:PARTITION:secretsmanager:REGION:ACCOUNT:secret:NAME",
                ))
            };
        }
        if text.len() > 512 {
            return Err(invalid(KIND, text, "a secret name is at most 512 characters"));
        }
        if let Some(bad) = text.chars().find(|c| !secret_name_char(*c)) {
            return Err(invalid(
                KIND,
                text,
                format!(
                    "{} is not allowed; a name has ASCII letters, digits and /_+=.@- only",
                    quoted_prefix(&bad.to_string(), 4)
                ),
            ));
        }
        Ok(SecretId(text.to_owned()))
    }
}

impl SecretId {
    /// The secret's name: the id itself, or an ARN's part after `:secret:`
    /// (with the six characters Secrets Manager appends, when the ARN is
    /// complete).
    pub fn name_part(&self) -> &str {
        match self.0.strip_prefix("arn:") {
            Some(rest) => rest.splitn(6, ':').nth(5).unwrap_or_default(),
            None => &self.0,
        }
    }
}

string_id!(
    /// A secret version id: a UUID in its 36-character hyphenated form, as
    /// Secrets Manager and hostkeyctl create them.
    VersionId
);

impl VersionId {
    /// Parses a hyphenated UUID (`8-4-4-4-12` hex digits).
    pub fn parse(text: &str) -> Result<Self, IdError> {
        if text.len() == 36 && uuid::Uuid::try_parse(text).is_ok() {
            Ok(VersionId(text.to_owned()))
        } else {
            Err(invalid(
                "version id",
                text,
                "expected a UUID such as 0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6c (`hostkeyctl status` lists the versions)",
            ))
        }
    }

    /// A fresh random version id (UUID v4), also used as the
    /// `ClientRequestToken` that makes a write idempotent.
    pub fn random() -> Self {
        VersionId(uuid::Uuid::new_v4().hyphenated().to_string())
    }
}

string_id!(
    /// A staging label (`AWSCURRENT`, `AWSPENDING`, or one of the admin's).
    StageLabel
);

impl StageLabel {
    /// Parses a staging label: 1–256 of `A-Za-z0-9_.+=@:/-`, not starting
    /// with `-`.
    pub fn parse(text: &str) -> Result<Self, IdError> {
        let ok = (1..=256).contains(&text.len())
            && !text.starts_with('-')
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.+=@:/-".contains(c));
        if ok {
            Ok(StageLabel(text.to_owned()))
        } else {
            Err(invalid(
                "staging label",
                text,
                "a label has 1 to 256 ASCII letters, digits and _.+=@:/- characters, e.g. AWSCURRENT",
            ))
        }
    }
}

string_id!(
    /// An AWS region name such as `us-east-1`.
    Region
);

impl Region {
    /// Parses a region: lowercase words joined by `-`, ending in a number.
    pub fn parse(text: &str) -> Result<Self, IdError> {
        let parts: Vec<&str> = text.split('-').collect();
        let ok = parts.len() >= 3
            && text.len() <= 40
            && parts[..parts.len() - 1]
                .iter()
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()))
            && parts[0].chars().all(|c| c.is_ascii_lowercase())
            && parts
                .last()
                .is_some_and(|n| !n.is_empty() && n.len() <= 2 && n.chars().all(|c| c.is_ascii_digit()));
        if ok {
            Ok(Region(text.to_owned()))
        } else {
            Err(invalid("AWS region", text, "expected a region name such as us-east-1"))
        }
    }
}

string_id!(
    /// How a node calls hostkeyctl: a name on its PATH or an absolute path.
    Program
);

impl Program {
    /// Parses a program name or absolute path: 1–4096 of `A-Za-z0-9/_.+-`,
    /// not starting with `-`.
    pub fn parse(text: &str) -> Result<Self, IdError> {
        let ok = (1..=4096).contains(&text.len())
            && !text.starts_with('-')
            && text.chars().all(|c| c.is_ascii_alphanumeric() || "/_.+-".contains(c));
        if ok {
            Ok(Program(text.to_owned()))
        } else {
            Err(invalid(
                "program",
                text,
                "give a name on the node's PATH or an absolute path, of ASCII letters, digits and /_.+- only",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Program, Region, SecretId, StageLabel, VersionId};

    #[test]
    fn secret_ids_follow_the_aws_grammar() {
        for good in [
            "hk",
            "hostkeys/my-cluster",
            "a_b+c=d.e@f-g",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:hk-AbCdEf",
            "arn:aws-us-gov:secretsmanager:us-gov-west-1:123456789012:secret:x/y-123456",
        ] {
            assert_eq!(SecretId::parse(good).unwrap().as_str(), good);
        }
        for bad in [
            "",
            "a b",
            "a;b",
            "$(id)",
            "`id`",
            "a'b",
            "a\nb",
            "arn:aws:s3:us-east-1:123456789012:secret:x",
            "arn:aws:secretsmanager:us-east-1:1234:secret:x",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:a b",
        ] {
            assert!(SecretId::parse(bad).is_err(), "{bad:?}");
        }
        assert!(SecretId::parse(&"a".repeat(513)).is_err());
    }

    #[test]
    fn version_ids_are_hyphenated_uuids() {
        let id = VersionId::random();
        assert_eq!(VersionId::parse(id.as_str()).unwrap(), id);
        assert_ne!(VersionId::random(), id);
        for bad in [
            "",
            "0f8e5c1a3b6d4c2e9a7f1d2e3f4a5b6c",
            "{0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6c}",
            "0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6c; id",
            "0f8e5c1a-3b6d-4c2e-9a7f-1d2e3f4a5b6g",
        ] {
            assert!(VersionId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn labels_regions_and_programs_refuse_shell_syntax() {
        assert!(StageLabel::parse("AWSCURRENT").is_ok());
        assert!(StageLabel::parse("-x").is_err());
        assert!(StageLabel::parse("A B").is_err());
        for good in [
            "us-east-1",
            "eu-central-2",
            "us-gov-west-1",
            "us-isob-east-1",
            "ap-southeast-4",
        ] {
            assert!(Region::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "us", "us-east", "us-east-1;id", "US-EAST-1", "us-east-100"] {
            assert!(Region::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Program::parse("/usr/local/bin/hostkeyctl").is_ok());
        assert!(Program::parse("hostkeyctl").is_ok());
        for bad in ["", "-rf", "hostkeyctl; id", "a b", "$(id)"] {
            assert!(Program::parse(bad).is_err(), "{bad:?}");
        }
    }
}
