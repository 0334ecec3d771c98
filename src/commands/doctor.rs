//! `hostkeyctl doctor`: runs [`crate::doctor`], prints, and maps the worst
//! finding to an exit code.

use crate::aws::ssm::SsmDispatcher;
use crate::aws::{self, AwsFleet, SecretsManagerStore};
use crate::cli::{DoctorArgs, GlobalArgs};
use crate::doctor::{Doctor, DoctorRequest};
use crate::exit::ExitStatus as _;
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};

/// Runs `doctor`.
pub async fn run(args: &DoctorArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    // HyperPod instance groups are looked at without SSM (doctor::hyperpod).
    if !args
        .targets
        .iter()
        .any(|t| matches!(t, crate::discovery::TargetSpec::HyperPod { .. }))
    {
        crate::discovery::check_pushable(&args.targets)?;
    }
    let config = aws::load_config(&global.aws).await?;
    let store = SecretsManagerStore::new(&config);
    let fleet = AwsFleet::new(&config).with_port(args.port);
    let dispatcher = SsmDispatcher::new(&config);
    let doctor = Doctor {
        store: &store,
        fleet: &fleet,
        dispatcher: &dispatcher,
        managed: &dispatcher,
        balancers: &crate::aws::elb::AwsTargetGroups::new(&config),
        functions: &crate::aws::lambda::LambdaFunctions::new(&config),
    };
    let diagnosis = doctor
        .diagnose(&DoctorRequest {
            secret: &args.secret_id,
            targets: &args.targets,
            node_command: &args.node_command,
            allow_other_clusters: args.allow_other_clusters,
            target_group: args.target_group.as_ref(),
            port: args.port,
            stack: args.stack.as_deref(),
        })
        .await;
    match output {
        OutputFormat::Json => output::print_json(&diagnosis).map_err(Failure::usage)?,
        _ => print!("{}", diagnosis.text()),
    }
    Ok(diagnosis.status())
}
