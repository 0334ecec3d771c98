//! `hostkeyctl ca init` and `hostkeyctl sign`: the CA secret, and host
//! certificates on the canonical set (docs/certificates.md).

use serde::Serialize;

use crate::aws;
use crate::certificate::{self, CaDocument, Signer};
use crate::cli::{CaCommand, CaInitArgs, GlobalArgs, SignArgs};
use crate::commands::store_failure;
use crate::exit::{Failure, Status};
use crate::ids::VersionId;
use crate::keyset::{HostKey, KeyAlgorithm};
use crate::output::{self, OutputFormat, escape};
use crate::store::{
    STAGE_CURRENT, STAGE_PENDING, SecretStore, SecretsManagerStore, StoreError, VersionSelector, stage,
    tag_fingerprints,
};

/// Runs `ca ...`.
pub async fn run_ca(command: &CaCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    match command {
        CaCommand::Init(args) => ca_init(args, global, output).await,
    }
}

#[derive(Serialize)]
struct CaReport {
    arn: String,
    algorithm: String,
    fingerprint: String,
    public_key: String,
    adopted_from: Option<std::path::PathBuf>,
}

async fn ca_init(args: &CaInitArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    args.placement
        .key_set_prefix
        .check_ca(&args.secret_id)
        .map_err(|e| Failure::usage(anyhow::anyhow!("{e}; nothing was created")))?;
    let key = match &args.from_file {
        Some(path) => {
            let text = zeroize::Zeroizing::new(
                std::fs::read_to_string(path)
                    .map_err(|e| Failure::usage(anyhow::anyhow!("cannot read the CA key {}: {e}", path.display())))?,
            );
            HostKey::from_openssh(&text)
                .map_err(|e| Failure::usage(anyhow::anyhow!("{} cannot be the CA: {e}", path.display())))?
        }
        None => {
            let bits = crate::keyset::DEFAULT_RSA_BITS;
            HostKey::generate(args.algorithm, bits)
                .map_err(|e| Failure::usage(anyhow::anyhow!("generating the CA key: {e}")))?
        }
    };
    let ca = CaDocument {
        created: crate::document::SecretDocument::new(crate::keyset::KeySet::default()).created,
        key,
    };
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
    let store = SecretsManagerStore::new(&config);
    let json = ca.to_json().map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    let description = "SSH host certificate authority (managed by hostkeyctl)";
    let arn = store
        .create_ca(
            &args.secret_id,
            &ca,
            &json,
            description,
            &args.tags,
            args.kms_key_id.as_deref(),
        )
        .await
        .map_err(|e| match e {
            StoreError::AlreadyExists { name } => Failure::usage(anyhow::anyhow!(
                "secret {name} already exists and ca init never overwrites a CA; to replace a CA, create a new one under another name (docs/certificates.md, \"Rotating the CA\")"
            )),
            other => store_failure(other),
        })?;
    let report = CaReport {
        arn: arn.to_string(),
        algorithm: ca.key.algorithm().key_type().to_owned(),
        fingerprint: ca.key.fingerprint().to_string(),
        public_key: ca.key.public_line(),
        adopted_from: args.from_file.clone(),
    };
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => {
            println!("created CA {}", report.arn);
            println!("fingerprint {}", report.fingerprint);
            println!("{}", report.public_key);
        }
    }
    Ok(Status::Success)
}

/// A certificate's public facts, for reports.
#[derive(Serialize)]
pub struct CertRow {
    /// Key type.
    pub algorithm: String,
    /// Serial.
    pub serial: u64,
    /// Key id (escaped).
    pub key_id: String,
    /// Principals (escaped).
    pub principals: Vec<String>,
    /// End of validity (RFC 3339).
    pub valid_before: String,
    /// Signing CA.
    pub ca_fingerprint: String,
}

#[derive(Serialize)]
struct SignReport {
    /// `signed` or `unchanged` (--renew-before found enough validity).
    result: &'static str,
    version_id: VersionId,
    certificates: Vec<CertRow>,
}

/// Public facts of every certificate of a set.
pub fn rows(certs: &std::collections::BTreeMap<KeyAlgorithm, ssh_key::Certificate>) -> Vec<CertRow> {
    certs
        .iter()
        .map(|(a, c)| CertRow {
            algorithm: a.key_type().to_owned(),
            serial: c.serial(),
            key_id: escape(c.key_id()),
            principals: c.valid_principals().iter().map(|p| escape(p)).collect(),
            valid_before: certificate::rfc3339(c.valid_before()),
            ca_fingerprint: certificate::ca_fingerprint(c).to_string(),
        })
        .collect()
}

/// Whether `--renew-before` finds nothing to do: every key certified by
/// this CA, for exactly these names, with more than `days` left.
fn fresh_enough(
    current: &crate::document::SecretDocument,
    ca: &HostKey,
    principals: &[certificate::Principal],
    days: u64,
    now: u64,
) -> bool {
    let mut wanted: Vec<&str> = principals.iter().map(certificate::Principal::as_str).collect();
    wanted.sort_unstable();
    wanted.dedup();
    current.keys.keys().all(|k| {
        current.certificates.get(&k.algorithm()).is_some_and(|c| {
            let mut listed: Vec<&str> = c.valid_principals().iter().map(String::as_str).collect();
            listed.sort_unstable();
            certificate::ca_fingerprint(c) == *ca.fingerprint()
                && listed == wanted
                && c.valid_before().saturating_sub(now) > days.saturating_mul(86_400)
        })
    })
}

/// Runs `sign`.
pub async fn run(args: &SignArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    args.placement
        .key_set_prefix
        .check_ca(&args.ca_secret_id)
        .map_err(|e| Failure::usage(anyhow::anyhow!("{e}; nothing was read or signed")))?;
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
    let store = SecretsManagerStore::new(&config);
    let ca = store
        .get_ca(&args.ca_secret_id)
        .await
        .map_err(store_failure)?
        .map_err(|e| Failure::usage(anyhow::anyhow!("{}: {e}", args.ca_secret_id)))?;
    let info = store.describe(&args.secret_id).await.map_err(store_failure)?;
    let current_id = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
    if let Some(pending) = info.version_with_stage(STAGE_PENDING)
        && Some(&pending.version_id) != current_id.as_ref()
    {
        return Err(Failure::usage(anyhow::anyhow!(
            "a rotation is in flight (AWSPENDING is version {}); finish it (`hostkeyctl rotate --resume --ca-secret-id ...` signs its set) or abort it, then sign",
            pending.version_id
        )));
    }
    let current = store
        .get(&args.secret_id, &VersionSelector::Stage(stage(STAGE_CURRENT)))
        .await
        .map_err(store_failure)?;
    let now = certificate::now_unix();
    if let Some(days) = args.renew_before
        && fresh_enough(&current.document, &ca.key, &args.principals, days, now)
    {
        return print(
            &SignReport {
                result: "unchanged",
                version_id: current.version_id.clone(),
                certificates: rows(&current.document.certificates),
            },
            output,
        );
    }
    let signer = Signer {
        ca: ca.key,
        principals: args.principals.clone(),
        validity: args.validity_days.saturating_mul(86_400),
        serial: args
            .serial
            .unwrap_or_else(|| certificate::next_serial(&current.document.certificates)),
        signer: certificate::default_signer(),
    };
    let token = VersionId::random();
    let mut document = current.document.clone();
    document.certificates = signer
        .sign(&document.keys, &token)
        .map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    let id = store_as_current(&store, &args.secret_id, &document, &token, &current.version_id).await?;
    tag_fingerprints(&store, &args.secret_id, &id, &document.keys)
        .await
        .map_err(store_failure)?;
    print(
        &SignReport {
            result: "signed",
            version_id: id,
            certificates: rows(&document.certificates),
        },
        output,
    )
}

/// Stores `document` as version `token` and makes it AWSCURRENT, moved
/// from `from` (the version read), which Secrets Manager refuses when it
/// moved meanwhile: signing never puts old keys back. The version carries a
/// claim label until then (a version without labels would be AWSCURRENT at
/// once), which comes off whatever happens; a failure says what is left.
async fn store_as_current(
    store: &SecretsManagerStore,
    secret: &crate::ids::SecretId,
    document: &crate::document::SecretDocument,
    token: &VersionId,
    from: &VersionId,
) -> Result<VersionId, Failure> {
    // The same keys with new certificates become AWSCURRENT: nodes (push
    // or their timer) converge to it, which writes the certificates and
    // reloads sshd; the keys stay, so no client sees a change.
    let claim = crate::rotation::claim_label(token).map_err(|e| Failure::usage(anyhow::anyhow!(e.to_string())))?;
    let id = store
        .put_version(secret, document, token, std::slice::from_ref(&claim))
        .await
        .map_err(store_failure)?;
    let moved = store
        .move_stage(secret, &stage(STAGE_CURRENT), Some(&id), Some(from))
        .await;
    // Whatever the move did, the claim comes off: a failed sign leaves the
    // secret's stages as it found them, and one that cannot even do that
    // says what is left and who removes it.
    let left = match store.move_stage(secret, &claim, None, Some(&id)).await {
        Ok(()) => None,
        Err(e) => {
            tracing::debug!("removing the claim {claim} from version {id} failed: {e}");
            Some(format!(
                "version {id} still carries the label {claim}, as removing it failed too; it is no stage the nodes read, and the next `hostkeyctl rotate` or `aws secretsmanager update-secret-version-stage --secret-id {secret} --version-stage {claim} --remove-from-version-id {id}` removes it"
            ))
        }
    };
    if let Err(e) = moved {
        let state = left.unwrap_or_else(|| "the secret's stages are as sign found them".to_owned());
        return Err(match e {
            StoreError::LabelHeld { .. } => Failure::usage(anyhow::anyhow!(
                "AWSCURRENT of {secret} moved while signing (a rotation finished?); nothing was made current and {state}. Run sign again"
            )),
            other => {
                let failure = store_failure(other);
                Failure::with_status(
                    failure.status,
                    failure.error.context(format!("sign made nothing current, and {state}")),
                )
            }
        });
    }
    if let Some(left) = left {
        tracing::warn!("{left}");
    }
    Ok(id)
}

fn print(report: &SignReport, output: OutputFormat) -> Result<Status, Failure> {
    match output {
        OutputFormat::Json => output::print_json(report).map_err(Failure::usage)?,
        _ => {
            match report.result {
                "unchanged" => println!(
                    "certificates of version {} are fresh enough; nothing signed",
                    report.version_id
                ),
                _ => println!("signed: version {} (AWSCURRENT)", report.version_id),
            }
            let mut table = output::table(&["ALGORITHM", "SERIAL", "PRINCIPALS", "VALID BEFORE"]);
            for r in &report.certificates {
                output::add_row(
                    &mut table,
                    vec![
                        r.algorithm.clone(),
                        r.serial.to_string(),
                        r.principals.join(","),
                        r.valid_before.clone(),
                    ],
                );
            }
            println!("{table}");
        }
    }
    Ok(Status::Success)
}
