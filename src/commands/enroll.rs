//! `hostkeyctl enroll`: parses, runs [`crate::enrolment::node::enroll::enroll`]
//! with IMDS, the signer function and this node's sshd, prints what it did.

use crate::aws;
use crate::aws::enrol_signer::LambdaSigner;
use crate::aws::imds::InstanceMetadata;
use crate::cli::{EnrollArgs, GlobalArgs};
use crate::enrolment::node::configure::LoginRoute;
use crate::enrolment::node::enroll::{Setup, enroll};
use crate::enrolment::node::listener::Service;
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
    let report = enroll(&setup, &InstanceMetadata::default(), &signer, &sshd, &method, now_ms).await?;
    match output {
        OutputFormat::Json => output::print_json(&report.json()).map_err(Failure::usage)?,
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
            for file in report.enrolled.iter().flat_map(|w| &w.files) {
                println!("  {}", file.display());
            }
            println!("strict for {}", report.trusted.join(", "));
        }
    }
    Ok(Status::Success)
}
