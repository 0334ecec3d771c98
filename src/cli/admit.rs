//! `hostkeyctl admit`'s arguments.

use clap::Args;

use crate::admission::{AdmissionRequest, GroupSpec, Lifecycle};
use crate::discovery::TargetSpec;
use crate::ids::SecretId;

/// `hostkeyctl admit`.
#[derive(Debug, Args)]
pub struct AdmitArgs {
    /// The fleet's secret: nodes must serve its AWSCURRENT set (read from
    /// its fingerprint tags: DescribeSecret only, never a private key).
    #[arg(long, value_name = "ID")]
    pub secret_id: SecretId,
    /// The target group to keep: tg:ARN, or lb:NAME_OR_ARN (the one target
    /// group its listener on --port forwards to).
    #[arg(long, value_name = "tg:ARN|lb:NAME")]
    pub target_group: GroupSpec,
    /// The cluster's nodes: hyperpod:CLUSTER[/GROUP], tag:KEY=VALUE or
    /// i-... (repeatable; tags and ids must all match, node sources add
    /// up). A target that is none of them is removed.
    #[arg(long = "target", value_name = "SPEC", required = true)]
    pub targets: Vec<TargetSpec>,
    /// The SSH port: the nodes' sshd, and the listener's for lb:.
    #[arg(long, default_value_t = 22, value_name = "PORT")]
    pub port: u16,
    /// At most this many targets that still take users are deregistered
    /// in one run (default: a third of the targets in service, at least
    /// one). The last target serving the set is never taken, nor any when
    /// none serves it.
    #[arg(long, value_name = "N")]
    pub max_drain: Option<usize>,
    /// An Auto Scaling group whose launching instances wait in
    /// Pending:Wait on --lifecycle-hook: each goes InService only once it
    /// serves the set (CompleteLifecycleAction CONTINUE).
    #[arg(long, value_name = "NAME", requires = "lifecycle_hook")]
    pub auto_scaling_group: Option<String>,
    /// The group's autoscaling:EC2_INSTANCE_LAUNCHING hook (its default
    /// result ABANDON: an instance that never serves the set is never put
    /// in service).
    #[arg(long, value_name = "NAME", requires = "auto_scaling_group")]
    pub lifecycle_hook: Option<String>,
    /// Decide and report, register and deregister nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Admit instances outside the secret's cluster too. By default every
    /// instance the --target tags reach must carry the secret's Cluster tag
    /// (Cluster or parallelcluster:cluster-name).
    #[arg(long)]
    pub allow_other_clusters: bool,
    /// How the nodes are asked by handshake.
    #[command(flatten)]
    pub scan: crate::cli::ScanArgs,
}

impl AdmitArgs {
    /// The admission these options ask for (`admit`, and the admission
    /// function's configuration).
    pub fn request(&self) -> AdmissionRequest {
        AdmissionRequest {
            secret: self.secret_id.clone(),
            group: self.target_group.clone(),
            cluster: self.targets.clone(),
            port: self.port,
            max_drain: self.max_drain,
            dry_run: self.dry_run,
            allow_other_clusters: self.allow_other_clusters,
            lifecycle: self
                .auto_scaling_group
                .clone()
                .zip(self.lifecycle_hook.clone())
                .map(|(group, hook)| Lifecycle { group, hook }),
        }
    }
}
