//! `hostkeyctl ca init`: the CA secret (docs/certificates.md), never under
//! the prefix the login nodes' role reads.

use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::aws::kms::Kms;
use crate::certificate::kms::KmsAlgorithm;
use crate::certificate::{CaKey, CaReport};
use crate::cli::{CaCommand, CaInitArgs, GlobalArgs};
use crate::document::CaDocument;
use crate::exit::{ExitStatus, Failure, Status};
use crate::keyset::{HostKey, KeyAlgorithm};
use crate::output::{self, OutputFormat};
use crate::store::{CaCreateRequest, SecretStore, StoreError};

/// Runs `ca ...`.
pub async fn run(command: &CaCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    match command {
        CaCommand::Init(args) => ca_init(args, global, output).await,
    }
}

/// The CA: adopted from a file, a new private key, an existing KMS key,
/// or a new one (created only here, after every check that needs no AWS).
async fn ca_key(args: &CaInitArgs, config: &aws_config::SdkConfig) -> Result<CaKey, Failure> {
    if let Some(path) = &args.from_file {
        let text = zeroize::Zeroizing::new(
            std::fs::read_to_string(path)
                .map_err(|e| Failure::usage(anyhow::anyhow!("cannot read the CA key {}: {e}", path.display())))?,
        );
        return HostKey::from_openssh(&text)
            .map(CaKey::from)
            .map_err(|e| Failure::usage(anyhow::anyhow!("{} cannot be the CA: {e}", path.display())));
    }
    let kms = Kms::new(config);
    let key = match (&args.kms_ca_key, args.kms) {
        (Some(key), _) => key.clone(),
        (None, true) => {
            // A new key is billed from its creation: never make one for a
            // CA secret that cannot be created.
            match SecretsManagerStore::new(config).describe(&args.ca_secret_id).await {
                Err(StoreError::Aws(crate::aws::AwsError::NotFound { .. })) => {}
                Ok(_) => {
                    return Err(Failure::usage(anyhow::anyhow!(
                        "secret {} already exists and ca init never overwrites a CA; nothing was created (docs/certificates.md, \"Rotating the CA\")",
                        args.ca_secret_id
                    )));
                }
                Err(e) => {
                    return Err(Failure::with_status(
                        e.status(),
                        anyhow::anyhow!("{e}; nothing was created"),
                    ));
                }
            }
            let algorithm = match args.algorithm {
                KeyAlgorithm::Ed25519 => KmsAlgorithm::Ed25519,
                KeyAlgorithm::Ecdsa => KmsAlgorithm::P256,
                KeyAlgorithm::Rsa => KmsAlgorithm::Rsa,
            };
            let description = format!("SSH host CA of {} (managed by hostkeyctl)", args.ca_secret_id);
            kms.create_ca_key(algorithm, &description)
                .await
                .map_err(|e| Failure::with_status(e.status(), anyhow::anyhow!("{e}; nothing was created")))?
        }
        (None, false) => {
            return HostKey::generate(args.algorithm, crate::keyset::DEFAULT_RSA_BITS)
                .map(CaKey::from)
                .map_err(|e| Failure::usage(anyhow::anyhow!("generating the CA key: {e}")));
        }
    };
    let read = if args.kms {
        kms.new_ca(&key).await
    } else {
        kms.ca(&key).await
    };
    let ca = read.map_err(|e| {
        let created = if args.kms {
            format!(" (the KMS key {key} was created: schedule its deletion or pass it as --kms-ca-key)")
        } else {
            String::new()
        };
        Failure::with_status(
            e.status(),
            anyhow::anyhow!("{e}; the CA secret was not created{created}"),
        )
    })?;
    Ok(CaKey::Kms(std::sync::Arc::new(ca)))
}

async fn ca_init(args: &CaInitArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    args.placement
        .key_set_prefix
        .check_ca(&args.ca_secret_id)
        .map_err(|e| Failure::usage(anyhow::anyhow!("{e}; nothing was created")))?;
    let config = aws::load_config(&global.aws).await?;
    let key = ca_key(args, &config).await?;
    let ca = CaDocument {
        created: crate::document::SecretDocument::new(crate::keyset::KeySet::default()).created,
        key,
    };
    let store = SecretsManagerStore::new(&config);
    let arn = store
        .create_ca(&CaCreateRequest {
            name: &args.ca_secret_id,
            ca: &ca,
            description: "SSH host certificate authority (managed by hostkeyctl)",
            tags: &args.tags,
            kms_key_id: args.kms_key_id.as_deref(),
        })
        .await
        .map_err(|e| {
            let failure = match e {
                StoreError::AlreadyExists { name } => Failure::usage(anyhow::anyhow!(
                    "secret {name} already exists and ca init never overwrites a CA; to replace a CA, create a new one under another name (docs/certificates.md, \"Rotating the CA\")"
                )),
                other => Failure::from(other),
            };
            match (&ca.key, args.kms) {
                // Never leave a new KMS key unnamed.
                (CaKey::Kms(kms), true) => Failure::with_status(
                    failure.status,
                    anyhow::anyhow!(
                        "{}; the new KMS key {} is the CA of no secret: pass it as --kms-ca-key to try again, or schedule its deletion",
                        failure.message(),
                        kms.key_arn
                    ),
                ),
                _ => failure,
            }
        })?;
    let report = CaReport::new(arn.to_string(), &ca.key, args.from_file.clone());
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => print!("{}", report.text()),
    }
    Ok(Status::Success)
}
