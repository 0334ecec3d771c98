//! Where the expected set comes from: the secret (its fingerprint tags,
//! which `secretsmanager:DescribeSecret` alone reads, or a version's value),
//! a known_hosts file, or fingerprints given on the command line.

use std::collections::BTreeMap;

use super::judge::Expected;
use crate::ids::SecretId;
use crate::scan::ScanAlgorithm;
use crate::store::{STAGE_CURRENT, SecretStore, StoreError, VersionSelector, stage};

/// The expected set's source.
#[derive(Clone, Debug)]
pub enum ExpectedSource {
    /// The secret: the tags of AWSCURRENT when no version is named (with a
    /// warning, the value when the tags are missing or stale), else that
    /// version's value.
    Secret {
        /// The secret.
        secret: SecretId,
        /// A stage or version to read the value of.
        selector: Option<VersionSelector>,
    },
    /// Already known (a known_hosts file, `--expect`).
    Given {
        /// The set.
        expected: Expected,
        /// Where it came from, for the report.
        source: String,
    },
}

/// Reads the expected set of [`ExpectedSource::Secret`], and where it came
/// from, for the report.
pub async fn read(store: &impl SecretStore, source: &ExpectedSource) -> Result<(Expected, String), StoreError> {
    let (secret, explicit) = match source {
        ExpectedSource::Secret { secret, selector } => (secret, selector.clone()),
        ExpectedSource::Given { expected, source } => return Ok((expected.clone(), source.clone())),
    };
    if explicit.is_none() {
        if let Some(found) = read_tags(store, secret).await? {
            return Ok(found);
        }
        tracing::warn!(
            "the fingerprint tags of {secret} are missing or not of the AWSCURRENT version; reading the secret value instead"
        );
    }
    let selector = explicit.unwrap_or_else(|| VersionSelector::Stage(stage(STAGE_CURRENT)));
    let version = store.get(secret, &selector).await?;
    Ok((
        super::expect_keys(&version.document.keys),
        format!("{} version {} ({selector})", version.arn, version.version_id),
    ))
}

/// The public fingerprints of AWSCURRENT from the secret's tags
/// (DescribeSecret only), and where they came from; none when the tags
/// are missing or of another version.
pub async fn read_tags(store: &impl SecretStore, secret: &SecretId) -> Result<Option<(Expected, String)>, StoreError> {
    tags_of(&store.describe(secret).await?)
}

/// [`read_tags`] of a description already read.
pub fn tags_of(info: &crate::store::SecretInfo) -> Result<Option<(Expected, String)>, StoreError> {
    let current = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
    let tagged = info.tagged_fingerprints()?;
    let Some((version, fps)) = tagged.filter(|(v, fps)| Some(v) == current.as_ref() && !fps.is_empty()) else {
        return Ok(None);
    };
    let by_type = fps
        .into_iter()
        .map(|(a, fp)| (ScanAlgorithm::for_managed(a), fp))
        .collect();
    Ok(Some((
        Expected {
            by_type,
            untyped: vec![],
        },
        format!("tags of {} (version {version}, AWSCURRENT)", info.arn),
    )))
}

/// The expected set from a known_hosts file's text (the parser of outside
/// data behind `--known-hosts`): one key per type. `path` names the file in
/// messages.
pub fn expected_from_known_hosts_text(text: &str, path: &std::path::Path) -> Result<(Expected, String), String> {
    let entries = ssh_key::known_hosts::KnownHosts::new(text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot read {} as a known_hosts file: {e}", path.display()))?;
    let mut by_type = BTreeMap::new();
    for entry in entries {
        if entry.marker().is_some() {
            continue;
        }
        let key = entry.public_key();
        let name = key.algorithm().as_str().to_owned();
        let Some(algorithm) = ScanAlgorithm::ALL.into_iter().find(|a| a.key_type() == name) else {
            continue;
        };
        let fp = crate::keyset::fingerprint_of(key);
        if let Some(other) = by_type.insert(algorithm, fp.clone())
            && other != fp
        {
            return Err(format!(
                "{} holds two different {name} keys ({other} and {fp}); give a file with the one expected key per type",
                path.display()
            ));
        }
    }
    if by_type.is_empty() {
        return Err(format!("{} holds no host key", path.display()));
    }
    Ok((
        Expected {
            by_type,
            untyped: vec![],
        },
        format!("known_hosts file {}", path.display()),
    ))
}
