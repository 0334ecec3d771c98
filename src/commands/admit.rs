//! `hostkeyctl admit`: parses, runs [`crate::admission::Admission`] once,
//! prints, and maps its outcome to an exit code.

use std::sync::Arc;

use crate::admission::{Admission, AdmissionReport, check};
use crate::aws;
use crate::aws::autoscaling::AwsLifecycle;
use crate::aws::elb::AwsTargetGroups;
use crate::aws::{AwsFleet, SecretsManagerStore};
use crate::cli::{AdmitArgs, GlobalArgs};
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::scan::ScanAlgorithm;
use crate::scan::pacing::Paced;

/// Runs `admit`.
pub async fn run(args: &AdmitArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let report = report(args, global).await?;
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => print!("{}", report.table(output::columns())),
    }
    // What AWS refused, where a failure is looked for too.
    for e in &report.errors {
        eprintln!("error: {}", crate::escape::escape(e));
    }
    Ok(report.status())
}

/// One admission run's report (`admit`, and the admission function on
/// each event).
pub async fn report(args: &AdmitArgs, global: &GlobalArgs) -> Result<AdmissionReport, Failure> {
    let request = args.request();
    // What the arguments alone refuse, before credentials are needed.
    check(&request)?;
    let config = aws::load_config(&global.aws).await?;
    let admission = Admission {
        store: &SecretsManagerStore::new(&config),
        fleet: &AwsFleet::new(&config).with_port(args.port),
        groups: &AwsTargetGroups::new(&config),
        hooks: Some(&AwsLifecycle::new(&config)),
        prober: Arc::new(Paced::for_this_user()),
        policy: args.scan.policy(ScanAlgorithm::ALL.to_vec()),
    };
    Ok(admission.run(&request).await?)
}
