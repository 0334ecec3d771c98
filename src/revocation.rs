//! Revocation: the keys a rotation retired, for clients that trust the CA.
//!
//! A client whose known_hosts holds only an `@cert-authority` line accepts
//! any key with a valid certificate from that CA. A rotation (finish, the
//! abort of a promotion, a CA rotation) retires a set, but its
//! certificates stay valid until they expire: a leaked key of that set
//! would still be accepted. So every key of a retired version (deprecated
//! ones included) whose certificate is still valid, and that no set a node
//! may serve holds ([`crate::store::Servable::never_revoked`]: AWSCURRENT,
//! AWSPENDING, the announced HOSTKEYCTL_NEXT; the set a promotion retired is
//! revocable at once, even while nodes still offer it), is revoked: as `@revoked` known_hosts lines, or as an OpenSSH KRL for the
//! client's `RevokedHostKeys` (PROTOCOL.krl, explicit key section).

use std::collections::BTreeMap;

use serde::Serialize;
use ssh_key::PublicKey;

use crate::fingerprint::Fingerprint;
use crate::ids::{SecretId, VersionId};
use crate::keyset::KeyAlgorithm;
use crate::store::{SecretStore, StoreError, VersionSelector};

/// A key a rotation retired whose certificate is still valid.
#[derive(Clone, Debug, Serialize)]
pub struct Retired {
    /// Its type.
    pub algorithm: KeyAlgorithm,
    /// Its fingerprint.
    pub fingerprint: Fingerprint,
    /// The newest retired version that holds it.
    pub version_id: VersionId,
    /// When its last valid certificate expires (Unix seconds).
    pub valid_before: u64,
    /// The public key.
    #[serde(skip)]
    pub key: PublicKey,
}

/// The retired keys of `secret` still within a certificate's validity at
/// `now`, oldest expiry first. A version that is not a hostkeyctl set
/// (written by hand) or was deleted meanwhile is skipped with a warning;
/// any other AWS failure is an error, never a shorter list.
pub async fn retired(store: &impl SecretStore, secret: &SecretId, now: u64) -> Result<Vec<Retired>, StoreError> {
    let versions = store.all_versions(secret).await?;
    // Never a key of AWSCURRENT, AWSPENDING or the announced set (read by
    // the one function install uses too), compared by key, so an
    // unlabelled copy of such a set is never revoked either.
    let servable = crate::store::servable(store, secret).await?;
    let live: Vec<VersionId> = servable.never_revoked().map(|v| v.version_id.clone()).collect();
    let kept: Vec<Fingerprint> = servable
        .never_revoked()
        .flat_map(|v| v.document.keys.keys().map(|k| k.fingerprint().clone()))
        .collect();
    let mut out: BTreeMap<Fingerprint, Retired> = BTreeMap::new();
    for info in versions.iter().filter(|v| !live.contains(&v.version_id)) {
        let version = match store
            .get(secret, &VersionSelector::VersionId(info.version_id.clone()))
            .await
        {
            Ok(v) => v,
            Err(e @ (StoreError::NotHostkeyctl { .. } | StoreError::Binary { .. })) => {
                tracing::warn!(
                    "version {} of {secret} is not a hostkeyctl key set, so nothing of it is revoked: {e}",
                    info.version_id
                );
                continue;
            }
            // Secrets Manager deletes the oldest deprecated versions (past
            // about 100): listed a moment ago, gone now. Its keys cannot be
            // read, so they cannot be revoked: say so.
            Err(StoreError::Aws(crate::aws_error::AwsError::NotFound { .. })) => {
                tracing::warn!(
                    "version {} of {secret} was deleted while it was read; keys of it still within a certificate's validity are not in this revocation",
                    info.version_id
                );
                continue;
            }
            Err(e) => return Err(e),
        };
        for (algorithm, cert) in &version.document.certificates {
            let Some(key) = version.document.keys.get(*algorithm) else {
                continue;
            };
            let fingerprint = key.fingerprint().clone();
            if cert.valid_before() <= now || kept.contains(&fingerprint) {
                continue;
            }
            let entry = out.entry(fingerprint.clone()).or_insert_with(|| Retired {
                algorithm: *algorithm,
                fingerprint,
                version_id: info.version_id.clone(),
                valid_before: cert.valid_before(),
                key: key.public_key().clone(),
            });
            entry.valid_before = entry.valid_before.max(cert.valid_before());
        }
    }
    let mut list: Vec<Retired> = out.into_values().collect();
    list.sort_by(|a, b| (a.valid_before, &a.fingerprint).cmp(&(b.valid_before, &b.fingerprint)));
    Ok(list)
}

/// When the last retired key's certificate expires: until then the
/// revocation must stay with the clients.
pub fn until(retired: &[Retired]) -> Option<u64> {
    retired.iter().map(|r| r.valid_before).max()
}

/// The secret's tag that records the keys the last revocation hostkeyctl
/// produced names (`known-hosts --revoked` or `--krl`), so that `rotate
/// --rollback` knows which keys clients may already refuse. Each key is
/// its fingerprint's first [`RECORD_CHARS`] base64 characters (tag values
/// hold 256 characters; 96 bits tell a secret's keys apart), newest
/// certificates first, as many as fit.
pub const TAG_REVOKED: &str = "hostkeyctl:revoked";
/// How much of a fingerprint's base64 the record keeps.
pub const RECORD_CHARS: usize = 16;
/// A tag value's limit (Secrets Manager, TagResource).
const TAG_VALUE_MAX: usize = 256;

/// A fingerprint as the record keeps it.
pub fn recorded_form(fingerprint: &Fingerprint) -> String {
    let text = fingerprint.to_string();
    let base64 = text.strip_prefix("SHA256:").unwrap_or(&text);
    base64.chars().take(RECORD_CHARS).collect()
}

/// The record's value after a revocation of `retired`, over the record
/// `before`: this revocation's keys, newest certificates first, then the
/// earlier record's (clients may still hold an older revocation: a key
/// stays recorded when its certificate expires or a rollback serves it
/// again), as many as fit in a tag value.
pub fn record_value(retired: &[Retired], before: &str) -> String {
    let mut newest: Vec<&Retired> = retired.iter().collect();
    newest.sort_by_key(|r| std::cmp::Reverse(r.valid_before));
    let entries = newest
        .into_iter()
        .map(|r| recorded_form(&r.fingerprint))
        .chain(before.split_whitespace().map(str::to_owned));
    let mut value = String::new();
    for entry in entries {
        if value.split(' ').any(|e| e == entry) {
            continue;
        }
        if value.len() + entry.len() + 1 > TAG_VALUE_MAX {
            break;
        }
        if !value.is_empty() {
            value.push(' ');
        }
        value.push_str(&entry);
    }
    value
}

/// Records in the secret's tags that a revocation of `retired` was
/// produced ([`TAG_REVOKED`], merged with the earlier record); done before
/// the revocation is written, so a revocation that reached a client is
/// always recorded.
pub async fn record(store: &impl SecretStore, secret: &SecretId, retired: &[Retired]) -> Result<(), StoreError> {
    let info = store.describe(secret).await?;
    let before = info
        .tags
        .iter()
        .find(|(k, _)| k == TAG_REVOKED)
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    let value = record_value(retired, before);
    if value == before {
        return Ok(());
    }
    store.tag(secret, &[(TAG_REVOKED.to_owned(), value)]).await
}

/// The keys of `keys` that the last revocation hostkeyctl produced for
/// this secret names (its tags, as `DescribeSecret` answers them).
pub fn revoked_before<'a>(tags: &[(String, String)], keys: &'a [Fingerprint]) -> Vec<&'a Fingerprint> {
    let Some((_, value)) = tags.iter().find(|(k, _)| k == TAG_REVOKED) else {
        return Vec::new();
    };
    let named: Vec<&str> = value.split_whitespace().collect();
    keys.iter()
        .filter(|fp| named.contains(&recorded_form(fp).as_str()))
        .collect()
}

/// What a revocation of `retired` is for and until when, for the operator.
pub fn summary(retired: &[Retired]) -> String {
    match until(retired).map(crate::certificate::rfc3339) {
        None => "no retired key of this secret has a certificate that is still valid: nothing to revoke".to_owned(),
        Some(until) => format!(
            "{} retired key(s) with certificates valid until {until} at the latest: keep this revocation with the clients that trust the CA until then",
            retired.len()
        ),
    }
}

/// `@revoked` known_hosts lines for `patterns` (comma-separated), one per
/// retired key, each saying until when it matters.
pub fn revoked_lines(retired: &[Retired], patterns: &str) -> String {
    let mut out = String::new();
    for r in retired {
        let mut key = r.key.clone();
        key.set_comment("");
        let text = key.to_openssh().unwrap_or_default();
        out.push_str(&format!(
            "@revoked {patterns} {} hostkeyctl-retired-until-{}\n",
            text.trim(),
            crate::certificate::rfc3339(r.valid_before)
        ));
    }
    out
}

/// The KRL magic, "SSHKRL\n\0".
const KRL_MAGIC: &[u8; 8] = b"SSHKRL\n\0";
/// PROTOCOL.krl's format version.
const KRL_FORMAT_VERSION: u32 = 1;
/// The section of raw public keys (plain keys; a certificate on one of
/// them is revoked with it, as `ssh_krl_check_key` checks the plain key).
const KRL_SECTION_EXPLICIT_KEY: u8 = 2;

fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    // A key blob is far below 4 GiB; the length cannot overflow.
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// Why a KRL could not be made.
#[derive(Debug, thiserror::Error)]
#[error("encoding the {algorithm} key {fingerprint} for the KRL failed: {source}")]
pub struct KrlError {
    algorithm: KeyAlgorithm,
    fingerprint: Fingerprint,
    source: ssh_key::Error,
}

/// An OpenSSH KRL revoking every retired key, generated at `now` (also its
/// version, so a newer KRL has a higher one). With no key it revokes
/// nothing, so a distribution job can always ship the file.
pub fn krl(retired: &[Retired], now: u64) -> Result<Vec<u8>, KrlError> {
    let mut out = Vec::new();
    out.extend_from_slice(KRL_MAGIC);
    out.extend_from_slice(&KRL_FORMAT_VERSION.to_be_bytes());
    out.extend_from_slice(&now.to_be_bytes()); // krl_version
    out.extend_from_slice(&now.to_be_bytes()); // generated_date
    out.extend_from_slice(&0u64.to_be_bytes()); // flags
    put_string(&mut out, b""); // reserved
    put_string(&mut out, b"hostkeyctl: host keys retired by rotation");
    if retired.is_empty() {
        return Ok(out);
    }
    let mut section = Vec::new();
    for r in retired {
        let blob = r.key.to_bytes().map_err(|source| KrlError {
            algorithm: r.algorithm,
            fingerprint: r.fingerprint.clone(),
            source,
        })?;
        put_string(&mut section, &blob);
    }
    out.push(KRL_SECTION_EXPLICIT_KEY);
    put_string(&mut out, &section);
    Ok(out)
}

/// What a rotation tells the admin to distribute: how many keys and until
/// when (`rotate`'s report).
#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    /// The retired keys still within a certificate's validity.
    pub retired: Vec<Retired>,
    /// When the last of them expires (RFC 3339).
    pub until: String,
}

impl Advice {
    /// The advice for `retired`, `None` when there is nothing to revoke.
    pub fn of(retired: Vec<Retired>) -> Option<Self> {
        let until = until(&retired)?;
        Some(Advice {
            retired,
            until: crate::certificate::rfc3339(until),
        })
    }
}
