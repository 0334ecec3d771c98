//! `hostkeyctl push`: install the desired state of the stages on every
//! target node through SSM Run Command, with an optional canary. Parses,
//! runs [`crate::rollout::Push`], prints, and maps the outcome to an exit
//! code.

use crate::aws;
use crate::aws::AwsFleet;
use crate::aws::SecretsManagerStore;
use crate::aws::ssm::SsmDispatcher;
use crate::cli::{GlobalArgs, PushArgs};
use crate::commands::common::{NodeProgress, config_region, print_outcome};
use crate::exit::ExitStatus as _;
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::rollout::{Push, PushRequest, install_command_line};
use crate::store::VersionSelector;

/// Runs `push`.
pub async fn run(args: &PushArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    // What the targets alone refuse, before credentials or a region are needed.
    crate::discovery::check_pushable(&args.targets)?;
    let config = aws::load_config(&global.aws).await?;
    let options = args
        .rollout
        .push_options(config_region(&config)?, None)
        .map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    let store = SecretsManagerStore::new(&config);
    let fleet = AwsFleet::new(&config).with_port(args.port);
    let dispatcher = SsmDispatcher::new(&config);
    let push = Push {
        store: &store,
        fleet: &fleet,
        dispatcher: &dispatcher,
    };
    let request = PushRequest {
        secret: &args.secret_id,
        pin: (args.version_id.is_some() || args.stage.is_some())
            .then(|| VersionSelector::from_options(args.version_id.as_ref(), args.stage.as_ref())),
        targets: &args.targets,
        document: &args.rollout.document,
        node_command: &args.rollout.node_command,
        allow_other_clusters: args.rollout.allow_other_clusters,
    };
    let plan = push.plan(&request).await?;
    let (version, next) = (&plan.desired.current, plan.desired.next.as_ref());
    if args.dry_run {
        let command_line = install_command_line(&options.node_command, version, next, options.region.as_ref())
            .map_err(Failure::usage)?;
        let table = crate::commands::common::instances_table(&plan.instances);
        match output {
            OutputFormat::Json => output::print_json(&plan.dry_run(&command_line)).map_err(Failure::usage)?,
            _ => {
                println!("would send to {} node(s) with {}:", plan.instances.len(), plan.document);
                println!("{table}");
                println!("{command_line}");
            }
        }
        return Ok(Status::Success);
    }
    let bar = NodeProgress::new(plan.instances.len(), global.quiet);
    let outcome = push.run(&plan, &options, &|done, total| bar.update(done, total)).await;
    bar.finish();
    let outcome = outcome?;
    print_outcome(&outcome, &version.arn, output)?;
    Ok(outcome.status())
}
