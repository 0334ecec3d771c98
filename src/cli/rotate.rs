//! `hostkeyctl rotate`'s options (admin build).

use clap::Args;

use super::admin::{KeySetPrefixArg, RolloutArgs};
use crate::discovery::TargetSpec;
use crate::ids::SecretId;

/// `rotate --pull --finish`'s default wait, in seconds: the shipped
/// timer's period (`OnUnitActiveSec=15min`) and random delay
/// (`RandomizedDelaySec=5min`), contrib/systemd/hostkeyctl-install.timer.
pub const FINISH_WAIT: u64 = 1200;

/// `hostkeyctl rotate`.
#[derive(Debug, Args)]
pub struct RotateArgs {
    /// The secret (name or ARN).
    #[arg(long, value_name = "ID")]
    pub secret_id: SecretId,
    /// The login nodes: tag:KEY=VALUE or i-... (repeatable; all must
    /// match), or lb:NAME_OR_ARN / tg:ARN (and hyperpod:CLUSTER[/GROUP]
    /// with --pull).
    #[arg(long = "target", value_name = "SPEC", required = true)]
    pub targets: Vec<TargetSpec>,
    /// Continue the rotation in flight (AWSPENDING) from where it stopped.
    #[arg(long, conflicts_with = "abort")]
    pub resume: bool,
    /// Drop the rotation in flight: remove AWSPENDING, then bring the
    /// targets back to AWSCURRENT alone.
    #[arg(long)]
    pub abort: bool,
    /// A pull fleet (nodes SSM cannot reach, such as HyperPod): send
    /// nothing; move the stages and let the nodes' timers install
    /// (docs/rotation.md). --overlap (the default) announces, --finish
    /// promotes.
    #[arg(long, conflicts_with = "stop_after")]
    pub pull: bool,
    /// With --pull: after a stage move, how long to wait for every node to
    /// serve it, auditing by handshake. Default: with --finish, 1200 (the
    /// shipped timer's period, 15 min, and its random delay, 5 min); else 0.
    /// Nodes still installing when it ends are reported, not a failure
    /// (`converging`, exit 0).
    #[arg(long, value_name = "SECS", requires = "pull")]
    pub wait: Option<u64>,
    /// Stop after this step (resume later with --resume).
    #[arg(long, value_enum, value_name = "STEP")]
    pub stop_after: Option<crate::rotation::Step>,
    /// Phase one of an overlapping rotation: nodes keep serving the current
    /// keys and also offer the new ones, which OpenSSH clients with
    /// UpdateHostKeys learn after logging in. Finish later with --finish.
    /// What `rotate` does without a phase flag, unless --min-overlap is 0.
    #[arg(long, conflicts_with_all = ["abort", "finish"])]
    pub overlap: bool,
    /// Phase two: promote the new set (AWSCURRENT), then bring every node
    /// to it and audit.
    #[arg(long, conflicts_with_all = ["abort", "resume"])]
    pub finish: bool,
    /// Bring the previous set (AWSPREVIOUS) back through an overlap: the
    /// first run announces it, a run after --min-overlap promotes it once
    /// every node serves it (docs/rotation.md, "Rolling back").
    #[arg(long, conflicts_with_all = ["abort", "resume", "overlap", "finish", "stop_after"])]
    pub rollback: bool,
    /// With --rollback: roll back although the last revocation hostkeyctl
    /// produced (known-hosts --krl or --revoked) names the previous keys.
    /// Clients that hold that revocation refuse every node until they get
    /// one produced after the rollback.
    #[arg(long, requires = "rollback")]
    pub force: bool,
    /// How long a set must have been announced before it is promoted, so
    /// that clients learn it: e.g. 24h, 7d, 0. Default: the schedule's
    /// interval less a tenth, at least 24h (24h without a schedule). 0
    /// promotes at once: every client that has not learned the new keys
    /// sees a host key warning.
    #[arg(long, value_name = "DURATION", value_parser = crate::rotation::gate::parse_min_overlap, default_value = "auto")]
    pub min_overlap: crate::rotation::MinOverlap,
    /// With --pull, at the promotion: how long nodes that installed it keep
    /// offering the set it retired, so that users' ssh (UpdateHostKeys)
    /// keeps those keys while the other nodes' timers catch up: at least
    /// the timers' period and random delay (the shipped timer: 15m + 5m).
    /// 0: not at all. At most 24h.
    #[arg(long, value_name = "DURATION", value_parser = crate::rotation::gate::parse_retire_for, default_value = "1h")]
    pub retire_for: std::time::Duration,
    /// With --pull: a node this host cannot reach is trusted to follow the
    /// stages (its timer) instead of holding the promotion back. A node
    /// reached that does not serve the announced set still holds it back.
    #[arg(long, requires = "pull")]
    pub trust_timers: bool,
    /// How the install command goes out through SSM Run Command.
    #[command(flatten)]
    pub rollout: RolloutArgs,
    /// The SSH port: the nodes' sshd and the load balancer's listener
    /// (lb: targets), when not 22.
    #[arg(long, default_value_t = 22, value_name = "PORT")]
    pub port: u16,
    /// The CA secret (`hostkeyctl ca init`): signs the new set like the
    /// current one (same principals and validity, next serial). Required
    /// when the current set carries certificates.
    #[arg(long, value_name = "ID")]
    pub ca_secret_id: Option<SecretId>,
    #[command(flatten)]
    pub placement: KeySetPrefixArg,
}

impl RotateArgs {
    /// How installs go out, with the region the nodes read the secret in
    /// (the document is settled by [`crate::rotation::setup::prepare`],
    /// which checks them).
    pub fn push(&self, region: Option<crate::ids::Region>) -> crate::rollout::PushOptions {
        self.rollout.unchecked(region, None)
    }

    /// What the rotation is set up from.
    pub fn setup_request<'a>(
        &'a self,
        push: &'a crate::rollout::PushOptions,
    ) -> crate::rotation::setup::SetupRequest<'a> {
        crate::rotation::setup::SetupRequest {
            secret: &self.secret_id,
            allow_other_clusters: self.rollout.allow_other_clusters,
            targets: &self.targets,
            pull: self.pull,
            document: &self.rollout.document,
            push,
            ca_secret_id: self.ca_secret_id.as_ref(),
            key_set_prefix: &self.placement.key_set_prefix,
        }
    }

    /// The promotion gate, now.
    pub fn gate(&self) -> crate::rotation::Gate {
        crate::rotation::Gate {
            min_overlap: self.min_overlap,
            trust_timers: self.trust_timers,
            now: crate::rotation::gate::unix_now(),
            retire_for: self.retire_for,
        }
    }

    /// What the run is asked to do.
    pub fn request(&self) -> crate::rotation::Request {
        use crate::rotation::Phase;
        // clap lets through one phase (`--overlap` may take `--resume`).
        let phase = if self.abort {
            Phase::Abort
        } else if self.rollback {
            Phase::Rollback { force: self.force }
        } else if self.finish {
            Phase::Finish
        } else if self.overlap {
            Phase::Overlap { resume: self.resume }
        } else if self.resume {
            Phase::Resume
        } else {
            Phase::New
        };
        crate::rotation::Request {
            phase,
            stop_after: self.stop_after,
            pull: self.pull.then(|| {
                std::time::Duration::from_secs(self.wait.unwrap_or(if self.finish { FINISH_WAIT } else { 0 }))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::cli::{Cli, Command};
    use crate::rotation::Phase;
    use clap::Parser;

    fn phase(flags: &str) -> Result<Phase, String> {
        let line = format!("hostkeyctl rotate --secret-id hostkeys/hk --target tag:Role=login {flags}");
        let cli = Cli::try_parse_from(line.split_whitespace()).map_err(|e| e.kind().to_string())?;
        match cli.command {
            Command::Rotate(args) => Ok(args.request().phase),
            _ => unreachable!("parsed as rotate"),
        }
    }

    /// Each flag gives its one phase; `--overlap --resume` offers the set
    /// in flight again; the others together are refused by the parser.
    #[test]
    fn the_phase_flags_give_one_phase() {
        assert_eq!(phase(""), Ok(Phase::New));
        assert_eq!(phase("--overlap"), Ok(Phase::Overlap { resume: false }));
        assert_eq!(phase("--overlap --resume"), Ok(Phase::Overlap { resume: true }));
        assert_eq!(phase("--finish"), Ok(Phase::Finish));
        assert_eq!(phase("--resume"), Ok(Phase::Resume));
        assert_eq!(phase("--abort"), Ok(Phase::Abort));
        assert_eq!(phase("--rollback"), Ok(Phase::Rollback { force: false }));
        assert_eq!(phase("--rollback --force"), Ok(Phase::Rollback { force: true }));
        for refused in [
            "--finish --resume",
            "--abort --overlap",
            "--rollback --finish",
            "--force",
        ] {
            assert!(phase(refused).is_err(), "{refused} was accepted");
        }
    }
}
