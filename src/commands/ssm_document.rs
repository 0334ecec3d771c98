//! `hostkeyctl ssm-document print|deploy`.

use crate::aws;
use crate::cli::{GlobalArgs, SsmDocumentCommand};
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::ssm_document;

/// Runs `ssm-document`.
pub async fn run(command: &SsmDocumentCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    match command {
        SsmDocumentCommand::Print { node_command } => {
            print!("{}", ssm_document::content(node_command));
            Ok(Status::Success)
        }
        SsmDocumentCommand::Deploy { name, node_command } => {
            let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
            let client = aws_sdk_ssm::Client::new(&config);
            let (version, done) = ssm_document::deploy(&client, name, node_command)
                .await
                .map_err(Failure::aws)?;
            match output {
                OutputFormat::Json => output::print_json(&serde_json::json!({
                    "document": name,
                    "default_version": version,
                    "result": done,
                }))
                .map_err(Failure::usage)?,
                _ => println!(
                    "document {}: {done}; default version {version}. push and rotate use it from now on",
                    output::escape(name)
                ),
            }
            Ok(Status::Success)
        }
    }
}
