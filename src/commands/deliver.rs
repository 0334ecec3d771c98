//! `hostkeyctl deliver`: the node build onto running nodes through the
//! setup document ([`crate::rollout::deliver`]).

use crate::aws::ssm::SsmDispatcher;
use crate::aws::{self, AwsFleet, SecretsManagerStore};
use crate::cli::{DeliverArgs, GlobalArgs};
use crate::commands::common::NodeProgress;
use crate::exit::ExitStatus as _;
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::rollout::deliver::{self, DeliverOptions, DeliverRequest};

/// Runs `deliver`.
pub async fn run(args: &DeliverArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    crate::discovery::check_pushable(&args.targets)?;
    crate::dispatch::validate_rate("--max-concurrency", &args.max_concurrency)
        .map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    crate::dispatch::validate_rate("--max-errors", &args.max_errors).map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    if args.timeout == 0 {
        return Err(Failure::usage(anyhow::anyhow!("--timeout must be at least 1 second")));
    }
    let config = aws::load_config(&global.aws).await?;
    let store = SecretsManagerStore::new(&config);
    let fleet = AwsFleet::new(&config);
    let dispatcher = SsmDispatcher::new(&config);
    let request = DeliverRequest {
        secret: &args.secret_id,
        targets: &args.targets,
        document: &args.document,
        allow_other_clusters: args.allow_other_clusters,
    };
    let plan = deliver::plan(&dispatcher, &fleet, &store, &request).await?;
    if args.dry_run {
        match output {
            OutputFormat::Json => output::print_json(&plan.dry_run()).map_err(Failure::usage)?,
            _ => {
                println!(
                    "would send {} to {} node(s), which install:",
                    plan.document,
                    plan.instances.len()
                );
                for (arch, sha) in &plan.builds.pins {
                    println!("  {} SHA-256 {sha}", plan.builds.location.uri(*arch));
                }
                let table = crate::commands::common::instances_table(&plan.instances);
                println!("{table}");
            }
        }
        return Ok(Status::Success);
    }
    let options = DeliverOptions {
        max_concurrency: args.max_concurrency.clone(),
        max_errors: args.max_errors.clone(),
        timeout: std::time::Duration::from_secs(args.timeout),
        imds: args.imds.clone(),
    };
    let bar = NodeProgress::new(plan.instances.len(), global.quiet);
    let outcome = deliver::run(&dispatcher, &plan, &options, &|done, total| bar.update(done, total)).await;
    bar.finish();
    let outcome = outcome?;
    match output {
        OutputFormat::Json => output::print_json(&outcome).map_err(Failure::usage)?,
        _ => print!("{}", outcome.text()),
    }
    Ok(outcome.status())
}
