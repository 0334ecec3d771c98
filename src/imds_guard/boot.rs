//! `imds-guard --at-boot`: the guard applied again at every boot by
//! hostkeyctl-imds-guard.service (netfilter rules do not survive a
//! reboot), with the users it allows kept in its settings file.

use super::Action;

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
pub fn settings_users() -> Vec<String> {
    let text = std::fs::read_to_string(SETTINGS_PATH).unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("HOSTKEYCTL_IMDS_ALLOW_USERS="))
        .next_back()
        .map(|v| v.trim_matches('"').split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

/// What `--at-boot` could not do: the guard stands now, not at the next
/// boot (exit 3: the run did not do all it was asked).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BootError(String);

impl crate::exit::ExitStatus for BootError {
    fn status(&self) -> crate::exit::Status {
        crate::exit::Status::Incomplete
    }
}

/// `--at-boot`: what was applied is applied at every boot (the unit and
/// its settings written, the unit enabled); with `--open`, the unit
/// disabled and both files removed.
pub fn at_boot(action: &Action) -> Result<(), BootError> {
    apply_at_boot(action).map_err(BootError)
}

fn apply_at_boot(action: &Action) -> Result<(), String> {
    let systemctl = |args: &[&str]| -> Result<(), String> {
        let out = std::process::Command::new("systemctl")
            .args(args)
            .output()
            .map_err(|e| format!("systemctl {}: {e}", args.join(" ")))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "systemctl {} failed ({}): {}",
            args.join(" "),
            out.status,
            crate::escape::escape(String::from_utf8_lossy(&out.stderr).trim())
        ))
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
                    .map_err(|e| format!("the guard is applied now, but not at boot: cannot write {path}: {e}"))
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
                        return Err(format!(
                            "the guard is removed now, but {path} stays (it applies at boot): {e}"
                        ));
                    }
                    _ => {}
                }
            }
            systemctl(&["daemon-reload"])
        }
        Action::Check => Ok(()),
    }
}
