//! `hostkeyctl admit`: parses, runs [`crate::admission::Admission`] once,
//! prints, and maps its outcome to an exit code.

use std::sync::Arc;
use std::time::Duration;

use crate::admission::{Admission, AdmissionReport, AdmissionRequest, Lifecycle, check};
use crate::aws;
use crate::aws::autoscaling::AwsLifecycle;
use crate::aws::elb::AwsTargetGroups;
use crate::aws::{AwsFleet, SecretsManagerStore};
use crate::cli::{AdmitArgs, GlobalArgs};
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::scan::pacing::{Ledger, Paced};
use crate::scan::{ScanPolicy, SshProber};

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
    let request = AdmissionRequest {
        secret: args.secret_id.clone(),
        group: args.target_group.clone(),
        cluster: args.targets.clone(),
        port: args.port,
        max_drain: args.max_drain,
        dry_run: args.dry_run,
        lifecycle: args
            .auto_scaling_group
            .clone()
            .zip(args.lifecycle_hook.clone())
            .map(|(group, hook)| Lifecycle { group, hook }),
    };
    // What the arguments alone refuse, before credentials are needed.
    check(&request)?;
    let config = aws::load_config(&global.aws).await?;
    let admission = Admission {
        store: &SecretsManagerStore::new(&config),
        fleet: &AwsFleet::new(&config).with_port(args.port),
        groups: &AwsTargetGroups::new(&config),
        hooks: Some(&AwsLifecycle::new(&config)),
        prober: Arc::new(Paced::new(SshProber, Arc::new(Ledger::for_this_user()))),
        policy: ScanPolicy {
            concurrency: args.concurrency,
            per_host: args.per_host,
            timeout: Duration::from_secs(args.connect_timeout.max(1)),
            attempts: args.attempts.max(1),
            ..ScanPolicy::default()
        },
    };
    Ok(admission.run(&request).await?)
}
