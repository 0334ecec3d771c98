//! `hostkeyctl install`: the node side. Prints one JSON line on stdout
//! (what `push` reads back from SSM) and a human summary on stderr.

use std::time::Duration;

use crate::aws;
use crate::cli::{GlobalArgs, InstallArgs};
use crate::commands::store_failure;
use crate::exit::{Failure, Status};
use crate::fingerprint::Fingerprint;
use crate::install::sshd::{ReloadMethod, Sshd, SshdControl};
use crate::install::{self, InstallOptions, InstallReport, InstallResult, Refusal};
use crate::scan::pacing::{Ledger, Paced};
use crate::scan::{Prober, SshProber};
use crate::store::{SecretStore, SecretsManagerStore, VersionSelector};

/// The exit status of an install or check, from its report: the one
/// place where install outcomes become exit codes.
pub fn exit_status(report: &InstallReport) -> Status {
    match report.result {
        InstallResult::Changed | InstallResult::Unchanged | InstallResult::Reloaded | InstallResult::Match => {
            Status::Success
        }
        InstallResult::Drift => Status::Drift,
        InstallResult::Refused => match report.refusal {
            Some(Refusal::Aws) => Status::Aws,
            Some(Refusal::Unavailable) => Status::Incomplete,
            Some(Refusal::BadInput) | None => Status::Usage,
        },
        InstallResult::RolledBack | InstallResult::Failed | InstallResult::Incomplete => Status::Incomplete,
        InstallResult::RollbackFailed => Status::RollbackFailed,
        InstallResult::InstalledWithoutCertificates => Status::CertificatesNeedRenewal,
    }
}

/// The node's sshd as the options name it.
pub fn sshd_of(args: &InstallArgs) -> Sshd {
    Sshd {
        binary: args.sshd.clone(),
        config: args
            .sshd_config
            .clone()
            .unwrap_or_else(|| args.ssh_dir.join("sshd_config")),
    }
}

/// The validated options of an install that reads the secret.
pub fn install_options(args: &InstallArgs) -> Result<InstallOptions, Failure> {
    let Some(secret_id) = args.secret_id.clone() else {
        return Err(Failure::usage(anyhow::anyhow!(
            "--secret-id is required (or HOSTKEYCTL_SECRET_ID); `install --check` may use --expect instead"
        )));
    };
    let reload = if args.no_reload {
        ReloadMethod::None
    } else if let Some(cmd) = &args.reload_command {
        ReloadMethod::Command(cmd.clone())
    } else {
        ReloadMethod::Auto
    };
    Ok(InstallOptions {
        secret_id,
        selector: VersionSelector::from_options(args.version_id.as_ref(), args.stage.as_ref()),
        expect: args.expect.clone(),
        ssh_dir: args.ssh_dir.clone(),
        reload,
        verify_address: args.verify_address.clone(),
        state_dir: args.state_dir.clone(),
        lock_file: args
            .lock_file
            .clone()
            .unwrap_or_else(|| args.state_dir.join(crate::install::LOCK_FILE_NAME)),
        keep_backups: args.keep_backups,
        verify_timeout: Duration::from_secs(args.verify_timeout),
        lock_timeout: Duration::from_secs(args.lock_timeout),
        next: args.next_version_id.as_ref().map(|v| install::NextVersion {
            version_id: v.clone(),
            expect: args.expect_next.clone(),
        }),
        from_stages: args.version_id.is_none() && args.stage.is_none() && args.next_version_id.is_none(),
        require_principals: args.require_principals.clone(),
        existing_certificates: args.existing_certificates,
    })
}

/// Runs `install` (or `install --check`) against the given store, sshd and
/// prober, and returns its report. `commands` and the in-process test
/// dispatcher share it.
pub async fn execute(
    args: &InstallArgs,
    store: Option<&impl SecretStore>,
    sshd: &impl SshdControl,
    prober: &impl Prober,
) -> Result<InstallReport, Failure> {
    let verify_timeout = Duration::from_secs(args.verify_timeout);
    if args.check {
        let address = verify_address(args, sshd)?;
        let Some(store) = store.filter(|_| args.secret_id.is_some()) else {
            if args.expect.is_empty() {
                return Err(Failure::usage(anyhow::anyhow!(
                    "install --check needs --secret-id or --expect SHA256:..."
                )));
            }
            let mut report = install::check(prober, &args.expect, &args.ssh_dir, &address, verify_timeout).await;
            install::check::note_interrupted(&mut report, &args.state_dir);
            return Ok(report);
        };
        let options = install_options(args)?;
        let version = store
            .get(&options.secret_id, &options.selector)
            .await
            .map_err(store_failure)?;
        let mut expected: Vec<Fingerprint> = version.document.keys.keys().map(|k| k.fingerprint().clone()).collect();
        expected.extend(args.expect.iter().cloned());
        expected.sort();
        expected.dedup();
        let mut report = install::check(prober, &expected, &args.ssh_dir, &address, verify_timeout).await;
        report.secret = Some(version.arn);
        report.version_id = Some(version.version_id);
        install::check::note_interrupted(&mut report, &args.state_dir);
        return Ok(report);
    }
    let options = install_options(args)?;
    let Some(store) = store else {
        return Err(Failure::usage(anyhow::anyhow!("install needs the secret store")));
    };
    Ok(install::install(&options, store, sshd, prober).await)
}

/// Runs `install`.
pub async fn run(args: &InstallArgs, global: &GlobalArgs) -> Result<Status, Failure> {
    let sshd = sshd_of(args);
    let compliance = args.report_compliance || std::env::var_os("AWS_SSM_INSTANCE_ID").is_some_and(|v| !v.is_empty());
    let config = if args.secret_id.is_some() {
        Some(aws::load_config(&global.aws).await.map_err(Failure::aws_config)?)
    } else if compliance {
        // `install --check --expect` needs no AWS at all: a configuration
        // that cannot load only costs the compliance report.
        match aws::load_config(&global.aws).await {
            Ok(config) => Some(config),
            Err(e) => {
                eprintln!("warning: cannot report SSM compliance: {e}; the check's result stands");
                None
            }
        }
    } else {
        None
    };
    let store = config
        .as_ref()
        .filter(|_| args.secret_id.is_some())
        .map(SecretsManagerStore::new);
    // Paced as the audit is: a timer's installs and an audit from this
    // host owe the node's sshd together (scan::pacing).
    let prober = Paced::new(SshProber, std::sync::Arc::new(Ledger::for_this_user()));
    let outcome = execute(args, store.as_ref(), &sshd, &prober).await;
    if let Some(path) = &args.metrics_file {
        write_metrics(path, outcome.as_ref().ok());
    }
    let report = outcome?;
    if let Some(config) = config.as_ref().filter(|_| compliance) {
        report_compliance(config, &report).await;
    }
    emit(&report, global.quiet);
    Ok(exit_status(&report))
}

/// SSM Compliance (`Custom:HostKeys`) for this instance, from the report.
/// A failure is a warning: the host keys come first.
async fn report_compliance(config: &aws_config::SdkConfig, report: &InstallReport) {
    let outcome = match install::compliance::instance_id().await {
        Ok(id) => install::compliance::put(config, &id, &install::compliance::items(report))
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    if let Err(e) = outcome {
        eprintln!("warning: cannot report SSM compliance: {e}; the install's result stands");
    }
}

/// `--metrics-file`: the report's textfile, or `refused` for a run that
/// could not start (bad options, no AWS configuration), so the series
/// never go stale silently. A failure to write is a warning: the host keys
/// come first.
fn write_metrics(path: &std::path::Path, report: Option<&InstallReport>) {
    let refused = InstallReport::default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if let Err(e) = install::metrics::write(path, report.unwrap_or(&refused), now) {
        eprintln!(
            "warning: cannot write the metrics file {}: {e}; the install's result stands",
            path.display()
        );
    }
}

fn verify_address(args: &InstallArgs, sshd: &impl SshdControl) -> Result<crate::hostport::HostPort, Failure> {
    if let Some(a) = &args.verify_address {
        return Ok(a.clone());
    }
    let effective = sshd.effective().map_err(Failure::usage)?;
    let address = effective.verify_address();
    address.ok_or_else(|| Failure::usage(install::InstallError::NoVerifyAddress(effective.listen)))
}

/// Longest error text in the JSON line: SSM returns at most 2,500
/// characters of a command's output to `push`, and the line must parse.
const MAX_ERROR_CHARS: usize = 700;

fn cut(text: &Option<String>) -> Option<String> {
    text.as_ref().map(|t| {
        if t.chars().count() <= MAX_ERROR_CHARS {
            t.clone()
        } else {
            format!(
                "{}... (cut; the full text is on stderr)",
                t.chars().take(MAX_ERROR_CHARS).collect::<String>()
            )
        }
    })
}

/// One JSON line on stdout; a human summary on stderr.
fn emit(report: &InstallReport, quiet: bool) {
    let mut line_report = report.clone();
    line_report.error = cut(&report.error);
    line_report.rollback_error = cut(&report.rollback_error);
    match serde_json::to_string(&line_report) {
        Ok(line) => println!("{line}"),
        Err(e) => eprintln!("error: cannot encode the report: {e}"),
    }
    if quiet && report.error.is_none() {
        return;
    }
    let version = report.version_id.as_ref().map_or("-", |v| v.as_str());
    match report.result {
        InstallResult::Changed => eprintln!(
            "installed version {version}: {} file(s) changed, sshd {}, {}",
            report.changed_files.len(),
            if report.reloaded { "reloaded" } else { "not reloaded" },
            if report.verified {
                "served keys verified"
            } else {
                "served keys not verified"
            }
        ),
        InstallResult::Unchanged => eprintln!("version {version} is already installed and served; nothing to do"),
        InstallResult::Reloaded => {
            eprintln!("version {version} was on disk but not served; sshd reloaded and verified")
        }
        InstallResult::Match => eprintln!("on-disk and served host keys match the expected set"),
        other => {
            eprintln!(
                "install {}: {}",
                other.as_str(),
                report.error.as_deref().unwrap_or("see the JSON report")
            );
            if let Some(r) = &report.rollback_error {
                eprintln!("ROLLBACK FAILED: {r}");
            } else if other == InstallResult::RolledBack {
                eprintln!("the previous host keys were restored and are served again");
            }
            for row in report.checks.iter().filter(|r| !r.ok) {
                eprintln!(
                    "  {}: expected {}, on disk {}, served {}",
                    row.key_type,
                    row.expected.as_ref().map_or("nothing", |f| f.as_str()),
                    row.on_disk.as_ref().map_or("nothing", |f| f.as_str()),
                    match &row.served {
                        Ok(fp) => fp.to_string(),
                        Err(e) => e.to_string(),
                    }
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_ERROR_CHARS, cut};

    #[test]
    fn long_errors_are_cut_for_the_json_line() {
        assert_eq!(cut(&Some("short".to_owned())), Some("short".to_owned()));
        let long = "x".repeat(5_000);
        let cut_text = cut(&Some(long)).unwrap();
        assert!(cut_text.len() < MAX_ERROR_CHARS + 60, "{}", cut_text.len());
        assert!(cut_text.ends_with("(cut; the full text is on stderr)"));
        assert_eq!(cut(&None), None);
    }
}
