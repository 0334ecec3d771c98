//! `hostkeyctl status`: the secret's versions, stages and fingerprints.

use serde::Serialize;

use crate::aws;
use crate::cli::{GlobalArgs, StatusArgs};
use crate::commands::common::{CertRow, KeyRow, discovery_failure, key_rows, rows};
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
    #[serde(skip_serializing_if = "Vec::is_empty")]
    certificates: Vec<CertRow>,
}

/// Where the fleet is in the rotation protocol, from the stages.
#[derive(Serialize)]
struct Phase {
    /// `announced` (a next set is AWSPENDING; nodes serve it as extra
    /// keys) or `steady` (AWSCURRENT alone).
    state: &'static str,
    /// When the next set was announced (its creation time).
    #[serde(skip_serializing_if = "Option::is_none")]
    since: Option<String>,
    /// The set promoted last (AWSPREVIOUS), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    promoted_from: Option<VersionId>,
}

/// With --target: how many nodes serve AWSCURRENT (and nothing else).
#[derive(Serialize)]
struct Converged {
    nodes: usize,
    serving_current: usize,
    not_converged: Vec<String>,
}

#[derive(Serialize)]
struct StatusReport {
    arn: SecretId,
    name: String,
    kms_key_id: Option<String>,
    rotation_in_flight: Option<VersionId>,
    phase: Phase,
    #[serde(skip_serializing_if = "Option::is_none")]
    converged: Option<Converged>,
    versions: Vec<VersionRow>,
}

/// Audits the targets against `current` by handshake.
async fn converged(
    args: &StatusArgs,
    config: &aws_config::SdkConfig,
    current: &crate::keyset::KeySet,
) -> Result<Converged, Failure> {
    use crate::audit::{Endpoint, ScanPolicy, Verdict, check_endpoints};
    use crate::discovery::{AwsFleet, Fleet};

    let targets = AwsFleet::new(config)
        .with_port(args.port)
        .targets(&args.targets)
        .await
        .map_err(discovery_failure)?;
    let endpoints: Vec<Endpoint> = targets
        .iter()
        .map(|t| Endpoint {
            name: t.name.clone(),
            host: t.address.clone().unwrap_or_default(),
            port: t.port.unwrap_or(args.port),
        })
        .collect();
    let findings = check_endpoints(
        std::sync::Arc::new(crate::scan::SshProber),
        ScanPolicy::default(),
        &endpoints,
        current,
    )
    .await;
    let not_converged: Vec<String> = findings
        .into_iter()
        .filter(|(_, f)| f.iter().any(|f| f.status != Verdict::Ok))
        .map(|(name, _)| name)
        .collect();
    Ok(Converged {
        nodes: endpoints.len(),
        serving_current: endpoints.len() - not_converged.len(),
        not_converged,
    })
}

/// Runs `status`.
pub async fn run(args: &StatusArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
    let store = SecretsManagerStore::new(&config);
    let info = store.describe_versions(&args.secret_id).await.map_err(store_failure)?;
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
            certificates: rows(&stored.document.certificates),
        });
    }
    let current = info.version_with_stage(STAGE_CURRENT).map(|v| v.version_id.clone());
    let rotation_in_flight = info
        .version_with_stage(STAGE_PENDING)
        .filter(|v| Some(&v.version_id) != current.as_ref())
        .map(|v| v.version_id.clone());
    let phase = Phase {
        state: if rotation_in_flight.is_some() {
            "announced"
        } else {
            "steady"
        },
        since: rotation_in_flight
            .as_ref()
            .and_then(|id| info.versions.iter().find(|v| &v.version_id == id))
            .and_then(|v| v.created.clone()),
        promoted_from: info
            .version_with_stage(crate::store::STAGE_PREVIOUS)
            .map(|v| v.version_id.clone()),
    };
    let converged = match (&current, args.targets.is_empty()) {
        (Some(current), false) => {
            let keys = store
                .get(&args.secret_id, &VersionSelector::VersionId(current.clone()))
                .await
                .map_err(store_failure)?
                .document
                .keys;
            Some(converged(args, &config, &keys).await?)
        }
        _ => None,
    };
    let report = StatusReport {
        arn: info.arn.clone(),
        name: info.name.clone(),
        kms_key_id: info.kms_key_id.clone(),
        rotation_in_flight,
        phase,
        converged,
        versions,
    };
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => print_table(&report),
    }
    Ok(Status::Success)
}

fn print_table(report: &StatusReport) {
    println!("secret   {}", report.arn);
    println!(
        "kms key  {}",
        report.kms_key_id.as_deref().unwrap_or("aws/secretsmanager (default)")
    );
    match &report.rotation_in_flight {
        Some(v) => println!(
            "phase    announced: version {v} is AWSPENDING ({}); nodes serve it as extra host keys; `rotate --finish` promotes it",
            crate::rotation::age(report.phase.since.as_deref())
        ),
        None => println!(
            "phase    steady: nodes serve AWSCURRENT alone{}",
            report
                .phase
                .promoted_from
                .as_ref()
                .map(|p| format!(" (promoted from {p}, now AWSPREVIOUS)"))
                .unwrap_or_default()
        ),
    }
    if let Some(c) = &report.converged {
        println!(
            "nodes    {} of {} serve AWSCURRENT{}",
            c.serving_current,
            c.nodes,
            if c.not_converged.is_empty() {
                String::new()
            } else {
                format!("; not yet: {}", crate::escape::escape(&c.not_converged.join(", ")))
            }
        );
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
    let current = report
        .versions
        .iter()
        .find(|v| v.stages.iter().any(|s| s == STAGE_CURRENT));
    if let Some(c) = current.and_then(|v| v.certificates.first()) {
        println!(
            "certificates on AWSCURRENT: serial {}, from CA {}, for {}, valid before {}",
            c.serial,
            c.ca_fingerprint,
            c.principals.join(", "),
            c.valid_before
        );
    }
}
