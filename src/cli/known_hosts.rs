//! `hostkeyctl known-hosts`'s options (admin build), and what they ask
//! for once checked against each other and the client.

use clap::Args;

use super::admin::KeySetPrefixArg;
use crate::ids::{SecretId, StageLabel, VersionId};
use crate::known_hosts::clients::{Client, Options};
use crate::known_hosts::{Format, Hosts, putty};
use crate::store::VersionSelector;

/// `hostkeyctl known-hosts`.
#[derive(Debug, Args)]
pub struct KnownHostsArgs {
    /// The secret (name or ARN).
    #[arg(long, value_name = "ID", required_unless_present_any = ["ca_secret_ids", "ssh_config"])]
    pub secret_id: Option<SecretId>,
    /// With --cert-authority: also trust this CA (`hostkeyctl ca init`),
    /// read from its value, so a new CA can be distributed before it signs
    /// (repeat for several). Never from tags: anyone who may tag the secret
    /// could otherwise slip in a CA.
    #[arg(
        long = "ca-secret-id",
        value_name = "ID",
        requires = "cert_authority",
        value_delimiter = ','
    )]
    pub ca_secret_ids: Vec<SecretId>,
    /// Host names the lines are for: the load balancer's DNS name, aliases
    /// (not with --krl: a KRL names keys, not hosts; --client plink needs
    /// none).
    #[arg(
        long = "host",
        value_name = "NAME[,NAME...]",
        value_delimiter = ',',
        conflicts_with = "krl"
    )]
    pub hosts: Vec<String>,
    /// The SSH client the output is for: each keeps keys its own way, and
    /// some must fetch theirs again when a rotation is promoted
    /// (docs/clients.md).
    #[arg(long, value_enum, default_value_t = Client::Openssh, value_name = "CLIENT")]
    pub client: Client,
    /// Use this stage (default AWSCURRENT; AWSPENDING during a rotation).
    #[arg(long, value_name = "STAGE", conflicts_with = "version_id")]
    pub stage: Option<StageLabel>,
    /// Use this version.
    #[arg(long, value_name = "ID")]
    pub version_id: Option<VersionId>,
    /// The SSH port users connect to, when not 22 (lines then read
    /// [host]:port).
    // The help text's brackets are no link.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, default_value_t = 22, value_name = "PORT")]
    pub port: u16,
    /// Hash the host names, as `ssh-keygen -H` does.
    #[arg(long, conflicts_with = "sshfp")]
    pub hash: bool,
    /// Print DNS SSHFP records instead, as `ssh-keygen -r` does.
    #[arg(long)]
    pub sshfp: bool,
    /// Print `@cert-authority` lines for the --host patterns instead: one
    /// per CA that signed the set's certificates.
    #[arg(long, conflicts_with_all = ["sshfp", "hash", "ssh_config"])]
    pub cert_authority: bool,
    /// Print `@revoked` lines for the --host patterns instead: every key a
    /// rotation retired whose certificate is still valid (clients that
    /// trust the CA would accept it until then; docs/security.md).
    #[arg(long, conflicts_with_all = ["sshfp", "hash", "ssh_config", "cert_authority", "stage", "version_id"])]
    pub revoked: bool,
    /// Write an OpenSSH KRL of the same keys to FILE instead (clients'
    /// `RevokedHostKeys`; check it with `ssh-keygen -Q -f FILE KEY`). With
    /// nothing to revoke it is a valid KRL that revokes nothing.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["sshfp", "hash", "ssh_config", "cert_authority", "stage", "version_id", "revoked"]
    )]
    pub krl: Option<std::path::PathBuf>,
    /// Print ssh_config `Host` blocks instead: the --host names and the
    /// --node names all check the host key (and certificate principal) as
    /// the first --host name, with `HostKeyAlias`, and learn an announced
    /// set (`UpdateHostKeys yes`).
    #[arg(long, conflicts_with_all = ["sshfp", "hash"])]
    pub ssh_config: bool,
    /// Node names for --ssh-config (repeat or separate with commas): names,
    /// addresses or patterns with `*` and `?` (`10.1.*`, `ip-10-1-*`).
    #[arg(long = "node", value_name = "NAME", value_delimiter = ',', requires = "ssh_config")]
    pub nodes: Vec<String>,
    #[command(flatten)]
    pub placement: KeySetPrefixArg,
}

impl KnownHostsArgs {
    /// The checks no clap rule expresses: what `--client` refuses, the CA
    /// secrets' names, PuTTY's host names. Returns the --host names
    /// (`None` for plink, whose arguments name keys, not hosts), or why
    /// the command line is wrong. `None` as well for --krl.
    pub fn hosts(&self) -> Result<Option<Hosts>, String> {
        let nothing = "nothing was read or printed";
        let options = Options {
            hash: self.hash,
            sshfp: self.sshfp,
            revoked: self.revoked,
            krl: self.krl.is_some(),
            ssh_config: self.ssh_config,
            cert_authority: self.cert_authority,
        };
        if let Some(why) = self.client.refuses(&options) {
            return Err(format!("{why}; {nothing}"));
        }
        if self.krl.is_some() {
            // A KRL names keys, not hosts.
            return match self.secret_id {
                Some(_) => Ok(None),
                None => Err("--krl needs --secret-id".to_owned()),
            };
        }
        for ca_id in &self.ca_secret_ids {
            self.placement
                .key_set_prefix
                .check_ca(ca_id)
                .map_err(|e| format!("{e}; {nothing}"))?;
        }
        let hosts = match (self.client, self.hosts.is_empty()) {
            (Client::Plink, true) => return Ok(None),
            (Client::Plink, false) => {
                return Err(
                    "--client plink prints -hostkey arguments, which name keys, not hosts; leave out --host".to_owned(),
                );
            }
            _ => Hosts::parse(&self.hosts, self.port).map_err(|e| e.to_string())?,
        };
        if self.cert_authority && self.client == Client::Putty {
            putty::check_validity_names(hosts.names()).map_err(|e| format!("{e}; {nothing}"))?;
        }
        Ok(Some(hosts))
    }

    /// The version asked for with --stage or --version-id, if any.
    pub fn pin(&self) -> Option<VersionSelector> {
        (self.version_id.is_some() || self.stage.is_some())
            .then(|| VersionSelector::from_options(self.version_id.as_ref(), self.stage.as_ref()))
    }

    /// How to write the lines.
    pub fn format(&self) -> Format {
        match (self.sshfp, self.hash) {
            (true, _) => Format::Sshfp,
            (false, true) => Format::Hashed,
            (false, false) => Format::Plain,
        }
    }
}
