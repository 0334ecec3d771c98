//! `hostkeyctl enroll` (work in progress): parses, runs
//! [`crate::enrolment::node::enrol_node`] with IMDS and the signer
//! function, prints what it wrote.

use crate::aws;
use crate::aws::enrol_signer::LambdaSigner;
use crate::aws::imds::InstanceMetadata;
use crate::cli::{EnrollArgs, GlobalArgs};
use crate::enrolment::configure::{configure_client, configure_sshd};
use crate::enrolment::node::enrol_node;
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};

/// Runs `enroll`.
pub async fn run(args: &EnrollArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let config = aws::load_config(&global.aws).await?;
    let now = i64::try_from(crate::certificate::now_unix()).unwrap_or(i64::MAX);
    let written = enrol_node(
        &args.ssh_dir,
        &args.principals,
        &InstanceMetadata::default(),
        &LambdaSigner::new(&config, &args.function),
        now,
    )
    .await
    .map_err(|e| Failure::with_status(Status::Aws, anyhow::anyhow!("{e}")))?;
    let sshd = crate::install::sshd::Sshd {
        binary: args.sshd.clone(),
        config: args
            .sshd_config
            .clone()
            .unwrap_or_else(|| args.ssh_dir.join("sshd_config")),
    };
    let method = args.reload_command.clone().map_or(
        crate::install::sshd::ReloadMethod::Auto,
        crate::install::sshd::ReloadMethod::Command,
    );
    let failed =
        |e: crate::enrolment::node::NodeError| Failure::with_status(Status::Incomplete, anyhow::anyhow!("{e}"));
    configure_sshd(&sshd, &method, &written.files).map_err(failed)?;
    configure_client(&args.client_dir, &written.ca_line, &args.trust).map_err(failed)?;
    match output {
        OutputFormat::Json => output::print_json(&serde_json::json!({
            "instance_id": written.instance_id,
            "principals": written.principals,
            "certificates": written.files,
            "ca_fingerprint": written.ca,
        }))
        .map_err(Failure::usage)?,
        _ => {
            println!("enrolled {} for {}", written.instance_id, written.principals.join(", "));
            println!("CA {}", written.ca);
            for file in &written.files {
                println!("  {}", file.display());
            }
        }
    }
    Ok(Status::Success)
}
