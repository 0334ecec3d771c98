//! The name of a secret's association: readable, and never shared by two
//! secrets.

use super::AssociationError;
use crate::aws_error::AwsError;
use crate::ids::SecretId;
use crate::store::{SecretStore, StoreError};

/// The association's name for the secret named `secret_name` with ARN
/// `arn`: `hostkeyctl-`, the name with every character State Manager
/// refuses (`^[a-zA-Z0-9_\-.]{3,128}$`) as `-` (cut to fit), and the first
/// 12 hex digits of a SHA-256 of the ARN. Two secrets never share one
/// (`hostkeys/a/b` and `hostkeys/a-b` read alike, their ARNs differ), and
/// a secret deleted and made again under its name gets a new one.
pub fn default_name(secret_name: &str, arn: &SecretId) -> String {
    use sha2::Digest;
    let clean: String = secret_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_-.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    let digest = hex::encode(sha2::Sha256::digest(arn.as_str().as_bytes()));
    let suffix = format!("-{}", &digest[..12]);
    let mut out = format!("hostkeyctl-{clean}");
    out.truncate(128 - suffix.len());
    out.push_str(&suffix);
    out
}

/// The association's default name for `secret`, given by name or by ARN,
/// from what Secrets Manager answers (`DescribeSecret`: its name and ARN).
/// A secret that is not there has no known name
/// ([`AssociationError::NameUnknown`]): its association is named with
/// `--name`.
pub async fn name_for(store: &impl SecretStore, secret: &SecretId) -> Result<String, AssociationError> {
    match store.describe(secret).await {
        Ok(info) => Ok(default_name(&info.name, &info.arn)),
        Err(StoreError::Aws(AwsError::NotFound { .. })) => Err(AssociationError::NameUnknown {
            secret: secret.to_string(),
        }),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::default_name;

    #[test]
    fn a_name_state_manager_takes_from_any_secret_name_and_no_two_secrets_share() {
        let arn = |name: &str| {
            crate::ids::SecretId::parse(&format!(
                "arn:aws:secretsmanager:us-east-1:111122223333:secret:{name}-AbCdEf"
            ))
            .unwrap()
        };
        let name = default_name("hostkeys/my-cluster", &arn("hostkeys/my-cluster"));
        assert!(name.starts_with("hostkeyctl-hostkeys-my-cluster-"), "{name}");
        assert!(default_name("hostkeys/hp+x@y", &arn("x")).starts_with("hostkeyctl-hostkeys-hp-x-y-"));
        assert_eq!(default_name(&"a".repeat(200), &arn("a")).len(), 128);
        // Read alike once cleaned, told apart by their ARNs.
        assert_ne!(
            default_name("hostkeys/a/b", &arn("hostkeys/a/b")),
            default_name("hostkeys/a-b", &arn("hostkeys/a-b"))
        );
        let ok = regex_lite::Regex::new(r"^[a-zA-Z0-9_\-.]{3,128}$").unwrap();
        for n in ["hostkeys/a b", "é", &"x/".repeat(100)] {
            assert!(ok.is_match(&default_name(n, &arn("z"))), "{n}");
        }
    }
}
