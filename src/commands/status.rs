//! `hostkeyctl status`: the secret's versions, stages and fingerprints.

use serde::Serialize;

use crate::aws;
use crate::cli::{GlobalArgs, StatusArgs};
use crate::commands::init::{KeyRow, key_rows};
use crate::commands::store_failure;
use crate::exit::{Failure, Status};
use crate::ids::{SecretId, VersionId};
use crate::output::{self, OutputFormat};
use crate::store::{STAGE_CURRENT, STAGE_PENDING, SecretStore, SecretsManagerStore, VersionSelector};

#[derive(Serialize)]
struct VersionRow {
    version_id: VersionId,
    stages: Vec<String>,
    created: Option<String>,
    keys: Vec<KeyRow>,
}

#[derive(Serialize)]
struct StatusReport {
    arn: SecretId,
    name: String,
    kms_key_id: Option<String>,
    rotation_in_flight: Option<VersionId>,
    versions: Vec<VersionRow>,
}

/// Runs `status`.
pub async fn run(args: &StatusArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
    let store = SecretsManagerStore::new(&config);
    let info = store.describe(&args.secret_id).await.map_err(store_failure)?;
    let mut versions = Vec::new();
    for v in &info.versions {
        let stored = store
            .get(&args.secret_id, &VersionSelector::VersionId(v.version_id.clone()))
            .await
            .map_err(store_failure)?;
        versions.push(VersionRow {
            version_id: v.version_id.clone(),
            stages: v.stages.clone(),
            created: v.created.clone(),
            keys: key_rows(&stored.document.keys),
        });
    }
    let current = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
    let rotation_in_flight = info
        .version_with_stage(STAGE_PENDING)
        .filter(|v| Some(&v.version_id) != current.as_ref())
        .map(|v| v.version_id.clone());
    let report = StatusReport {
        arn: info.arn.clone(),
        name: info.name.clone(),
        kms_key_id: info.kms_key_id.clone(),
        rotation_in_flight,
        versions,
    };
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => {
            println!("secret   {}", report.arn);
            println!(
                "kms key  {}",
                report.kms_key_id.as_deref().unwrap_or("aws/secretsmanager (default)")
            );
            match &report.rotation_in_flight {
                Some(v) => println!("rotation in flight: version {v} is AWSPENDING"),
                None => println!("rotation in flight: no"),
            }
            let mut table = output::table(&["VERSION", "STAGES", "CREATED", "ALGORITHM", "FINGERPRINT"]);
            for v in &report.versions {
                for (i, k) in v.keys.iter().enumerate() {
                    let first = i == 0;
                    output::add_row(
                        &mut table,
                        vec![
                            if first { v.version_id.to_string() } else { String::new() },
                            if first { v.stages.join(",") } else { String::new() },
                            if first {
                                v.created.clone().unwrap_or_default()
                            } else {
                                String::new()
                            },
                            k.algorithm.clone(),
                            k.fingerprint.to_string(),
                        ],
                    );
                }
            }
            println!("{table}");
        }
    }
    Ok(Status::Success)
}
