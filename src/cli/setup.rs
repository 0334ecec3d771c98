//! The arguments of `deliver` and `doctor`: hostkeyctl onto nodes, and
//! what a set-up lacks.

use clap::Args;

use crate::discovery::TargetSpec;
use crate::ids::{Program, SecretId};

/// `hostkeyctl deliver`.
#[derive(Debug, Args)]
pub struct DeliverArgs {
    /// The secret (name or ARN): the targets must stay in its cluster.
    #[arg(long, value_name = "ID")]
    pub secret_id: SecretId,
    /// Which nodes: tag:KEY=VALUE or i-... (repeatable; all must match),
    /// or lb:NAME_OR_ARN / tg:ARN (the instances behind a load balancer).
    #[arg(long = "target", value_name = "SPEC", required = true)]
    pub targets: Vec<TargetSpec>,
    /// The setup document (ssm-document deploy-setup), sent only when its
    /// content is what this hostkeyctl writes for the builds it pins.
    #[arg(long, default_value = crate::ssm_document::setup::SETUP_NAME, value_name = "NAME")]
    pub document: String,
    /// SSM MaxConcurrency: nodes downloading at once (number or percentage).
    #[arg(long, default_value = "10%", value_name = "N|P%")]
    pub max_concurrency: String,
    /// SSM MaxErrors: failures after which SSM stops starting new nodes.
    #[arg(long, default_value = "0", value_name = "N|P%")]
    pub max_errors: String,
    /// Seconds to wait for all nodes.
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    pub timeout: u64,
    /// Send to instances outside the secret's cluster too.
    #[arg(long)]
    pub allow_other_clusters: bool,
    /// Print the targets and the builds; send nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The instance metadata service: root-only keeps it (and the node's
    /// role, which reads the key set) to root, now and at every boot;
    /// open removes that guard, for sites whose login users need the role.
    #[arg(long, default_value = "root-only", value_parser = ["root-only", "open"], value_name = "ACCESS")]
    pub imds: String,
}

/// `hostkeyctl doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The secret (name or ARN).
    #[arg(long, value_name = "ID")]
    pub secret_id: SecretId,
    /// Which nodes: tag:KEY=VALUE or i-... (repeatable; all must match),
    /// or lb:NAME_OR_ARN / tg:ARN (the instances behind a load balancer).
    #[arg(long = "target", value_name = "SPEC", required = true)]
    pub targets: Vec<TargetSpec>,
    /// How the nodes call hostkeyctl (the documents' content depends on it).
    #[arg(long, default_value = "hostkeyctl", value_name = "PATH")]
    pub node_command: Program,
    /// Targets may reach instances outside the secret's cluster.
    #[arg(long)]
    pub allow_other_clusters: bool,
    /// The target group users reach the nodes through: tg:ARN, or
    /// lb:NAME_OR_ARN (the one its listener on --port forwards to).
    /// Default: the lb: or tg: target, if the nodes are named by one.
    #[arg(long, value_name = "tg:ARN|lb:NAME")]
    pub target_group: Option<crate::admission::GroupSpec>,
    /// The SSH port: the listener's, for lb:.
    #[arg(long, default_value_t = 22, value_name = "PORT")]
    pub port: u16,
    /// hostkeyctl's CloudFormation stack: its admission and enrolment
    /// functions (hostkeyctl-admission-STACK, hostkeyctl-enrolment-STACK)
    /// must name this secret. The rotation function is found without it.
    #[arg(long, value_name = "NAME")]
    pub stack: Option<String>,
}
