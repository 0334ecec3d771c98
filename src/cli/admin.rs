//! The admin commands' arguments: absent from the node build, which has
//! only `install` (Cargo feature `admin`).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::discovery::TargetSpec;
use crate::fingerprint::Fingerprint;
use crate::hostport::HostPort;
use crate::ids::{Program, SecretId, StageLabel, VersionId};
use crate::keyset::{DEFAULT_RSA_BITS, KeyAlgorithm};

/// `hostkeyctl keygen`.
#[derive(Debug, Args)]
pub struct KeygenArgs {
    /// Directory to write ssh_host_<alg>_key (0600) and .pub (0644) into;
    /// created if missing.
    #[arg(long, value_name = "DIR")]
    pub out_dir: PathBuf,
    /// Which algorithms to generate, comma separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ed25519,ecdsa,rsa",
        value_name = "ALG,..."
    )]
    pub algorithms: Vec<KeyAlgorithm>,
    /// RSA modulus size in bits (2048 to 8192).
    #[arg(long, default_value_t = DEFAULT_RSA_BITS, value_name = "BITS")]
    pub rsa_bits: usize,
    /// Overwrite existing key files in DIR.
    #[arg(long)]
    pub force: bool,
}

/// `hostkeyctl init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Name of the secret to create.
    #[arg(long, value_name = "NAME")]
    pub secret_id: SecretId,
    /// Algorithms of the set, comma separated (with --from-dir: which of
    /// the node's keys to adopt; default all found).
    #[arg(long, value_delimiter = ',', value_name = "ALG,...")]
    pub algorithms: Option<Vec<KeyAlgorithm>>,
    /// RSA modulus size in bits for a generated set.
    #[arg(long, default_value_t = DEFAULT_RSA_BITS, value_name = "BITS")]
    pub rsa_bits: usize,
    /// Adopt the ssh_host_<alg>_key files in DIR (e.g. a copy of one
    /// node's /etc/ssh) instead of generating new keys.
    #[arg(long, value_name = "DIR")]
    pub from_dir: Option<PathBuf>,
    /// Customer managed KMS key for the secret (default: aws/secretsmanager).
    #[arg(long, value_name = "KEY")]
    pub kms_key_id: Option<String>,
    /// Extra tag on the secret (repeatable).
    #[arg(long = "tag", value_name = "KEY=VALUE", value_parser = parse_tag)]
    pub tags: Vec<(String, String)>,
    /// Description of the secret.
    #[arg(
        long,
        default_value = "SSH host keys shared by the login nodes (managed by hostkeyctl)"
    )]
    pub description: String,
}

/// `hostkeyctl status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The secret (name or ARN).
    #[arg(long, value_name = "ID")]
    pub secret_id: SecretId,
    /// Also count the nodes that serve AWSCURRENT, by handshake: any
    /// --target of audit (repeatable).
    #[arg(long = "target", value_name = "SPEC")]
    pub targets: Vec<TargetSpec>,
    /// The SSH port: the nodes' sshd and the load balancer's listener
    /// (lb: targets), when not 22.
    #[arg(long, default_value_t = 22, value_name = "PORT")]
    pub port: u16,
}

fn parse_tag(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.starts_with("hostkeyctl:") => Ok((k.to_owned(), v.to_owned())),
        Some((k, _)) if k.starts_with("hostkeyctl:") => {
            Err(format!("tag keys starting with hostkeyctl: are reserved: {k}"))
        }
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

/// `hostkeyctl push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The secret (name or ARN).
    #[arg(long, value_name = "ID")]
    pub secret_id: SecretId,
    /// Which nodes: tag:KEY=VALUE or i-... (repeatable; all must match),
    /// or lb:NAME_OR_ARN / tg:ARN (the instances behind a load balancer).
    #[arg(long = "target", value_name = "SPEC", required = true)]
    pub targets: Vec<TargetSpec>,
    /// The SSH port: the nodes' sshd and the load balancer's listener
    /// (lb: targets), when not 22.
    #[arg(long, default_value_t = 22, value_name = "PORT")]
    pub port: u16,
    /// Push this exact version.
    #[arg(long, value_name = "ID", conflicts_with = "stage")]
    pub version_id: Option<VersionId>,
    /// Push the version with this stage (default AWSCURRENT); its version
    /// id is pinned, so every node gets the same set even if stages move.
    #[arg(long, value_name = "STAGE")]
    pub stage: Option<StageLabel>,
    /// How the install command goes out through SSM Run Command.
    #[command(flatten)]
    pub rollout: RolloutArgs,
    /// Print the targets and the exact command; send nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// `hostkeyctl audit` (`--timeout`, its old spelling of `--connect-timeout`,
/// is its alone: `admit` never had it).
#[derive(Debug, Args)]
#[command(mut_arg("connect_timeout", |a| a.alias("timeout")))]
pub struct AuditArgs {
    /// Expected set from this secret: its public fingerprints from the
    /// tags (DescribeSecret only), or the value with --stage/--version-id.
    #[arg(long, value_name = "ID", conflicts_with_all = ["known_hosts", "expect"])]
    pub secret_id: Option<SecretId>,
    /// Read this stage's value (needs secretsmanager:GetSecretValue).
    #[arg(long, value_name = "STAGE", requires = "secret_id", conflicts_with = "version_id")]
    pub stage: Option<StageLabel>,
    /// Read this version's value (needs secretsmanager:GetSecretValue).
    #[arg(long, value_name = "ID", requires = "secret_id")]
    pub version_id: Option<VersionId>,
    /// Expected set from a known_hosts file (one key per type).
    #[arg(long, value_name = "FILE", conflicts_with = "expect")]
    pub known_hosts: Option<PathBuf>,
    /// Expected fingerprint (repeat per key, or comma-separated; matched
    /// by value).
    #[arg(long = "expect", value_name = "SHA256:...", value_delimiter = ',')]
    pub expect: Vec<Fingerprint>,
    /// Nodes: tag:KEY=VALUE or i-... (repeatable; all must match), or
    /// node sources lb:NAME_OR_ARN, tg:ARN, hyperpod:CLUSTER[/GROUP]
    /// (repeatable; their nodes together, each with its health).
    #[arg(long = "target", value_name = "SPEC")]
    pub targets: Vec<TargetSpec>,
    /// A node given directly (repeatable; each is audited as given).
    #[arg(long = "endpoint", value_name = "HOST[:PORT]", value_delimiter = ',')]
    pub endpoints: Vec<HostPort>,
    /// The SSH port: the nodes' sshd and the load balancer's listener
    /// (lb: targets), when not 22.
    #[arg(long, default_value_t = 22, value_name = "PORT")]
    pub port: u16,
    /// The load balancer to sample: HOST[:PORT], or lb:NAME_OR_ARN (its DNS
    /// name and SSH listener, and its registered targets as the backends).
    // The help text's brackets are no links.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, value_name = "HOST[:PORT]|lb:NAME")]
    pub lb: Option<crate::discovery::LbSpec>,
    /// Connections per key type through the load balancer.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub samples: usize,
    /// Backends behind the load balancer (default: the number of nodes
    /// audited), for the chance that a bad one was missed.
    #[arg(long, value_name = "K")]
    pub backends: Option<usize>,
    /// Key types to ask each node for.
    #[arg(long, value_delimiter = ',', value_name = "TYPE,...", value_parser = parse_scan_algorithm,
          default_value = "ssh-ed25519,ecdsa-sha2-nistp256,ecdsa-sha2-nistp384,ecdsa-sha2-nistp521,ssh-rsa")]
    pub key_types: Vec<crate::scan::ScanAlgorithm>,
    /// How the nodes are asked by handshake.
    #[command(flatten)]
    pub scan: crate::cli::ScanArgs,
    /// Also run `hostkeyctl install --check` on the --target nodes over SSM
    /// and report what is on disk (catches keys written but not served).
    #[arg(long)]
    pub via_ssm: bool,
    /// With --via-ssm: how the nodes call hostkeyctl.
    #[arg(long, default_value = "hostkeyctl", value_name = "PATH")]
    pub node_command: Program,
    /// With --via-ssm: the SSM document, hostkeyctl's check document
    /// (`ssm-document deploy`), sent only when its SHA-256 is this binary's;
    /// another name sends that custom document, AWS-RunShellScript the shell.
    #[arg(long, default_value = crate::ssm_document::CHECK_NAME, value_name = "NAME", requires = "via_ssm")]
    pub check_document: String,
    /// Ask every node for host certificates and judge them: trusted CA
    /// fingerprint (repeat during a CA rotation). Verdicts: OK, EXPIRING,
    /// EXPIRED, WRONG_CA, PRINCIPAL_MISSING, NOT_HOST_CERT, CERT_MISSING.
    #[arg(long = "ca-fingerprint", value_name = "SHA256:...", value_delimiter = ',')]
    pub ca_fingerprints: Vec<Fingerprint>,
    /// A name every certificate must list (repeat, or separate with
    /// commas).
    #[arg(
        long = "principal",
        value_name = "NAME",
        requires = "ca_fingerprints",
        value_delimiter = ','
    )]
    pub principals: Vec<crate::certificate::Principal>,
    /// EXPIRING (a warning, exit 0) when fewer days of validity are left.
    /// The default suits sign's 7 days renewed daily at 3 days left
    /// (docs/certificates.md): below 2, a renewal was missed.
    #[arg(long, default_value_t = 2, value_name = "DAYS", requires = "ca_fingerprints")]
    pub warn_days: u64,
    /// Judge clients' messages against this OpenSSH client release: a
    /// message it prints by default makes the exit status drift's (1).
    /// Default: the newest release this build knows.
    #[arg(long, value_name = "MAJOR.MINOR", default_value_t = crate::scan::warnings::ClientVersion::NEWEST)]
    pub client_version: crate::scan::warnings::ClientVersion,
    /// A client message the site accepts (repeat, or separate with
    /// commas): still reported, no longer exit 1 (a node left in FIPS
    /// mode: no_post_quantum_kex).
    #[arg(long = "accept-message", value_name = "CODE", value_delimiter = ',')]
    pub accept_messages: Vec<crate::scan::warnings::MessageCode>,
    /// Also write the audit's metrics (nodes and samples by verdict,
    /// certificate days left, duration) as a Prometheus textfile, for
    /// node_exporter's textfile collector on this host. Atomic, mode 0644.
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
    /// Also publish them to CloudWatch under this namespace
    /// (PutMetricData; `NodesNotOk` is what the template's alarm watches).
    /// One namespace per fleet, e.g. hostkeyctl/my-cluster. In Lambda
    /// (AWS_LAMBDA_FUNCTION_NAME set): the embedded metric format on
    /// stdout instead, one document per line.
    #[arg(long, value_name = "NAMESPACE", value_parser = parse_namespace)]
    pub cloudwatch: Option<String>,
}

/// A CloudWatch namespace as PutMetricData takes it.
fn parse_namespace(s: &str) -> Result<String, String> {
    let ok = (1..=255).contains(&s.len())
        && !s.starts_with("AWS/")
        && s.chars().all(|c| c.is_ascii_alphanumeric() || ".-_/#:".contains(c));
    if ok {
        Ok(s.to_owned())
    } else {
        Err("1 to 255 letters, digits and . - _ / # :, not starting with AWS/ (CloudWatch's rule)".to_owned())
    }
}

fn parse_scan_algorithm(s: &str) -> Result<crate::scan::ScanAlgorithm, String> {
    let s = s.trim();
    crate::scan::ScanAlgorithm::ALL
        .into_iter()
        .find(|a| a.key_type() == s || (s == "ed25519" && a.key_type() == "ssh-ed25519") || (s == "rsa" && a.key_type() == "ssh-rsa") || (s == "ecdsa" && a.key_type() == "ecdsa-sha2-nistp256"))
        .ok_or_else(|| format!("unknown key type {s:?}: use ssh-ed25519, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, ecdsa-sha2-nistp521 or ssh-rsa"))
}

/// Where the key sets live, so that no CA is ever placed or read where the
/// login nodes' role can read it.
#[derive(Debug, Args)]
pub struct KeySetPrefixArg {
    /// Prefix of the key set secrets, which every login node's role may
    /// read (iam/node.json): a CA secret under it is refused.
    #[arg(
        long,
        env = "HOSTKEYCTL_KEY_SET_PREFIX",
        default_value = crate::document::DEFAULT_KEY_SET_PREFIX,
        value_name = "PREFIX"
    )]
    pub key_set_prefix: crate::document::KeySetPrefix,
}

/// `hostkeyctl ca ...`.
#[derive(Debug, Subcommand)]
pub enum CaCommand {
    /// Create the CA secret: a new CA key, or one adopted from a file. Its
    /// public fingerprint goes into the tags, for auditors.
    Init(CaInitArgs),
}

#[derive(Debug, Args)]
pub struct CaInitArgs {
    /// The CA secret's name (what sign, rotate and known-hosts take as
    /// --ca-secret-id).
    #[arg(long = "ca-secret-id", alias = "secret-id", value_name = "NAME")]
    pub ca_secret_id: SecretId,
    /// Algorithm of a new CA key.
    #[arg(long, default_value = "ed25519", value_name = "ALG", conflicts_with = "from_file")]
    pub algorithm: KeyAlgorithm,
    /// Adopt this unencrypted OpenSSH private key as the CA.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["kms", "kms_ca_key"])]
    pub from_file: Option<PathBuf>,
    /// Create the CA as a KMS signing key (its private key never leaves
    /// KMS; --algorithm ed25519, ecdsa (P-256) or rsa (3072 bits)): the
    /// secret then holds its ARN and public key only.
    #[arg(long, conflicts_with = "kms_ca_key")]
    pub kms: bool,
    /// Use this existing KMS signing key (id, ARN or alias/NAME) as the
    /// CA: ECC_NIST_P256, ECC_NIST_P384, ECC_NIST_EDWARDS25519 or RSA.
    #[arg(long, value_name = "KEY", conflicts_with = "algorithm")]
    pub kms_ca_key: Option<String>,
    /// A customer managed KMS key that encrypts the secret (not the CA).
    #[arg(long, value_name = "KEY")]
    pub kms_key_id: Option<String>,
    /// Extra tags (KEY=VALUE).
    #[arg(long = "tag", value_name = "KEY=VALUE", value_parser = parse_tag)]
    pub tags: Vec<(String, String)>,
    #[command(flatten)]
    pub placement: KeySetPrefixArg,
}

#[derive(Debug, Args)]
pub struct SignArgs {
    /// The key set secret.
    #[arg(long, value_name = "ID")]
    pub secret_id: SecretId,
    /// The CA secret (`hostkeyctl ca init`).
    #[arg(long, value_name = "ID")]
    pub ca_secret_id: SecretId,
    /// A name the certificates are valid for; repeat for every name users
    /// type (load balancer DNS name, aliases, node names). No wildcards.
    #[arg(long = "principal", value_name = "NAME", required = true, value_delimiter = ',')]
    pub principals: Vec<crate::certificate::Principal>,
    /// Validity from now, in days. Short, because a rotation's retired
    /// certificates stay valid for it (docs/security.md): renew daily with
    /// --renew-before. Above 30 days sign warns.
    #[arg(long, default_value_t = crate::certificate::DEFAULT_VALIDITY_DAYS, value_name = "DAYS", value_parser = clap::value_parser!(u64).range(1..=3650))]
    pub validity_days: u64,
    /// Serial of the new certificates (default: one more than the current).
    #[arg(long, value_name = "N")]
    pub serial: Option<u64>,
    /// Do nothing while every certificate is from this CA, lists exactly
    /// these principals and has more than DAYS of validity left.
    #[arg(long, value_name = "DAYS")]
    pub renew_before: Option<u64>,
    #[command(flatten)]
    pub placement: KeySetPrefixArg,
}

/// `hostkeyctl ssm-document`.
#[derive(Debug, Subcommand)]
pub enum SsmDocumentCommand {
    /// Print a document's JSON content (byte-stable; `sha256sum` of it is
    /// the hash push, rotate and audit --via-ssm require).
    Print {
        /// How the nodes call hostkeyctl (name on PATH or absolute path).
        #[arg(long, default_value = "hostkeyctl", value_name = "PATH")]
        node_command: Program,
        /// Which document: install (push, rotate), check (audit --via-ssm) or
        /// converge (association deploy).
        #[arg(long, value_enum, default_value = "install", value_name = "KIND")]
        kind: crate::ssm_document::Kind,
    },
    /// Create the three documents, or add a new version and make it the
    /// default where the content changed.
    Deploy {
        /// The install document's name (push and rotate's --document).
        #[arg(long = "document", alias = "name", default_value = crate::ssm_document::DEFAULT_NAME, value_name = "NAME")]
        document: String,
        /// The check document's name (audit's --check-document).
        #[arg(long = "check-document", alias = "check-name", default_value = crate::ssm_document::CHECK_NAME, value_name = "NAME")]
        check_document: String,
        /// The converge document's name (association's --document).
        #[arg(long = "converge-document", alias = "converge-name", default_value = crate::ssm_document::CONVERGE_NAME, value_name = "NAME")]
        converge_document: String,
        /// How the nodes call hostkeyctl (name on PATH or absolute path).
        #[arg(long, default_value = "hostkeyctl", value_name = "PATH")]
        node_command: Program,
    },
    /// Create or update the setup document, which puts the node builds in
    /// DIR, uploaded to --builds-at, on nodes (deliver, association deploy
    /// --deliver). Their SHA-256 are computed here and pinned in it.
    DeploySetup {
        /// The directory holding hostkeyctl-x86_64 and/or
        /// hostkeyctl-aarch64, as the release ships them.
        #[arg(long, value_name = "DIR")]
        builds: std::path::PathBuf,
        /// Where those files are in S3: s3://BUCKET/PREFIX (the node role
        /// needs s3:GetObject on them).
        #[arg(long, value_name = "S3_URI")]
        builds_at: crate::ssm_document::setup::S3Location,
        /// The setup document's name.
        #[arg(long, default_value = crate::ssm_document::setup::SETUP_NAME, value_name = "NAME")]
        document: String,
    },
}

/// `hostkeyctl association`.
#[derive(Debug, Subcommand)]
pub enum AssociationCommand {
    /// Create the association of hostkeyctl's converge document on the
    /// targets, or bring the one of that name to these settings. State
    /// Manager runs it at once, on its schedule, and on every instance that
    /// comes online with the target tags.
    Deploy(AssociationDeployArgs),
    /// Show the association: targets, schedule, last run, and whether it
    /// still runs hostkeyctl's document.
    Show(AssociationShowArgs),
    /// Delete the association. What it installed stays on the nodes.
    Delete(AssociationNameArgs),
}

/// Which association.
#[derive(Debug, Args)]
pub struct AssociationNameArgs {
    /// The secret whose key sets the association installs (name or ARN).
    #[arg(long, value_name = "ID")]
    pub secret_id: SecretId,
    /// The association's name (default: hostkeyctl- and the secret's name).
    #[arg(long, value_name = "NAME", value_parser = parse_association_name)]
    pub name: Option<String>,
}

/// The converge document an association runs.
#[derive(Debug, Args)]
pub struct ConvergeDocumentArgs {
    /// The converge document (`ssm-document deploy`), trusted by its
    /// SHA-256: the association runs the version that holds this binary's
    /// content. Another name is a custom document, run with a warning.
    #[arg(long, default_value = crate::ssm_document::CONVERGE_NAME, value_name = "NAME")]
    pub document: String,
    /// How the nodes call hostkeyctl (name on PATH or absolute path).
    #[arg(long, default_value = "hostkeyctl", value_name = "PATH")]
    pub node_command: Program,
}

/// `hostkeyctl association deploy`.
#[derive(Debug, Args)]
pub struct AssociationDeployArgs {
    #[command(flatten)]
    pub association: AssociationNameArgs,
    /// Where it runs: tag:KEY=VALUE (repeat: every tag must match; how AWS
    /// documents associations for Auto Scaling groups) or instance ids.
    #[arg(long = "target", value_name = "SPEC", required = true)]
    pub targets: Vec<TargetSpec>,
    /// How often it runs besides when an instance comes online: rate(N
    /// minutes|hours|days), at least 30 minutes, or cron(...).
    #[arg(long, default_value = crate::association::DEFAULT_SCHEDULE, value_name = "EXPR")]
    pub schedule: String,
    /// SSM MaxConcurrency of each run (number or percentage).
    #[arg(long, default_value = "10%", value_name = "N|P%")]
    pub max_concurrency: String,
    /// SSM MaxErrors of each run: failures after which the run starts no
    /// more targets (number or percentage).
    #[arg(long, default_value = "10%", value_name = "N|P%")]
    pub max_errors: String,
    /// Deploy tag targets that do not name the secret's Cluster tag
    /// (tag:Cluster=NAME or tag:parallelcluster:cluster-name=NAME): State
    /// Manager resolves them on every run, in every cluster.
    #[arg(long)]
    pub allow_other_clusters: bool,
    #[command(flatten)]
    pub document: ConvergeDocumentArgs,
    /// Also deploy NAME-setup, the association of the setup document
    /// (ssm-document deploy-setup) on the same targets: an instance that
    /// comes online without hostkeyctl gets the pinned build, then the
    /// keys.
    #[arg(long)]
    pub deliver: bool,
    /// The setup document --deliver runs.
    #[arg(long, default_value = crate::ssm_document::setup::SETUP_NAME, value_name = "NAME", requires = "deliver")]
    pub setup_document: String,
    /// With --deliver, the instance metadata service: root-only or open
    /// (as deliver's --imds).
    #[arg(long, default_value = "root-only", value_parser = ["root-only", "open"], value_name = "ACCESS", requires = "deliver")]
    pub imds: String,
}

/// `hostkeyctl association show`.
#[derive(Debug, Args)]
pub struct AssociationShowArgs {
    #[command(flatten)]
    pub association: AssociationNameArgs,
    #[command(flatten)]
    pub document: ConvergeDocumentArgs,
}

/// An association name as State Manager takes it.
fn parse_association_name(s: &str) -> Result<String, String> {
    let ok = (3..=128).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c));
    if ok {
        Ok(s.to_owned())
    } else {
        Err("3 to 128 letters, digits, '_', '-' or '.' (State Manager's rule for association names)".to_owned())
    }
}

/// How `push` and `rotate` send `hostkeyctl install` through SSM Run Command.
#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// Install on this many nodes first; go on only if all of them succeed.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub canary: usize,
    /// SSM MaxConcurrency: nodes installing at once (number or percentage).
    #[arg(long, default_value = "10%", value_name = "N|P%")]
    pub max_concurrency: String,
    /// SSM MaxErrors: failures after which SSM stops starting new nodes.
    #[arg(long, default_value = "0", value_name = "N|P%")]
    pub max_errors: String,
    /// Seconds to wait for all nodes (also the execution timeout on each).
    #[arg(long, default_value_t = 600, value_name = "SECS")]
    pub timeout: u64,
    /// SSM document: hostkeyctl's own (`ssm-document deploy`), sent at its
    /// default version only when that version's SHA-256 is the document this
    /// binary deploys, and refused when it is not deployed (exit 2, nothing
    /// sent). Another name sends that custom document as it is, with its
    /// hash in the report; AWS-RunShellScript sends the shell document (any
    /// command as root on every node), only when named.
    #[arg(long, default_value = crate::ssm_document::DEFAULT_NAME, value_name = "NAME")]
    pub document: String,
    /// How the nodes call hostkeyctl (name on PATH or absolute path).
    #[arg(long, default_value = "hostkeyctl", value_name = "PATH")]
    pub node_command: Program,
    /// Send to instances outside the secret's cluster too. By default every
    /// instance the targets reach must carry the secret's Cluster tag
    /// (Cluster or parallelcluster:cluster-name); a secret without one
    /// refuses targets that reach two clusters.
    #[arg(long)]
    pub allow_other_clusters: bool,
}

impl RolloutArgs {
    /// The push options these ask for, checked, with the document when one
    /// is settled (`None`: the flow settles it, or nothing is sent).
    pub fn push_options(
        &self,
        region: Option<crate::ids::Region>,
        document: Option<crate::ssm_document::SentDocument>,
    ) -> Result<crate::rollout::PushOptions, String> {
        let options = self.unchecked(region, document);
        options.check()?;
        Ok(options)
    }

    /// The push options as given, for a flow that checks them itself
    /// ([`crate::rotation::setup::prepare`]).
    pub fn unchecked(
        &self,
        region: Option<crate::ids::Region>,
        document: Option<crate::ssm_document::SentDocument>,
    ) -> crate::rollout::PushOptions {
        crate::rollout::PushOptions {
            document,
            node_command: self.node_command.clone(),
            max_concurrency: self.max_concurrency.clone(),
            max_errors: self.max_errors.clone(),
            timeout: std::time::Duration::from_secs(self.timeout),
            canary: self.canary,
            region,
        }
    }
}

/// `hostkeyctl sessions`.
#[derive(Debug, Args)]
pub struct SessionsArgs {
    /// The instance group: hyperpod:CLUSTER/GROUP (the cluster's name).
    #[arg(long = "target", value_name = "SPEC", required = true)]
    pub targets: Vec<TargetSpec>,
    /// The lifecycle step's folder in the lifecycle scripts bucket
    /// (install_hostkeyctl.sh, hostkeyctl.env, the units and binaries).
    #[arg(long, value_name = "S3_URI")]
    pub step: crate::sessions::StepUri,
    /// Tell the step the node type instead of letting it find the type in
    /// each node's configs, as it does at node creation (the default: a
    /// group named by mistake then installs no key set on compute nodes).
    #[arg(long, value_enum, value_name = "TYPE")]
    pub node_type: Option<crate::sessions::NodeType>,
}
