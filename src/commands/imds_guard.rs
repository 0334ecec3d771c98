//! `hostkeyctl imds-guard`: the metadata service for root alone
//! ([`crate::imds_guard`]).

use crate::cli::ImdsGuardArgs;
use crate::exit::{Failure, Status};
use crate::imds_guard::boot::{at_boot, settings_users};
use crate::imds_guard::{Action, FamilyReport, State, Tables};
use crate::output::{self, OutputFormat};

/// Runs `imds-guard`.
pub fn run(args: &ImdsGuardArgs, output: OutputFormat) -> Result<Status, Failure> {
    let action = if args.check {
        Action::Check
    } else if args.open {
        Action::Open
    } else {
        // `--at-boot` naming no user (the setup document's run) keeps the
        // users the settings already allow (the lifecycle step's, an
        // earlier run's): a delivery never cuts off a CloudWatch agent.
        let kept = if args.at_boot && args.allow_users.is_empty() {
            settings_users()
        } else {
            Vec::new()
        };
        // An empty HOSTKEYCTL_IMDS_ALLOW_USERS (the unit's settings file
        // names it even when no one is allowed) is no user.
        let mut uids = args
            .allow_users
            .iter()
            .chain(&kept)
            .map(|u| u.trim())
            .filter(|u| !u.is_empty())
            .map(crate::imds_guard::uid_of)
            .collect::<Result<Vec<_>, _>>()?;
        // EC2 Instance Connect's AuthorizedKeysCommand asks the metadata
        // service as this user: refused, every Instance Connect login would
        // fail with nothing in sshd's log to say why.
        if let Ok(uid) = crate::imds_guard::uid_of(crate::imds_guard::INSTANCE_CONNECT_USER) {
            uids.push(uid);
        }
        uids.retain(|u| *u != 0);
        uids.sort_unstable();
        uids.dedup();
        Action::Restrict(uids)
    };
    let reports = crate::imds_guard::run(&Tables::default(), &action)?;
    if args.at_boot {
        at_boot(&action)?;
    }
    match output {
        OutputFormat::Json => output::print_json(&reports).map_err(Failure::usage)?,
        // The node build has no table printer: a line per address.
        _ => {
            for r in &reports {
                println!("{}", line(r));
            }
        }
    }
    Ok(crate::imds_guard::verdict(&action, &reports))
}

fn line(r: &FamilyReport) -> String {
    let state = match &r.state {
        State::RootOnly { allowed } if allowed.is_empty() => "root only".to_owned(),
        State::RootOnly { allowed } => format!(
            "root and uid {}",
            allowed.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        ),
        State::Open => "open to every user".to_owned(),
        State::Ipv6Off => "IPv6 is off on this node: unreachable".to_owned(),
    };
    format!("{}: {state}", r.destination)
}
