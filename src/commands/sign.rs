//! `hostkeyctl sign`: host certificates on the canonical set
//! (docs/certificates.md), through [`crate::signing`].

use serde::Serialize;

use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::certificate::{CertRow, cert_rows};
use crate::cli::{GlobalArgs, SignArgs};
use crate::exit::{Failure, Status};
use crate::ids::VersionId;
use crate::output::{self, OutputFormat};
use crate::signing::{Signed, SigningError, SigningRequest, sign_key_set};

#[derive(Serialize)]
struct SignReport {
    /// `signed` or `unchanged` (--renew-before found enough validity).
    result: &'static str,
    version_id: VersionId,
    certificates: Vec<CertRow>,
    /// The announced set (AWSPENDING), signed with the current one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_version_id: Option<VersionId>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pending_certificates: Vec<CertRow>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
}

/// Runs `sign`.
pub async fn run(args: &SignArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    // Refused before any AWS configuration is read.
    args.placement
        .key_set_prefix
        .check_ca(&args.ca_secret_id)
        .map_err(|e| Failure::from(SigningError::CaPlacement(e)))?;
    if args.validity_days > crate::certificate::WARN_VALIDITY_DAYS && !global.quiet {
        eprintln!(
            "sign: warning: --validity-days {} is more than {}: a key a rotation retires stays accepted for as long by clients that trust the CA, unless they get `hostkeyctl known-hosts --revoked` or --krl; prefer {} days renewed daily (--renew-before)",
            args.validity_days,
            crate::certificate::WARN_VALIDITY_DAYS,
            crate::certificate::DEFAULT_VALIDITY_DAYS
        );
    }
    let config = aws::load_config(&global.aws).await?;
    let store = SecretsManagerStore::new(&config);
    let request = SigningRequest {
        secret: &args.secret_id,
        ca_secret: &args.ca_secret_id,
        principals: &args.principals,
        validity: args.validity_days.saturating_mul(86_400),
        serial: args.serial,
        renew_before_days: args.renew_before,
        key_set_prefix: &args.placement.key_set_prefix,
        now: crate::certificate::now_unix(),
    };
    let Signed {
        signed,
        version_id,
        certificates,
        pending,
        notes,
    } = sign_key_set(&store, &request).await?;
    let (pending_version_id, pending_certificates) = match pending {
        Some((id, certs)) => (Some(id), cert_rows(&certs)),
        None => (None, Vec::new()),
    };
    print(
        &SignReport {
            result: if signed { "signed" } else { "unchanged" },
            version_id,
            certificates: cert_rows(&certificates),
            pending_version_id,
            pending_certificates,
            notes,
        },
        output,
    )
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
            if let Some(p) = &report.pending_version_id {
                println!(
                    "  and the announced set: version {p} (AWSPENDING), so that it carries fresh certificates when the rotation promotes it"
                );
            }
            for note in &report.notes {
                println!("  {note}");
            }
            let mut table = output::table(&["STAGE", "ALGORITHM", "SERIAL", "PRINCIPALS", "VALID BEFORE"]);
            let rows = report
                .certificates
                .iter()
                .map(|r| ("AWSCURRENT", r))
                .chain(report.pending_certificates.iter().map(|r| ("AWSPENDING", r)));
            for (stage, r) in rows {
                output::add_row(
                    &mut table,
                    vec![
                        stage.to_owned(),
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
