//! `hostkeyctl ca init`: the CA secret (docs/certificates.md), made by
//! [`crate::ca_init`].

use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::aws::kms::Kms;
use crate::ca_init::{CaSource, InitRequest, init};
use crate::cli::{CaCommand, CaInitArgs, GlobalArgs};
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};

/// Runs `ca ...`.
pub async fn run(command: &CaCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    match command {
        CaCommand::Init(args) => ca_init(args, global, output).await,
    }
}

async fn ca_init(args: &CaInitArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let source = match (&args.from_file, &args.kms_ca_key, args.kms) {
        (Some(path), _, _) => CaSource::File(path),
        (None, Some(key), _) => CaSource::Kms(key),
        (None, None, true) => CaSource::NewKms(args.algorithm),
        (None, None, false) => CaSource::Generate(args.algorithm),
    };
    let request = InitRequest {
        secret: &args.ca_secret_id,
        key_set_prefix: &args.placement.key_set_prefix,
        source,
        tags: &args.tags,
        kms_key_id: args.kms_key_id.as_deref(),
    };
    // Refused before any AWS configuration: a region is not needed to say no.
    request.check().map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    let config = aws::load_config(&global.aws).await?;
    let report = init(&SecretsManagerStore::new(&config), &Kms::new(&config), &request).await?;
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => print!("{}", report.text()),
    }
    Ok(Status::Success)
}
