//! `audit`'s arguments turned into the flow's request, its report printed,
//! its conclusion mapped to an exit status.

use std::sync::Arc;

use crate::audit::{Audit, AuditReport, AuditRequest, Expected, ExpectedSource, OnDiskCheck};
use crate::aws;
use crate::aws::AwsFleet;
use crate::aws::SecretsManagerStore;
use crate::aws::ssm::SsmDispatcher;
use crate::cli::{AuditArgs, GlobalArgs};
use crate::discovery::LbSpec;
use crate::exit::ExitStatus as _;
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};
use crate::scan::pacing::Paced;
use crate::store::VersionSelector;

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
        client: args.client_version,
        accepted: args.accept_messages.clone(),
    };
    let audit = Audit {
        store: store.as_ref(),
        fleet: fleet.as_ref(),
        dispatcher: dispatcher.as_ref(),
        prober: Arc::new(Paced::for_this_user()),
        policy: args.scan.policy(args.key_types.clone()),
    };
    let started = std::time::Instant::now();
    let mut report: AuditReport = audit.run(&request).await?;
    let status = report.conclusion.status();
    report.exit_code = status.code();
    let sink = config.as_ref().map(crate::aws::cloudwatch::CloudWatch::new);
    let to = crate::audit::metrics::Destinations {
        file: args.metrics_file.as_deref(),
        cloudwatch: args.cloudwatch.as_deref().map(|n| (n, sink.as_ref())),
        in_lambda: std::env::var_os("AWS_LAMBDA_FUNCTION_NAME").is_some(),
    };
    let (lines, warnings) =
        crate::audit::metrics::publish(&report, started.elapsed(), time::OffsetDateTime::now_utc(), &to).await;
    for line in lines {
        println!("{line}");
    }
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
    match output {
        OutputFormat::Json => output::print_json(&report).map_err(Failure::usage)?,
        _ => print!("{}", report.table(output::columns())),
    }
    Ok(status)
}
