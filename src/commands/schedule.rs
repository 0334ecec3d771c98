//! `hostkeyctl schedule enable|show|rotate|disable`: Secrets Manager's
//! rotation schedule on a key set ([`crate::rotation::scheduled::admin`]).

use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::aws::lambda::LambdaFunctions;
use crate::cli::{GlobalArgs, ScheduleCommand};
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::rotation::scheduled::admin::{self as schedule, EnableRequest};

/// Runs `schedule`.
pub async fn run(command: &ScheduleCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let config = aws::load_config(&global.aws).await?;
    let store = SecretsManagerStore::new(&config);
    let (secret, done) = match command {
        ScheduleCommand::Enable(args) => {
            let request = EnableRequest {
                secret: &args.secret_id,
                function: args.function.as_deref(),
                schedule: args.schedule.as_deref(),
                window: args.window.as_deref(),
                ca_secret_id: args.ca_secret_id.as_ref(),
                key_set_prefix: &args.placement.key_set_prefix,
                trust_timers: args.trust_timers,
                now: crate::rotation::gate::unix_now(),
            };
            let done = schedule::enable(&store, &LambdaFunctions::new(&config), &request).await?;
            (&args.secret_id, Some(done))
        }
        ScheduleCommand::Show(args) => (&args.secret_id, None),
        ScheduleCommand::Rotate(args) => (
            &args.secret_id,
            Some(schedule::rotate_now(&store, &args.secret_id).await?),
        ),
        ScheduleCommand::Disable(args) => (&args.secret_id, Some(schedule::disable(&store, &args.secret_id).await?)),
    };
    let report = schedule::report(&store, secret, done).await?;
    if output == OutputFormat::Json {
        output::print_json(&report).map_err(Failure::usage)?;
    } else {
        print!("{}", report.text());
    }
    Ok(Status::Success)
}
