//! `hostkeyctl ssm-document print|deploy`.

use crate::aws;
use crate::cli::{GlobalArgs, SsmDocumentCommand};
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::ssm_document::{self, Kind};

/// Runs `ssm-document`.
pub async fn run(command: &SsmDocumentCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    match command {
        SsmDocumentCommand::Print { node_command, kind } => {
            print!("{}", ssm_document::content(*kind, node_command));
            Ok(Status::Success)
        }
        SsmDocumentCommand::Deploy {
            name,
            check_name,
            converge_name,
            node_command,
        } => {
            let config = aws::load_config(&global.aws).await?;
            let client = aws_sdk_ssm::Client::new(&config);
            let (version, done) = ssm_document::deploy(&client, name, Kind::Install, node_command)
                .await
                .map_err(Failure::aws)?;
            let (check_version, check_done) = ssm_document::deploy(&client, check_name, Kind::Check, node_command)
                .await
                .map_err(Failure::aws)?;
            let (converge_version, converge_done) =
                ssm_document::deploy(&client, converge_name, Kind::Converge, node_command)
                    .await
                    .map_err(Failure::aws)?;
            match output {
                OutputFormat::Json => output::print_json(&serde_json::json!({
                    "document": name,
                    "default_version": version,
                    "result": done,
                    "check": {
                        "document": check_name,
                        "default_version": check_version,
                        "result": check_done,
                    },
                    "converge": {
                        "document": converge_name,
                        "default_version": converge_version,
                        "result": converge_done,
                    },
                }))
                .map_err(Failure::usage)?,
                _ => {
                    println!(
                        "document {}: {done}; default version {version}. push and rotate use it from now on",
                        crate::escape::escape(name)
                    );
                    println!(
                        "document {}: {check_done}; default version {check_version}. audit --via-ssm uses it from now on",
                        crate::escape::escape(check_name)
                    );
                    println!(
                        "document {}: {converge_done}; default version {converge_version}. association deploy uses it from now on",
                        crate::escape::escape(converge_name)
                    );
                }
            }
            Ok(Status::Success)
        }
    }
}
