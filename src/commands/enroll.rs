//! `hostkeyctl enroll`: parses, runs [`crate::enrolment::host::enroll`]
//! with IMDS, the signer function and this node's sshd, prints what it did.

use crate::aws;
use crate::aws::enrol_signer::LambdaSigner;
use crate::aws::imds::InstanceMetadata;
use crate::cli::{EnrollArgs, GlobalArgs};
use crate::enrolment::configure::LoginRoute;
use crate::enrolment::host::{Setup, enroll};
use crate::enrolment::listener::Service;
use crate::enrolment::node::NodeError;
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};

/// Runs `enroll`.
pub async fn run(args: &EnrollArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let config = aws::load_config(&global.aws).await?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let sshd = args.node.sshd();
    let method = args.node.reload();
    let route =
        LoginRoute::new(&args.login_hosts, args.cluster_port).map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    let service = match args.listener_service.as_str() {
        "systemd" => Service::Systemd,
        "direct" => Service::Direct,
        _ => Service::detect(),
    };
    let setup = Setup {
        ssh_dir: &args.node.ssh_dir,
        asked: &args.principals,
        client_dir: &args.client_dir,
        trust: &args.trust,
        login: args.login_node,
        route: route.as_ref(),
        service,
    };
    let signer = LambdaSigner::new(&config, &args.function);
    let report = enroll(&setup, &InstanceMetadata::default(), &signer, &sshd, &method, now_ms)
        .await
        .map_err(|e| {
            let status = match e {
                NodeError::Usage(_) | NodeError::NoKeys(_) => Status::Usage,
                NodeError::Imds(_) | NodeError::Signer(_) => Status::Aws,
                NodeError::Key { .. } | NodeError::Answer(_) | NodeError::Write { .. } | NodeError::Sshd(_) => {
                    Status::Incomplete
                }
            };
            Failure::with_status(status, anyhow::anyhow!("{e}"))
        })?;
    let files: Vec<_> = report.enrolled.as_ref().map(|w| w.files.clone()).unwrap_or_default();
    match output {
        OutputFormat::Json => output::print_json(&serde_json::json!({
            "instance_id": report.enrolled.as_ref().map(|w| w.instance_id.clone()),
            "principals": report.enrolled.as_ref().map(|w| w.principals.clone()),
            "certificates": files,
            "ca_fingerprint": report.ca,
            "login_node": report.enrolled.is_none() || report.listener.is_some(),
            "cluster_listener_port": report.listener,
            "sshd_reload": report.reload,
            "trusted": report.trusted,
        }))
        .map_err(Failure::usage)?,
        _ => {
            match (&report.enrolled, report.listener) {
                (Some(w), Some(port)) => println!(
                    "login node: enrolled {} for {}; its listener for the cluster serves them on port {port} (the canonical set stays on the main sshd)",
                    w.instance_id,
                    w.principals.join(", ")
                ),
                (Some(w), None) => println!("enrolled {} for {}", w.instance_id, w.principals.join(", ")),
                (None, _) => println!(
                    "login node: hostkeyctl install serves the canonical set here, so its keys are not enrolled"
                ),
            }
            println!("CA {}", report.ca);
            for file in &files {
                println!("  {}", file.display());
            }
            println!("strict for {}", report.trusted.join(", "));
        }
    }
    Ok(Status::Success)
}
