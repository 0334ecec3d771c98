//! `hostkeyctl audit`: what clients see, against the expected set. Parses,
//! runs [`crate::audit::Audit`], prints, and maps its conclusion to an exit
//! code.

pub mod print;

use std::sync::Arc;
use std::time::Duration;

use crate::audit::{Audit, AuditReport, AuditRequest, Expected, ExpectedSource, OnDiskCheck, ScanPolicy};
use crate::aws;
use crate::cli::{AuditArgs, GlobalArgs};
use crate::discovery::{AwsFleet, LbSpec};
use crate::dispatch::SsmDispatcher;
use crate::exit::ExitStatus as _;
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::scan::SshProber;
use crate::scan::pacing::{Ledger, Paced};
use crate::store::{SecretsManagerStore, VersionSelector};

/// Where the expected set comes from, from the options.
fn expected_source(args: &AuditArgs) -> Result<ExpectedSource, Failure> {
    if let Some(secret) = &args.secret_id {
        let selector = match (&args.stage, &args.version_id) {
            (_, Some(v)) => Some(VersionSelector::VersionId(v.clone())),
            (Some(s), None) => Some(VersionSelector::Stage(s.clone())),
            (None, None) => None,
        };
        return Ok(ExpectedSource::Secret {
            secret: secret.clone(),
            selector,
        });
    }
    if let Some(path) = &args.known_hosts {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Failure::usage(anyhow::anyhow!(
                "cannot read {} as a known_hosts file: {e}",
                path.display()
            ))
        })?;
        let (expected, source) = crate::audit::expected_from_known_hosts_text(&text, path)
            .map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
        return Ok(ExpectedSource::Given { expected, source });
    }
    if !args.expect.is_empty() {
        return Ok(ExpectedSource::Given {
            expected: Expected {
                by_type: std::collections::BTreeMap::new(),
                untyped: args.expect.clone(),
            },
            source: "--expect".to_owned(),
        });
    }
    Err(Failure::usage(anyhow::anyhow!(
        "name the expected set: --secret-id NAME, --known-hosts FILE or --expect SHA256:..."
    )))
}

/// What certificates must be, with `--ca-fingerprint`.
fn cert_policy(args: &AuditArgs) -> Option<crate::certificate::CertPolicy> {
    (!args.ca_fingerprints.is_empty()).then(|| crate::certificate::CertPolicy {
        ca_fingerprints: args.ca_fingerprints.clone(),
        principals: args.principals.clone(),
        warn_days: args.warn_days,
    })
}

/// Runs `audit`.
pub async fn run(args: &AuditArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let needs_aws = args.secret_id.is_some()
        || !args.targets.is_empty()
        || matches!(args.lb, Some(LbSpec::LoadBalancer(_)))
        || args.cloudwatch.is_some();
    let config = if needs_aws {
        Some(aws::load_config(&global.aws).await?)
    } else {
        None
    };
    let store = config.as_ref().map(SecretsManagerStore::new);
    let fleet = config.as_ref().map(|c| AwsFleet::new(c).with_port(args.port));
    let dispatcher = config.as_ref().map(SsmDispatcher::new);
    let on_disk = args.via_ssm.then(|| OnDiskCheck {
        document: args.check_document.clone(),
        node_command: args.node_command.clone(),
    });
    let request = AuditRequest {
        expected: expected_source(args)?,
        targets: args.targets.clone(),
        endpoints: args.endpoints.clone(),
        port: args.port,
        lb: args.lb.clone(),
        samples: args.samples,
        backends: args.backends,
        certificates: cert_policy(args),
        on_disk,
        now: crate::certificate::now_unix(),
    };
    let audit = Audit {
        store: store.as_ref(),
        fleet: fleet.as_ref(),
        dispatcher: dispatcher.as_ref(),
        prober: Arc::new(Paced::new(SshProber, Arc::new(Ledger::for_this_user()))),
        policy: ScanPolicy {
            concurrency: args.concurrency,
            per_host: args.per_host,
            timeout: Duration::from_secs(args.timeout.max(1)),
            attempts: args.attempts.max(1),
            algorithms: args.key_types.clone(),
        },
    };
    let started = std::time::Instant::now();
    let mut report: AuditReport = audit.run(&request).await?;
    let status = report.conclusion.status();
    report.exit_code = status.code();
    publish_metrics(args, config.as_ref(), &report, started.elapsed()).await;
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => print!("{}", print::table(&report, output::columns())),
    }
    Ok(status)
}

/// `--metrics-file` and `--cloudwatch`. A failure to write or publish is a
/// warning: the audit's report and exit code stand, and the template's
/// alarm on missing data catches metrics that stop coming.
async fn publish_metrics(
    args: &AuditArgs,
    config: Option<&aws_config::SdkConfig>,
    report: &AuditReport,
    elapsed: Duration,
) {
    if args.metrics_file.is_none() && args.cloudwatch.is_none() {
        return;
    }
    let now = time::OffsetDateTime::now_utc();
    let m = crate::audit::metrics::of(report, elapsed, now);
    if let Some(path) = &args.metrics_file {
        let unix = u64::try_from(now.unix_timestamp()).unwrap_or_default();
        if let Err(e) = crate::audit::metrics::write(path, &m, unix) {
            eprintln!(
                "warning: cannot write the metrics file {}: {e}; the audit's result stands",
                path.display()
            );
        }
    }
    let Some(namespace) = &args.cloudwatch else {
        return;
    };
    let datums = crate::audit::metrics::datums(&m);
    // In Lambda, the embedded metric format on stdout: CloudWatch Logs
    // makes the metrics, with no call and no permission for one.
    if std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some() {
        let ms = u64::try_from(now.unix_timestamp_nanos() / 1_000_000).unwrap_or_default();
        for line in crate::audit::metrics::emf(namespace, &datums, ms) {
            println!("{line}");
        }
    } else if let Some(config) = config
        && let Err(e) = put_metric_data(config, namespace, &datums).await
    {
        eprintln!("warning: cannot publish the audit's metrics to CloudWatch: {e}; the audit's result stands");
    }
}

/// `PutMetricData` of `datums` under `namespace`.
async fn put_metric_data(
    config: &aws_config::SdkConfig,
    namespace: &str,
    datums: &[crate::audit::metrics::Datum],
) -> Result<(), crate::aws::AwsError> {
    use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};

    let call = crate::aws::Call::new("cloudwatch:PutMetricData", format!("namespace {namespace}"));
    let now = aws_sdk_cloudwatch::primitives::DateTime::from(std::time::SystemTime::now());
    let data: Vec<MetricDatum> = datums
        .iter()
        .map(|d| {
            MetricDatum::builder()
                .metric_name(d.name)
                .set_dimensions(
                    d.verdict
                        .map(|v| vec![Dimension::builder().name("Verdict").value(v).build()]),
                )
                .value(d.value)
                .unit(StandardUnit::from(d.unit))
                .timestamp(now)
                .build()
        })
        .collect();
    aws_sdk_cloudwatch::Client::new(config)
        .put_metric_data()
        .namespace(namespace)
        .set_metric_data(Some(data))
        .send()
        .await
        .map_err(|e| crate::aws::AwsError::from_sdk(e, &call))?;
    Ok(())
}
