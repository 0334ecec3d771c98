//! `hostkeyctl status`: the secret's versions, stages and fingerprints.
//! Runs [`crate::status::Overview`] and prints its report.

use crate::aws;
use crate::aws::AwsFleet;
use crate::aws::SecretsManagerStore;
use crate::cli::{GlobalArgs, StatusArgs};
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::scan::ScanPolicy;
use crate::scan::pacing::Paced;
use crate::status;

/// Runs `status`.
pub async fn run(args: &StatusArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let config = aws::load_config(&global.aws).await?;
    let flow = status::Overview {
        store: &SecretsManagerStore::new(&config),
        fleet: &AwsFleet::new(&config).with_port(args.port),
        prober: std::sync::Arc::new(Paced::for_this_user()),
        policy: ScanPolicy::default(),
    };
    let mut report = flow.run(&args.secret_id, &args.targets, args.port).await?;
    report.association = association_of(&config, &report.name, &report.arn).await;
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => print!("{}", report.table(output::columns())),
    }
    Ok(Status::Success)
}

/// The association that keeps the secret's nodes converged, if any. Not
/// being able to read it (a role without `ssm:ListAssociations`) is a
/// warning: the versions and stages are what status is for.
async fn association_of(
    config: &aws_config::SdkConfig,
    secret_name: &str,
    arn: &crate::ids::SecretId,
) -> Option<crate::association::Association> {
    use crate::association::Associations as _;
    let name = crate::association::default_name(secret_name, arn);
    match crate::aws::ssm::SsmAssociations::new(config).named(&name).await {
        Ok(mut all) => all.pop(),
        Err(e) => {
            tracing::warn!("cannot read the association {name}: {e}");
            None
        }
    }
}
