//! The top-level command line: the global options, the output format, and
//! every command's arguments.

use super::*;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::aws_options::AwsArgs;
use crate::exit::EXIT_CODES_HELP;
use crate::fingerprint::Fingerprint;
use crate::hostport::HostPort;
use crate::ids::{SecretId, StageLabel, VersionId};
use crate::output::OutputFormat;

/// One SSH host identity for every login node behind a load balancer.
#[derive(Debug, Parser)]
#[command(name = "hostkeyctl", version, about, after_long_help = EXIT_CODES_HELP)]
pub struct Cli {
    /// Options every command takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The help heading of the options every command takes.
pub const GLOBAL: &str = "Global options";

/// Options shared by every command.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// Output format: a table on a terminal, JSON otherwise, unless set.
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Auto, env = "HOSTKEYCTL_OUTPUT", help_heading = GLOBAL)]
    pub output: OutputFormat,
    /// More log detail on stderr (repeat for more). Never shows key material.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet", help_heading = GLOBAL)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    pub quiet: bool,
    /// AWS connection options.
    #[command(flatten)]
    pub aws: AwsArgs,
}

/// The commands.
// Parsed once per process: the variants' sizes do not matter (in the node
// build, install's arguments dwarf enroll's).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    #[cfg(feature = "admin")]
    /// Generate a host key set offline and write it as ssh_host_<alg>_key files.
    #[command(
        after_help = "Examples:\n  hostkeyctl keygen --out-dir ./hostkeys\n  hostkeyctl keygen --out-dir ./hostkeys --algorithms ed25519,ecdsa"
    )]
    Keygen(KeygenArgs),
    #[cfg(feature = "admin")]
    /// Create the secret holding the canonical key set (new, or adopted from
    /// a node's host key files).
    #[command(
        after_help = "Examples:\n  hostkeyctl init --secret-id hostkeys/my-cluster --from-dir ./login-1-etc-ssh\n  hostkeyctl init --secret-id hostkeys/my-cluster --kms-key-id alias/hostkeys"
    )]
    Init(InitArgs),
    #[cfg(feature = "admin")]
    /// Show the secret's versions, stages and fingerprints.
    #[command(
        after_help = "Examples:\n  hostkeyctl status --secret-id hostkeys/my-cluster\n  hostkeyctl status --secret-id hostkeys/my-cluster --output json\n  hostkeyctl status --secret-id hostkeys/my-cluster --target tag:Role=login \\\n    --target tag:Cluster=my-cluster"
    )]
    Status(StatusArgs),
    #[cfg(feature = "admin")]
    /// Install a key set version on every target node with SSM Run Command.
    #[command(
        after_help = "Examples:\n  hostkeyctl push --secret-id hostkeys/my-cluster --target tag:Role=login \\\n    --target tag:Cluster=my-cluster --canary 1\n  hostkeyctl push --secret-id hostkeys/my-cluster --target i-0123456789abcdef0 --dry-run\n  hostkeyctl push --secret-id hostkeys/my-cluster --target lb:my-cluster-login"
    )]
    Push(PushArgs),
    #[cfg(feature = "admin")]
    /// Put the node build on running nodes through hostkeyctl's setup
    /// document: from your S3 bucket, checked by the SHA-256 the document
    /// pins (ssm-document deploy-setup), to /usr/local/bin/hostkeyctl.
    #[command(
        after_help = "Examples:\n  hostkeyctl deliver --secret-id hostkeys/my-cluster --target tag:Role=login \\\n    --target tag:Cluster=my-cluster\n  hostkeyctl deliver --secret-id hostkeys/my-cluster --target i-0123456789abcdef0 --dry-run"
    )]
    Deliver(DeliverArgs),
    #[cfg(feature = "admin")]
    /// Replace the key set without losing the working one: announce a new
    /// set (AWSPENDING) beside the current one (the default, or --overlap),
    /// then promote it to AWSCURRENT with --finish once clients have had
    /// --min-overlap to learn it (without a phase flag, a set the schedule
    /// announced that long ago is promoted at once).
    #[command(
        after_help = "Examples:\n  hostkeyctl rotate --secret-id hostkeys/my-cluster --target tag:Role=login \\\n    --target tag:Cluster=my-cluster --overlap\n  hostkeyctl rotate --secret-id hostkeys/my-cluster --target tag:Role=login \\\n    --target tag:Cluster=my-cluster --finish\n  hostkeyctl rotate --secret-id hostkeys/my-cluster --target hyperpod:my-cluster/login-group \\\n    --pull --overlap\n  hostkeyctl rotate --secret-id hostkeys/my-cluster --target hyperpod:my-cluster/login-group \\\n    --pull --finish --wait 1200"
    )]
    Rotate(RotateArgs),
    #[cfg(feature = "admin")]
    /// Print known_hosts lines (or SSHFP records) for the key set, for
    /// each SSH client and DNS.
    #[command(
        after_help = "Examples:\n  hostkeyctl known-hosts --secret-id hostkeys/my-cluster --host login.my-cluster.internal\n  hostkeyctl known-hosts --secret-id hostkeys/my-cluster --host login.my-cluster.internal \\\n    --sshfp\n  hostkeyctl known-hosts --host login.internal --ssh-config --node '10.1.*'\n  hostkeyctl known-hosts --secret-id hostkeys/c --host login.internal --client paramiko\n  plink $(hostkeyctl known-hosts --secret-id hostkeys/c --client plink) login.internal"
    )]
    KnownHosts(KnownHostsArgs),
    #[cfg(feature = "admin")]
    /// Check by real SSH handshakes which host keys every node and the load
    /// balancer serve, against the expected set.
    #[command(
        after_help = "Examples:\n  hostkeyctl audit --secret-id hostkeys/my-cluster --target tag:Role=login \\\n    --target tag:Cluster=my-cluster --lb login.my-cluster.internal\n  hostkeyctl audit --known-hosts ~/.ssh/known_hosts --endpoint 10.0.0.5 --endpoint 10.0.0.6\n  hostkeyctl audit --secret-id hostkeys/my-cluster --target hyperpod:my-cluster/login-group \\\n    --lb lb:my-cluster-login"
    )]
    Audit(AuditArgs),
    #[cfg(feature = "admin")]
    /// Say what a set-up lacks, read-only, each finding with what to do:
    /// the secret, hostkeyctl's SSM documents, the setup document, the
    /// targets and their cluster, each node's SSM registration, the load
    /// balancer's target group, and on each node (the read-only check
    /// document) hostkeyctl's release, whether it serves the set, and
    /// whether the metadata service answers only root.
    #[command(
        after_help = "Examples:\n  hostkeyctl doctor --secret-id hostkeys/my-cluster --target tag:Role=login \\\n    --target tag:Cluster=my-cluster --target-group lb:my-cluster-login\n  hostkeyctl doctor --secret-id hostkeys/my-cluster --target i-0123456789abcdef0 --output json"
    )]
    Doctor(DoctorArgs),
    #[cfg(feature = "admin")]
    /// Keep the load balancer's target group to the cluster's nodes that
    /// serve the fleet's keys, checked by handshake: admit them, hold out
    /// new nodes until they do, drain drifted ones (within limits), remove
    /// targets that are no node of the cluster.
    #[command(
        after_help = "Examples:\n  hostkeyctl admit --secret-id hostkeys/my-cluster --target hyperpod:my-cluster/login-group \\\n    --target-group lb:my-cluster-login --dry-run\n  hostkeyctl admit --secret-id hostkeys/my-cluster --target tag:Role=login \\\n    --target tag:Cluster=my-cluster \\\n    --target-group tg:arn:aws:elasticloadbalancing:eu-west-1:111122223333:targetgroup/login/73e2"
    )]
    Admit(AdmitArgs),
    #[cfg(feature = "admin")]
    /// The host certificate authority: a CA key in a secret of its own.
    #[command(
        subcommand,
        after_help = "Examples:\n  hostkeyctl ca init --ca-secret-id hostkeyctl-ca/my-cluster\n  hostkeyctl ca init --ca-secret-id hostkeyctl-ca/my-cluster --from-file ./ca_key"
    )]
    Ca(CaCommand),
    #[cfg(feature = "admin")]
    /// Sign host certificates on the current key set with the CA; the new
    /// version (same keys) becomes AWSCURRENT.
    #[command(
        after_help = "Examples:\n  hostkeyctl sign --secret-id hostkeys/my-cluster --ca-secret-id hostkeyctl-ca/my-cluster \\\n    --principal login.my-cluster.internal\n  hostkeyctl sign --secret-id hostkeys/my-cluster --ca-secret-id hostkeyctl-ca/my-cluster \\\n    --principal login.my-cluster.internal --renew-before 3"
    )]
    Sign(SignArgs),
    /// On a login node (as root): fetch the key set, install it, reload
    /// sshd, verify what it serves, roll back on any failure.
    #[command(
        after_help = "Examples:\n  hostkeyctl install --secret-id hostkeys/my-cluster\n  hostkeyctl install --check --expect SHA256:..."
    )]
    Install(InstallArgs),
    #[cfg(feature = "admin")]
    /// hostkeyctl's own SSM document, which can only run `hostkeyctl
    /// install`: print it, or deploy it so push and rotate use it.
    #[command(
        subcommand,
        after_help = "Examples:\n  hostkeyctl ssm-document print > hostkeyctl-Install.json\n  hostkeyctl ssm-document deploy"
    )]
    SsmDocument(SsmDocumentCommand),
    #[cfg(feature = "admin")]
    /// A State Manager association that keeps the targets converged to what
    /// the secret's stages say, and converges every new instance as it
    /// comes online: deploy, show or delete it.
    #[command(
        subcommand,
        after_help = "Examples:\n  hostkeyctl association deploy --secret-id hostkeys/my-cluster --target tag:Role=login \\\n    --target tag:Cluster=my-cluster\n  hostkeyctl association deploy --secret-id hostkeys/my-cluster --target tag:Role=login \\\n    --target tag:Cluster=my-cluster --schedule 'rate(1 hour)'\n  hostkeyctl association show --secret-id hostkeys/my-cluster"
    )]
    Association(AssociationCommand),
    #[cfg(feature = "admin")]
    /// Secrets Manager's rotation schedule on the key set: each scheduled
    /// rotation promotes the set the nodes offered for a whole interval
    /// and announces the next (docs/rotation.md, "Scheduled rotation").
    #[command(
        subcommand,
        after_help = "Examples:\n  hostkeyctl schedule enable --secret-id hostkeys/my-cluster \\\n    --function \\\n    arn:aws:lambda:eu-west-1:111122223333:function:hostkeyctl-rotation\n  hostkeyctl schedule enable --secret-id hostkeys/my-cluster --schedule 'rate(90 days)'\n  hostkeyctl schedule show --secret-id hostkeys/my-cluster\n  hostkeyctl schedule rotate --secret-id hostkeys/my-cluster\n  hostkeyctl schedule disable --secret-id hostkeys/my-cluster"
    )]
    Schedule(ScheduleCommand),
    #[cfg(feature = "admin")]
    /// Print the Session Manager commands that run the HyperPod lifecycle
    /// step on an instance group's running nodes (the step runs by itself
    /// only on nodes HyperPod creates).
    #[command(
        after_help = "Examples:\n  hostkeyctl sessions --target hyperpod:my-cluster/login-group \\\n    --step s3://my-lifecycle-bucket/lifecycle/hostkeyctl > sessions.sh\n  sh sessions.sh   (from a terminal, never piped: each session reads its stdin)"
    )]
    Sessions(SessionsArgs),
    /// On a cluster node (as root): prove which instance it is, get host
    /// certificates for its own keys from the cluster's signer, make sshd
    /// serve them, and make this node's ssh trust the cluster's CA, strictly.
    #[command(
        after_help = "Examples:\n  hostkeyctl enroll \\\n    --function \\\n    arn:aws:lambda:eu-west-1:111122223333:function:hostkeyctl-enrolment-hostkeyctl-my-cluster \\\n    --trust 'ip-10-1-*.eu-west-1.compute.internal,ip-10-1-*,10.1.*'\n  hostkeyctl enroll --login-node \\\n    --function \\\n    arn:aws:lambda:eu-west-1:111122223333:function:hostkeyctl-enrolment-hostkeyctl-my-cluster \\\n    --trust 'ip-10-1-*,10.1.*'"
    )]
    Enroll(EnrollArgs),
    /// On a login node (as root): keep the instance metadata service, whose
    /// role reads the key set, to root (docs/security.md).
    #[command(
        after_help = "Examples:\n  hostkeyctl imds-guard\n  hostkeyctl imds-guard --allow-user cwagent\n  hostkeyctl imds-guard --check\n  hostkeyctl imds-guard --open"
    )]
    ImdsGuard(ImdsGuardArgs),
    #[cfg(feature = "admin")]
    /// The enrolment signer's bindings: list the instances that enrolled,
    /// or revoke some (docs/cluster-trust.md).
    #[command(
        subcommand,
        after_help = "Examples:\n  hostkeyctl enrolment list --table hostkeyctl-enrolment-hostkeyctl-my-cluster\n  hostkeyctl enrolment revoke --table hostkeyctl-enrolment-hostkeyctl-my-cluster \\\n    --instance i-0123456789abcdef0"
    )]
    Enrolment(EnrolmentCommand),
    #[cfg(feature = "admin")]
    /// Print a shell completion script (for packages and dotfiles).
    #[command(
        after_help = "Examples:\n  hostkeyctl completions bash > /usr/share/bash-completion/completions/hostkeyctl\n  hostkeyctl completions zsh > /usr/share/zsh/vendor-completions/_hostkeyctl"
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    #[cfg(feature = "admin")]
    /// Write a man page for hostkeyctl and each of its subcommands.
    #[command(after_help = "Examples:\n  hostkeyctl man --out-dir /usr/share/man/man1")]
    Man {
        /// Where to write hostkeyctl.1, hostkeyctl-install.1, ...
        #[arg(long, value_name = "DIR")]
        out_dir: PathBuf,
    },
}

/// `hostkeyctl install`. Node-side options also come from `HOSTKEYCTL_*`
/// environment variables, so one command line works on every node.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The secret holding the key set (name or ARN). Without --version-id
    /// or --stage, install converges to what the secret's stages say:
    /// serve AWSCURRENT, and an announced rotation's AWSPENDING set as
    /// extra host keys.
    #[arg(long, env = "HOSTKEYCTL_SECRET_ID", value_name = "ID")]
    pub secret_id: Option<SecretId>,
    /// Install this exact version (what `push` sends, pinning the stages'
    /// state it read).
    #[arg(long, value_name = "ID", conflicts_with = "stage")]
    pub version_id: Option<VersionId>,
    /// Install the version with this stage only (no AWSPENDING extra keys).
    #[arg(long, value_name = "STAGE")]
    pub stage: Option<StageLabel>,
    /// Refuse unless the set has exactly these fingerprints (repeat per
    /// key, or comma-separated).
    #[arg(long = "expect", value_name = "SHA256:...", value_delimiter = ',')]
    pub expect: Vec<Fingerprint>,
    /// During a rotation's overlap phase: also serve this version's keys,
    /// after the current ones, so clients with UpdateHostKeys learn them.
    #[arg(long, value_name = "ID")]
    pub next_version_id: Option<VersionId>,
    /// Refuse unless the next set has exactly these fingerprints.
    #[arg(
        long = "expect-next",
        value_name = "SHA256:...",
        value_delimiter = ',',
        requires = "next_version_id"
    )]
    pub expect_next: Vec<Fingerprint>,
    /// The node's key files and sshd.
    #[command(flatten)]
    pub node: NodeSshdArgs,
    /// Write the files only: no reload, and so no check of what is served.
    #[arg(long)]
    pub no_reload: bool,
    /// Where to check what sshd serves (default: its first ListenAddress).
    #[arg(long, env = "HOSTKEYCTL_VERIFY_ADDRESS", value_name = "HOST:PORT")]
    pub verify_address: Option<HostPort>,
    /// Root-only directory for backups of replaced files.
    #[arg(
        long,
        env = "HOSTKEYCTL_STATE_DIR",
        default_value = "/var/lib/hostkeyctl",
        value_name = "DIR"
    )]
    pub state_dir: PathBuf,
    /// Lock file that keeps two installs from interleaving [default:
    /// STATE_DIR/install.lock, so that a sandboxed unit, where only
    /// /etc/ssh and the state directory are writable, and a pushed install
    /// take the same lock].
    #[arg(long, env = "HOSTKEYCTL_LOCK_FILE", value_name = "FILE")]
    pub lock_file: Option<PathBuf>,
    /// Backups to keep.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub keep_backups: usize,
    /// Seconds to wait for sshd to serve the new keys after a reload
    /// before rolling back.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    pub verify_timeout: u64,
    /// Seconds to wait for another install to finish.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    pub lock_timeout: u64,
    /// Only compare on-disk and served keys with the set; change nothing
    /// (exit 0 match, 1 drift). With --expect, no secret is read.
    #[arg(long)]
    pub check: bool,
    /// A name every certificate in the set must list (repeat or separate
    /// with commas): the load balancer's DNS name users type. A set
    /// without certificates is then refused too.
    #[arg(
        long = "principal",
        alias = "require-principal",
        env = "HOSTKEYCTL_REQUIRE_PRINCIPALS",
        value_name = "NAME",
        value_delimiter = ','
    )]
    pub require_principals: Vec<crate::certificate::Principal>,
    /// What to do with host certificates this node already serves that
    /// hostkeyctl did not install: refuse (change nothing), replace (write
    /// the set's certificate into each such file) or keep (only when they
    /// certify the set's own keys, as after adopting this node's keys).
    #[arg(long, env = "HOSTKEYCTL_EXISTING_CERTIFICATES", value_enum, default_value_t = crate::install::ExistingCertificates::Refuse, value_name = "CHOICE")]
    pub existing_certificates: crate::install::ExistingCertificates,
    /// Also write a Prometheus textfile here (node_exporter's textfile
    /// collector: a `.prom` file in its directory): the result, whether the
    /// keys converged, when, and each certificate's expiry. Written
    /// atomically, mode 0644; a failure to write it is a warning, never the
    /// install's result.
    #[arg(long, env = "HOSTKEYCTL_METRICS_FILE", value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
    /// Report one SSM Compliance item per key type (`Custom:HostKeys`,
    /// PutComplianceItems) for this instance. On whenever the SSM agent runs
    /// install (it sets AWS_SSM_INSTANCE_ID); a timer turns it on with this
    /// (the instance id then comes from IMDS). A failure to report is a
    /// warning, never the install's result.
    #[arg(long, env = "HOSTKEYCTL_REPORT_COMPLIANCE")]
    pub report_compliance: bool,
}

/// A node's key files and its sshd, as `install` and `enroll` take them.
#[derive(Debug, Args)]
pub struct NodeSshdArgs {
    /// Directory of the ssh_host_<alg>_key files (enroll writes each
    /// certificate beside its key).
    #[arg(long, env = "HOSTKEYCTL_SSH_DIR", default_value = "/etc/ssh", value_name = "DIR")]
    pub ssh_dir: PathBuf,
    /// sshd's main config (default: DIR/sshd_config).
    #[arg(long, env = "HOSTKEYCTL_SSHD_CONFIG", value_name = "FILE")]
    pub sshd_config: Option<PathBuf>,
    /// The sshd binary (for `sshd -t` and `sshd -T`).
    #[arg(long, env = "HOSTKEYCTL_SSHD", default_value = "/usr/sbin/sshd", value_name = "PATH")]
    pub sshd: PathBuf,
    /// Shell command that reloads sshd (default: the systemd ssh/sshd unit,
    /// else SIGHUP to the pid in sshd's PidFile).
    #[arg(long, env = "HOSTKEYCTL_RELOAD_COMMAND", value_name = "CMD")]
    pub reload_command: Option<String>,
}

impl NodeSshdArgs {
    /// The node's sshd as the options name it.
    pub fn sshd(&self) -> crate::install::sshd::Sshd {
        crate::install::sshd::Sshd {
            binary: self.sshd.clone(),
            config: self
                .sshd_config
                .clone()
                .unwrap_or_else(|| self.ssh_dir.join("sshd_config")),
        }
    }

    /// How sshd is reloaded: the command, or found from the system.
    pub fn reload(&self) -> crate::install::sshd::ReloadMethod {
        match &self.reload_command {
            Some(cmd) => crate::install::sshd::ReloadMethod::Command(cmd.clone()),
            None => crate::install::sshd::ReloadMethod::Auto,
        }
    }
}

impl InstallArgs {
    /// The node's sshd as the options name it.
    pub fn sshd(&self) -> crate::install::sshd::Sshd {
        self.node.sshd()
    }

    /// The validated request: `install` (which reads the secret) or
    /// `install --check`.
    pub fn request(&self) -> Result<crate::install::run::RunRequest, crate::install::run::RunError> {
        use crate::install::run::{CheckRequest, RunError, RunRequest};
        use crate::store::VersionSelector;
        let selector = VersionSelector::from_options(self.version_id.as_ref(), self.stage.as_ref());
        if self.check {
            return Ok(RunRequest::Check(CheckRequest {
                secret: self.secret_id.clone().map(|s| (s, selector)),
                expect: self.expect.clone(),
                ssh_dir: self.node.ssh_dir.clone(),
                verify_address: self.verify_address.clone(),
                state_dir: self.state_dir.clone(),
                verify_timeout: std::time::Duration::from_secs(self.verify_timeout),
            }));
        }
        let secret_id = self.secret_id.clone().ok_or(RunError::NoSecret)?;
        let reload = if self.no_reload {
            crate::install::sshd::ReloadMethod::None
        } else {
            self.node.reload()
        };
        Ok(RunRequest::Install(Box::new(crate::install::InstallOptions {
            secret_id,
            selector,
            expect: self.expect.clone(),
            ssh_dir: self.node.ssh_dir.clone(),
            reload,
            verify_address: self.verify_address.clone(),
            state_dir: self.state_dir.clone(),
            lock_file: self
                .lock_file
                .clone()
                .unwrap_or_else(|| self.state_dir.join(crate::install::LOCK_FILE_NAME)),
            keep_backups: self.keep_backups,
            verify_timeout: std::time::Duration::from_secs(self.verify_timeout),
            lock_timeout: std::time::Duration::from_secs(self.lock_timeout),
            next: self.next_version_id.as_ref().map(|v| crate::install::NextVersion {
                version_id: v.clone(),
                expect: self.expect_next.clone(),
            }),
            from_stages: self.version_id.is_none() && self.stage.is_none() && self.next_version_id.is_none(),
            require_principals: self.require_principals.clone(),
            existing_certificates: self.existing_certificates,
        })))
    }
}

/// How `audit` and `admit` ask nodes by handshake.
#[derive(Clone, Debug, Args)]
pub struct ScanArgs {
    /// Connections at once, overall.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub concurrency: usize,
    /// Connections at once to one host (sshd starts dropping unauthenticated
    /// connections at 10 by default: MaxStartups 10:30:100).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub per_host: usize,
    /// Seconds to wait for each connection.
    #[arg(long = "connect-timeout", default_value_t = 5, value_name = "SECS")]
    pub connect_timeout: u64,
    /// Attempts per probe when a connection is dropped or times out.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub attempts: u32,
}

impl ScanArgs {
    /// The scan policy these ask for, asking for `algorithms` (at least one
    /// second and one attempt).
    pub fn policy(&self, algorithms: Vec<crate::scan::ScanAlgorithm>) -> crate::scan::ScanPolicy {
        crate::scan::ScanPolicy::from_options(
            self.concurrency,
            self.per_host,
            self.connect_timeout,
            self.attempts,
            algorithms,
        )
    }
}
