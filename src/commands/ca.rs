//! `hostkeyctl ca init`: the CA secret (docs/certificates.md), never under
//! the prefix the login nodes' role reads.

use serde::Serialize;

use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::cli::{CaCommand, CaInitArgs, GlobalArgs};
use crate::document::CaDocument;
use crate::exit::{Failure, Status};
use crate::keyset::HostKey;
use crate::output::{self, OutputFormat};
use crate::store::{CaCreateRequest, SecretStore, StoreError};

/// Runs `ca ...`.
pub async fn run(command: &CaCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
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
        .check_ca(&args.ca_secret_id)
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
    let config = aws::load_config(&global.aws).await?;
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
        .map_err(|e| match e {
            StoreError::AlreadyExists { name } => Failure::usage(anyhow::anyhow!(
                "secret {name} already exists and ca init never overwrites a CA; to replace a CA, create a new one under another name (docs/certificates.md, \"Rotating the CA\")"
            )),
            other => Failure::from(other),
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
