//! `hostkeyctl init`: create the secret with a new or adopted key set.

use anyhow::Context;
use serde::Serialize;

use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::cli::{GlobalArgs, InitArgs};
use crate::document::SecretDocument;
use crate::exit::{Failure, Status};
use crate::ids::{SecretId, VersionId};
use crate::keyset::{KeyAlgorithm, KeySet};
use crate::keyset::{KeyRow, key_rows};
use crate::output::{self, OutputFormat};
use crate::store::{CreateRequest, SecretStore};

#[derive(Serialize)]
struct InitReport<'a> {
    arn: &'a SecretId,
    name: &'a SecretId,
    version_id: &'a VersionId,
    adopted_from: Option<&'a std::path::Path>,
    keys: Vec<KeyRow>,
}

fn plan_keys(args: &InitArgs) -> Result<KeySet, Failure> {
    if let Some(dir) = &args.from_dir {
        let mut keys = KeySet::load_dir(dir)
            .with_context(|| format!("adopting the host keys in {}", dir.display()))
            .map_err(Failure::usage)?;
        if let Some(wanted) = &args.algorithms {
            let missing: Vec<String> = wanted
                .iter()
                .filter(|a| keys.get(**a).is_none())
                .map(|a| a.private_file_name())
                .collect();
            if !missing.is_empty() {
                return Err(Failure::usage(anyhow::anyhow!(
                    "{} has no {}; drop those from --algorithms or add the files",
                    dir.display(),
                    missing.join(", ")
                )));
            }
            keys.retain(wanted);
        }
        return Ok(keys);
    }
    let algorithms = args.algorithms.clone().unwrap_or_else(|| KeyAlgorithm::ALL.to_vec());
    Ok(KeySet::generate(&algorithms, args.rsa_bits)?)
}

/// Runs `init`.
pub async fn run(args: &InitArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let keys = plan_keys(args)?;
    let config = aws::load_config(&global.aws).await?;
    let store = SecretsManagerStore::new(&config);
    let document = SecretDocument::new(keys);
    let request = CreateRequest {
        name: &args.secret_id,
        document: &document,
        description: &args.description,
        tags: &args.tags,
        kms_key_id: args.kms_key_id.as_deref(),
    };
    let (arn, version_id) = store.create(&request).await?;
    let report = InitReport {
        arn: &arn,
        name: &args.secret_id,
        version_id: &version_id,
        adopted_from: args.from_dir.as_deref(),
        keys: key_rows(&document.keys),
    };
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => {
            println!("created {arn}");
            println!("version {version_id} (AWSCURRENT)");
            let mut table = output::table(&["ALGORITHM", "FINGERPRINT"]);
            for k in &report.keys {
                output::add_row(&mut table, vec![k.algorithm.clone(), k.fingerprint.to_string()]);
            }
            output::keep_whole(&mut table, 1);
            println!("{table}");
        }
    }
    Ok(Status::Success)
}
