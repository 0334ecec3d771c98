//! `hostkeyctl rotate`: sets the rotation up and runs it
//! ([`crate::rotation`]), then prints its report.

use std::sync::Arc;

use crate::aws;
use crate::aws::AwsFleet;
use crate::aws::SecretsManagerStore;
use crate::aws::ssm::SsmDispatcher;
use crate::cli::{GlobalArgs, RotateArgs};
use crate::commands::common::{config_region, print_outcome};
use crate::exit::{ExitStatus as _, Failure, Status};
use crate::output::{self, OutputFormat};
use crate::rotation::setup;
use crate::scan::pacing::Paced;

/// Runs `rotate`.
pub async fn run(args: &RotateArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    // A push rotation's targets are refused before any AWS call when SSM
    // cannot reach them; a pull rotation reaches nodes by handshake alone.
    if !args.pull {
        crate::discovery::check_pushable(&args.targets)?;
    }
    let config = aws::load_config(&global.aws).await?;
    let store = SecretsManagerStore::new(&config);
    let dispatcher = SsmDispatcher::new(&config);
    let fleet = AwsFleet::new(&config).with_port(args.port);
    let push = args.push(config_region(&config)?);
    let prepared = setup::prepare(&store, &fleet, &dispatcher, &args.setup_request(&push)).await?;
    let quiet = global.quiet;
    let say = move |message: &str| {
        if !quiet {
            eprintln!("rotate: {message}");
        }
    };
    let prober = Arc::new(Paced::for_this_user());
    let rotation = prepared.rotation(
        &store,
        &dispatcher,
        prober,
        &args.secret_id,
        args.port,
        &say,
        args.gate(),
    );
    let report = rotation.rotate(args.request()).await?;
    let status = report.result.map_or(Status::Success, |o| o.status());
    if output == OutputFormat::Json {
        output::print_json(&report).map_err(Failure::usage)?;
        return Ok(status);
    }
    if let Some(push) = &report.push {
        print_outcome(push, &report.secret, output)?;
    }
    print!("{}", report.text());
    Ok(status)
}
