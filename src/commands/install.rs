//! `hostkeyctl install`: the node side. Builds the request, runs
//! [`crate::install::run`], prints one JSON line on stdout (what `push`
//! reads back from SSM) and a human summary on stderr; `--output table`,
//! outside SSM, prints the summary on stdout alone.

use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::cli::{GlobalArgs, InstallArgs};
use crate::exit::{ExitStatus as _, Failure, Status};
use crate::install::{self, InstallReport};
use crate::output::OutputFormat;
use crate::scan::pacing::Paced;

/// Runs `install`.
pub async fn run(args: &InstallArgs, global: &GlobalArgs) -> Result<Status, Failure> {
    let sshd = args.sshd();
    let compliance = args.report_compliance || std::env::var_os("AWS_SSM_INSTANCE_ID").is_some_and(|v| !v.is_empty());
    let config = if args.secret_id.is_some() {
        Some(aws::load_config(&global.aws).await?)
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
    let prober = Paced::for_this_user();
    let outcome = match args.request() {
        Ok(request) => install::run::execute(&request, store.as_ref(), &sshd, &prober).await,
        Err(e) => Err(e),
    };
    if let Some(path) = &args.metrics_file {
        write_metrics(path, outcome.as_ref().ok());
    }
    let mut report = outcome?;
    let under_ssm = std::env::var_os("AWS_SSM_INSTANCE_ID").is_some_and(|v| !v.is_empty());
    // A check as root whose JSON line is read also says who reaches the
    // metadata service: the node's role reads the key set (`doctor`
    // reports open nodes).
    let json = under_ssm || global.output != OutputFormat::Table;
    if args.check && json && rustix::process::geteuid().is_root() {
        report.imds = Some(crate::imds_guard::access(&crate::imds_guard::Tables::default()));
    }
    if let Some(config) = config.as_ref().filter(|_| compliance) {
        report_compliance(config, &report).await;
    }
    // The JSON line is what push reads back from SSM, so under SSM Run
    // Command it is printed whatever --output says; `--output table` asks
    // for the summary on stdout instead (docs/cli.md, "Rules").
    if global.output == OutputFormat::Table && !under_ssm {
        // What went wrong goes to stderr, as every error does; -q keeps a
        // success quiet.
        if let Some(summary) = install::run::summary(&report, global.quiet) {
            if report.error.is_some() {
                eprintln!("{summary}");
            } else {
                println!("{summary}");
            }
        }
        return Ok(report.status());
    }
    match install::run::json_line(&report) {
        Ok(line) => println!("{line}"),
        Err(e) => eprintln!("error: cannot encode the report: {e}"),
    }
    if let Some(summary) = install::run::summary(&report, global.quiet) {
        eprintln!("{summary}");
    }
    Ok(report.status())
}

/// SSM Compliance (`Custom:HostKeys`) for this instance, from the report.
/// A failure is a warning: the host keys come first.
async fn report_compliance(config: &aws_config::SdkConfig, report: &InstallReport) {
    let outcome = match crate::aws::ssm::compliance::instance_id().await {
        Ok(id) => crate::aws::ssm::compliance::put(config, &id, &install::compliance::items(report))
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
