//! `hostkeyctl sessions`: the Session Manager commands that run the
//! lifecycle step on a HyperPod instance group's running nodes. Parses,
//! runs [`crate::sessions::plan`], prints a script (or JSON).

use crate::aws;
use crate::aws::AwsFleet;
use crate::cli::{GlobalArgs, SessionsArgs};
use crate::commands::common::config_region;
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::sessions;

/// Runs `sessions`.
pub async fn run(args: &SessionsArgs, global: &GlobalArgs) -> Result<Status, Failure> {
    // What the target alone refuses, before credentials or a region.
    sessions::group_of(&args.targets)?;
    let config = aws::load_config(&global.aws).await?;
    let caller = sessions::Caller {
        region: config_region(&config)?.ok_or_else(|| Failure::usage(anyhow::anyhow!("no region: pass --region")))?,
        profile: global.aws.profile.clone(),
    };
    let report = sessions::plan(
        &AwsFleet::new(&config),
        &args.targets,
        &args.step,
        args.node_type,
        &caller,
    )
    .await?;
    // The script is the output, also into a file or a pipe; JSON only
    // when asked for (as known-hosts).
    if global.output == OutputFormat::Json {
        output::print_json(&report).map_err(Failure::usage)?;
    } else {
        print!("{}", report.script());
    }
    if report.runnable() < report.sessions.len() {
        tracing::warn!(
            "{} of {} node(s) got no command (the script's comments say why: a node not Running, or an instance id that is not one); run sessions again once they are Running",
            report.sessions.len() - report.runnable(),
            report.sessions.len()
        );
    }
    Ok(report.status())
}
