//! The node-side commands' arguments that are in the node build too:
//! `enroll` (every cluster node enrols) and `imds-guard`.

use std::path::PathBuf;

use clap::Args;

/// `hostkeyctl enroll`.
#[derive(Debug, Args)]
pub struct EnrollArgs {
    /// The cluster's signer: the enrolment function's ARN.
    #[arg(long, value_name = "ARN")]
    pub function: String,
    /// The node's key files and sshd.
    #[command(flatten)]
    pub node: super::NodeSshdArgs,
    /// A name this node expects its certificates to carry (repeatable): the
    /// signer refuses the request if AWS does not give the node that name.
    #[arg(long = "principal", value_name = "NAME", value_delimiter = ',')]
    pub principals: Vec<crate::certificate::Principal>,
    /// The ssh client's directory (ssh_known_hosts, ssh_config.d).
    #[arg(long, env = "HOSTKEYCTL_CLIENT_DIR", default_value = "/etc/ssh", value_name = "DIR")]
    pub client_dir: PathBuf,
    /// A host pattern of the cluster's nodes (repeatable: `*.ec2.internal`,
    /// `ip-10-1-*`, `10.1.*`): this node's ssh trusts the CA for them, with
    /// StrictHostKeyChecking yes.
    #[arg(long = "trust", value_name = "PATTERN", value_delimiter = ',')]
    pub trust: Vec<crate::enrolment::node::configure::HostPattern>,
    /// This is a login node: it serves (or will serve, once `install` has
    /// run) the canonical set, so its keys get no certificate; it claims
    /// its instance and takes the trust alone.
    #[arg(long, env = "HOSTKEYCTL_ENROL_LOGIN_NODE")]
    pub login_node: bool,
    /// The port of the login nodes' listener for the cluster (not the
    /// load balancer's). On a login node: a second sshd serves the node's
    /// own keys there, certified like every node's, while the canonical
    /// set stays on the main sshd. On every node: ssh reaches
    /// --login-hosts on this port. Give the same value to every node.
    #[arg(long, env = "HOSTKEYCTL_ENROL_CLUSTER_PORT", value_name = "PORT")]
    pub cluster_port: Option<u16>,
    /// A host pattern of the login nodes (repeatable: `ip-10-1-17-*`,
    /// `10.1.17.*`): every node's ssh reaches them on --cluster-port.
    #[arg(
        long = "login-hosts",
        env = "HOSTKEYCTL_ENROL_LOGIN_HOSTS",
        value_name = "PATTERN",
        value_delimiter = ','
    )]
    pub login_hosts: Vec<crate::enrolment::node::configure::HostPattern>,
    /// How a login node's listener runs: `systemd` (the unit
    /// hostkeyctl-cluster-sshd.service, enabled), `direct` (enroll starts
    /// sshd, and HUPs it by its pid file later), or `auto` (systemd when
    /// it runs the host).
    #[arg(long, env = "HOSTKEYCTL_ENROL_LISTENER_SERVICE", default_value = "auto", value_name = "HOW", value_parser = ["auto", "systemd", "direct"])]
    pub listener_service: String,
}

/// `hostkeyctl enrolment`: the admin's side of the bindings table.
#[cfg(feature = "admin")]
#[derive(Debug, clap::Subcommand)]
pub enum EnrolmentCommand {
    /// List every instance that enrolled: its key fingerprints, its last
    /// enrolment, and whether it is revoked.
    List(EnrolmentTableArgs),
    /// Revoke instances: they enrol no more, and every node's trust lists
    /// their keys as @revoked at its next renewal (within 15 minutes with
    /// the shipped timer, once the signer has re-read the list: it keeps it
    /// up to a minute), so their certificates stop working before they
    /// expire.
    Revoke(EnrolmentRevokeArgs),
}

/// The bindings table.
#[cfg(feature = "admin")]
#[derive(Debug, Args)]
pub struct EnrolmentTableArgs {
    /// The bindings table (the stack's output EnrolmentTableName).
    #[arg(long, value_name = "TABLE")]
    pub table: String,
}

/// `enrolment revoke`.
#[cfg(feature = "admin")]
#[derive(Debug, Args)]
pub struct EnrolmentRevokeArgs {
    /// The bindings table (the stack's output EnrolmentTableName).
    #[arg(long, value_name = "TABLE")]
    pub table: String,
    /// An instance to revoke (repeatable, or comma-separated).
    #[arg(long = "instance", value_name = "ID", required = true, value_delimiter = ',')]
    pub instances: Vec<String>,
}

/// `hostkeyctl imds-guard`.
#[derive(Debug, Args)]
pub struct ImdsGuardArgs {
    /// A user besides root who may reach it (name or uid; a list).
    #[arg(
        long = "allow-user",
        value_name = "USER",
        value_delimiter = ',',
        env = "HOSTKEYCTL_IMDS_ALLOW_USERS"
    )]
    pub allow_users: Vec<String>,
    /// Say whether it is kept to root (exit 1 if not), change nothing.
    #[arg(long, conflicts_with = "open")]
    pub check: bool,
    /// Remove the guard: every user reaches it, and the node's role.
    #[arg(long)]
    pub open: bool,
    /// And at every boot: write and enable hostkeyctl-imds-guard.service
    /// with the same users (without --allow-user, the ones its settings
    /// already allow; with --open: disable and remove it).
    #[arg(long, conflicts_with = "check")]
    pub at_boot: bool,
}
