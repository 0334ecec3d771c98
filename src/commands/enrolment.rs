//! `hostkeyctl enrolment list|revoke`: the enrolment signer's bindings
//! ([`crate::enrolment::admin`]).

use crate::aws;
use crate::aws::dynamodb::DynamoBindings;
use crate::cli::{EnrolmentCommand, GlobalArgs};
use crate::enrolment::admin::{BindingList, BindingsAdmin, revoke};
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};

/// Runs `enrolment`.
pub async fn run(command: &EnrolmentCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let config = aws::load_config(&global.aws).await?;
    match command {
        EnrolmentCommand::List(args) => {
            let table = DynamoBindings::new(&config, &args.table);
            let bindings = table.list().await?;
            if output == OutputFormat::Json {
                output::print_json(&BindingList::of(&bindings)).map_err(Failure::usage)?;
            } else {
                for (id, b) in &bindings {
                    let state = match (b.revoked, b.claim) {
                        (true, _) => "REVOKED",
                        // A login node's claim: certified for no key.
                        (false, true) => "claimed",
                        (false, false) => "enrolled",
                    };
                    println!("{id}  {state}  {}", b.fingerprints.join(" "));
                }
                println!("{} instance(s)", bindings.len());
            }
            Ok(Status::Success)
        }
        EnrolmentCommand::Revoke(args) => {
            let table = DynamoBindings::new(&config, &args.table);
            let done = revoke(&table, &args.instances).await?;
            if output == OutputFormat::Json {
                output::print_json(&done).map_err(Failure::usage)?;
            } else {
                for id in &done.revoked {
                    println!(
                        "revoked {id}: it enrols no more; every node lists its keys as @revoked at its next renewal"
                    );
                }
                for id in &done.unknown {
                    println!(
                        "{id}: no binding in {} (it never enrolled, or was removed): nothing to revoke",
                        args.table
                    );
                }
            }
            Ok(done.status())
        }
    }
}
