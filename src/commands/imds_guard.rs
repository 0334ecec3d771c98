//! `hostkeyctl imds-guard`: the metadata service for root alone
//! ([`crate::imds_guard`]).

use crate::cli::ImdsGuardArgs;
use crate::exit::{Failure, Status};
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
        at_boot(&action).map_err(|e| Failure::with_status(Status::Incomplete, e))?;
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
    let open = reports.iter().any(|r| r.state == State::Open);
    Ok(if action == Action::Check && open {
        Status::Drift
    } else {
        Status::Success
    })
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

/// hostkeyctl-imds-guard.service as contrib/systemd ships it: netfilter
/// rules do not survive a reboot.
const UNIT: &str = include_str!("../../contrib/systemd/hostkeyctl-imds-guard.service");
const UNIT_NAME: &str = "hostkeyctl-imds-guard.service";
const UNIT_PATH: &str = "/etc/systemd/system/hostkeyctl-imds-guard.service";
/// The unit's settings: the uids besides root, resolved now, once, so the
/// boot never waits on a directory service (as the lifecycle step writes it).
const SETTINGS_PATH: &str = "/etc/default/hostkeyctl-imds-guard";

/// The users the guard's settings file allows (`HOSTKEYCTL_IMDS_ALLOW_USERS=`,
/// a comma-separated list of uids or names); none without the file. Each
/// is then resolved by `uid_of`, which refuses what is no user.
fn settings_users() -> Vec<String> {
    let text = std::fs::read_to_string(SETTINGS_PATH).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("HOSTKEYCTL_IMDS_ALLOW_USERS="))
        .next_back()
        .map(|v| v.trim_matches('"').split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// `--at-boot`: what was applied is applied at every boot (the unit and
/// its settings written, the unit enabled); with `--open`, the unit
/// disabled and both files removed.
fn at_boot(action: &Action) -> anyhow::Result<()> {
    let systemctl = |args: &[&str]| -> anyhow::Result<()> {
        let out = std::process::Command::new("systemctl")
            .args(args)
            .output()
            .map_err(|e| anyhow::anyhow!("systemctl {}: {e}", args.join(" ")))?;
        anyhow::ensure!(
            out.status.success(),
            "systemctl {} failed ({}): {}",
            args.join(" "),
            out.status,
            crate::escape::escape(String::from_utf8_lossy(&out.stderr).trim())
        );
        Ok(())
    };
    match action {
        Action::Restrict(uids) => {
            let options = crate::fsutil::WriteOptions {
                mode: 0o644,
                owner: None,
                overwrite: true,
            };
            let allowed: Vec<String> = uids.iter().map(u32::to_string).collect();
            let settings = format!(
                "# Written by hostkeyctl imds-guard --at-boot; read by {UNIT_NAME}.\nHOSTKEYCTL_IMDS_ALLOW_USERS={}\n",
                allowed.join(",")
            );
            let write = |path: &str, text: &str| {
                crate::fsutil::write_atomic(std::path::Path::new(path), text.as_bytes(), &options)
                    .map_err(|e| anyhow::anyhow!("the guard is applied now, but not at boot: cannot write {path}: {e}"))
            };
            write(SETTINGS_PATH, &settings)?;
            write(UNIT_PATH, UNIT)?;
            systemctl(&["daemon-reload"])?;
            systemctl(&["enable", UNIT_NAME])
        }
        Action::Open => {
            // Not enabled is as good as disabled.
            let _ = systemctl(&["disable", UNIT_NAME]);
            for path in [UNIT_PATH, SETTINGS_PATH] {
                match std::fs::remove_file(path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        anyhow::bail!("the guard is removed now, but {path} stays (it applies at boot): {e}")
                    }
                    _ => {}
                }
            }
            systemctl(&["daemon-reload"])
        }
        Action::Check => Ok(()),
    }
}
