//! `hostkeyctl ssm-document print|deploy`.

use crate::aws::{self, ssm::SsmDispatcher};
use crate::cli::{GlobalArgs, SsmDocumentCommand};
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::ssm_document::content;
use crate::ssm_document::publish::{Names, publish, publish_setup};
use crate::ssm_document::setup::NodeBuilds;

/// Runs `ssm-document`.
pub async fn run(command: &SsmDocumentCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    match command {
        SsmDocumentCommand::Print { node_command, kind } => {
            print!("{}", content(*kind, node_command));
        }
        SsmDocumentCommand::Deploy {
            document,
            check_document,
            converge_document,
            node_command,
        } => {
            let ssm = SsmDispatcher::new(&aws::load_config(&global.aws).await?);
            let names = Names {
                install: document,
                check: check_document,
                converge: converge_document,
            };
            let done = publish(&ssm, names, node_command).await?;
            match output {
                OutputFormat::Json => output::print_json(&done.json()).map_err(Failure::usage)?,
                _ => print!("{}", done.text()),
            }
        }
        SsmDocumentCommand::DeploySetup {
            builds,
            builds_at,
            document,
        } => {
            // The files first: nothing is sent for builds that are not.
            let builds = NodeBuilds::from_dir(builds, builds_at.clone()).map_err(Failure::usage)?;
            let ssm = SsmDispatcher::new(&aws::load_config(&global.aws).await?);
            let done = publish_setup(&ssm, document, builds).await?;
            match output {
                OutputFormat::Json => output::print_json(&done).map_err(Failure::usage)?,
                _ => print!("{}", done.text()),
            }
        }
    }
    Ok(Status::Success)
}
