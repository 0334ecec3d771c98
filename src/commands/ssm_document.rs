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
            let config = aws::load_config(&global.aws).await?;
            let ssm = SsmDispatcher::new(&config);
            let done = publish_setup(&ssm, document, builds).await?;
            // Associations run the version they name: the ones of this
            // document follow it to the new one.
            let associations = crate::aws::ssm::SsmAssociations::new(&config);
            let followed =
                crate::association::follow_setup(&associations, document, &done.published.default_version).await?;
            match output {
                OutputFormat::Json => {
                    let report = crate::ssm_document::publish::SetupReport {
                        setup: &done,
                        associations_updated: &followed,
                    };
                    output::print_json(&report).map_err(Failure::usage)?;
                }
                _ => {
                    print!("{}", done.text());
                    for name in &followed {
                        println!(
                            "association {}: now runs version {}",
                            crate::escape::escape(name),
                            done.published.default_version
                        );
                    }
                }
            }
        }
    }
    Ok(Status::Success)
}
