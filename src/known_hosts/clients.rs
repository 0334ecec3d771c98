//! What each SSH client needs to trust the fleet through a rotation
//! (docs/clients.md). Clients differ in how many keys they keep for one
//! host and type:
//!
//! - every key listed (OpenSSH, AsyncSSH, plink's `-hostkey`): a file with
//!   the announced set beside the current one serves them on both sides
//!   of a promotion;
//! - one key (Paramiko keeps the last line read, Dropbear's dbclient checks
//!   the first, PuTTY's cache has one entry per host, port and type): no
//!   single file serves both sides, so theirs holds the stage the fleet is
//!   in, and is fetched again at promotion.

use ssh_key::PublicKey;

use super::{Format, Hosts, putty};
use crate::ids::{SecretId, VersionId};
use crate::store::{SecretStore, StoreError, VersionSelector};

/// The client `known-hosts` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Client {
    /// OpenSSH's known_hosts: AWSCURRENT's keys (ssh learns an announced
    /// set itself, with UpdateHostKeys: see --ssh-config).
    Openssh,
    /// AsyncSSH's known_hosts (OpenSSH's format): AWSCURRENT's keys and,
    /// during a rotation, the announced set's; AsyncSSH accepts any listed
    /// key, so a file fetched during the overlap still works after the
    /// promotion.
    Asyncssh,
    /// Paramiko's known_hosts: AWSCURRENT's keys alone (Paramiko keeps one
    /// key per host and type, the last line read): fetch it again when a
    /// rotation is promoted.
    Paramiko,
    /// Dropbear dbclient's ~/.ssh/known_hosts: AWSCURRENT's keys alone, one
    /// name per line, no port (dbclient checks the first line for a host and
    /// type, and ignores the port): fetch it again when a rotation is
    /// promoted.
    Dropbear,
    /// `-hostkey` arguments for plink, pscp and psftp: every key of
    /// AWSCURRENT and, during a rotation, of the announced set, so
    /// arguments fetched during the overlap still work after the promotion.
    Plink,
    /// PuTTY's host key cache as a Windows registry file: AWSCURRENT's keys
    /// alone (one key per host, port and type): import it again when a
    /// rotation is promoted. With --cert-authority: the host CA set-up of
    /// PuTTY 0.78 and later.
    Putty,
}

impl Client {
    /// The name users know the client by.
    pub fn name(self) -> &'static str {
        match self {
            Client::Openssh => "OpenSSH",
            Client::Asyncssh => "AsyncSSH",
            Client::Paramiko => "Paramiko",
            Client::Dropbear => "Dropbear",
            Client::Plink => "plink",
            Client::Putty => "PuTTY",
        }
    }

    /// Whether the output holds every set the nodes serve (AWSCURRENT and
    /// an announced set), because the client accepts any key it is given.
    pub fn takes_every_served_set(self) -> bool {
        matches!(self, Client::Asyncssh | Client::Plink)
    }

    /// Whether the client keeps one key per host and type, so its file
    /// must be fetched again when a rotation is promoted.
    pub fn fetch_again_at_promotion(self) -> bool {
        matches!(self, Client::Paramiko | Client::Dropbear | Client::Putty)
    }

    /// What the user of `client` should know of the rotation in flight.
    pub fn rotation_note(self, announced: &VersionId) -> String {
        if self.takes_every_served_set() {
            format!(
                "a rotation is announced (version {announced}): its keys follow the current ones, so this output stays right after the promotion"
            )
        } else if self.fetch_again_at_promotion() {
            format!(
                "a rotation is announced (version {announced}): {} keeps one key per host and type, so this file is right until the promotion; fetch it again once `rotate --finish` reports `rotated` (docs/clients.md)",
                self.name()
            )
        } else {
            format!(
                "a rotation is announced (version {announced}): ssh learns its keys at login with UpdateHostKeys (see --ssh-config), or add `--stage AWSPENDING`'s lines beside these (docs/clients.md)"
            )
        }
    }

    /// Why an option of `known-hosts` does not apply to this client, if it
    /// does not.
    pub fn refuses(self, options: &Options) -> Option<String> {
        let openssh_only = [
            (options.sshfp, "--sshfp"),
            (options.revoked, "--revoked"),
            (options.krl, "--krl"),
            (options.ssh_config, "--ssh-config"),
        ];
        if self != Client::Openssh
            && let Some((_, flag)) = openssh_only.iter().find(|(set, _)| *set)
        {
            return Some(format!("{flag} is for OpenSSH; leave out --client {}", self.arg()));
        }
        if options.hash && !matches!(self, Client::Openssh | Client::Asyncssh | Client::Paramiko) {
            return Some(format!(
                "{} cannot read hashed host names; leave out --hash",
                self.name()
            ));
        }
        if options.cert_authority && !matches!(self, Client::Openssh | Client::Asyncssh | Client::Putty) {
            return Some(format!(
                "{} does not trust host certificates; its file lists the keys (leave out --cert-authority)",
                self.name()
            ));
        }
        None
    }

    /// The value of `--client` that names it.
    pub fn arg(self) -> &'static str {
        match self {
            Client::Openssh => "openssh",
            Client::Asyncssh => "asyncssh",
            Client::Paramiko => "paramiko",
            Client::Dropbear => "dropbear",
            Client::Plink => "plink",
            Client::Putty => "putty",
        }
    }
}

/// The keys a client's output lists, and the announced set's version when
/// a rotation is in flight (and no version was pinned).
#[derive(Debug)]
pub struct Served {
    /// AWSCURRENT's keys (or the pinned version's), then, for a client
    /// that takes every served set, the announced set's.
    pub keys: Vec<PublicKey>,
    pub announced: Option<VersionId>,
}

/// What `known-hosts --client` lists: the pinned version's keys, or
/// AWSCURRENT's and, for a client that takes every set the nodes serve,
/// those of every other set they may offer after them (each key once:
/// [`crate::store::Servable::others`]). Reads the stages as the nodes do.
pub async fn served(
    store: &impl SecretStore,
    secret: &SecretId,
    pin: Option<VersionSelector>,
    client: Client,
) -> Result<Served, StoreError> {
    let pinned = pin.is_some();
    let selector = pin.unwrap_or_else(|| VersionSelector::from_options(None, None));
    let version = store.get(secret, &selector).await?;
    let mut keys: Vec<PublicKey> = version.document.keys.keys().map(|k| k.public_key().clone()).collect();
    if pinned {
        return Ok(Served { keys, announced: None });
    }
    let servable = crate::store::servable_with(store, secret, version).await?;
    if client.takes_every_served_set() {
        // Every set nodes may offer: the announced one, and for a while
        // after a promotion the set it retired, which nodes not converged
        // yet still sign with.
        for key in servable
            .others()
            .flat_map(|v| v.document.keys.keys())
            .map(|k| k.public_key())
        {
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
    }
    let current = &servable.current.document.keys;
    let announced = [servable.pending, servable.next]
        .into_iter()
        .flatten()
        .find(|v| !crate::store::same_keys(&v.document.keys, current));
    Ok(Served {
        keys,
        announced: announced.map(|n| n.version_id),
    })
}

/// The options of `known-hosts` that only some clients take.
#[derive(Debug, Default, Clone, Copy)]
pub struct Options {
    pub hash: bool,
    pub sshfp: bool,
    pub revoked: bool,
    pub krl: bool,
    pub ssh_config: bool,
    pub cert_authority: bool,
}

/// What `known-hosts --client CLIENT` prints for `keys`: each set's keys
/// in the order given, every one once. `hosts` may be `None` for plink
/// alone (its arguments name keys, not hosts). `format` is for the
/// clients that read OpenSSH's files ([`Client::refuses`] the others).
pub fn render(client: Client, keys: &[PublicKey], hosts: Option<&Hosts>, format: Format) -> String {
    match (client, hosts) {
        (Client::Plink, _) => putty::hostkey_args(keys),
        (Client::Putty, Some(hosts)) => putty::registry_host_keys(keys, hosts.names(), hosts.port()),
        (Client::Dropbear, Some(hosts)) => dropbear_lines(keys, hosts.names()),
        (Client::Openssh | Client::Asyncssh | Client::Paramiko, Some(hosts)) => {
            super::lines_of(keys.iter(), hosts, format)
        }
        (_, None) => String::new(),
    }
}

/// Dropbear's lines: `NAME TYPE BASE64`, one name per line, whatever the
/// port (dbclient 2022.83 matches the first field against the host name
/// it was given, exactly, and writes lines the same way).
fn dropbear_lines(keys: &[PublicKey], names: &[String]) -> String {
    let mut out = String::new();
    for name in names {
        for key in keys {
            out.push_str(&format!("{name} {}\n", super::key_part(key)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Client, Options, render};
    use crate::known_hosts::{Format, Hosts};

    fn keys() -> Vec<ssh_key::PublicKey> {
        (0..2)
            .map(|_| {
                ssh_key::PrivateKey::random(&mut rand::rng(), ssh_key::Algorithm::Ed25519)
                    .unwrap()
                    .public_key()
                    .clone()
            })
            .collect()
    }

    #[test]
    fn dropbear_gets_one_bare_name_per_line_whatever_the_port() {
        let keys = keys();
        let hosts = Hosts::parse(&["login.test".into(), "10.0.0.5".into()], 2222).unwrap();
        let text = render(Client::Dropbear, &keys, Some(&hosts), Format::Plain);
        let firsts: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(firsts, ["login.test", "login.test", "10.0.0.5", "10.0.0.5"]);
    }

    #[test]
    fn plink_gets_one_hostkey_argument_per_key_and_no_host() {
        let keys = keys();
        let text = render(Client::Plink, &keys, None, Format::Plain);
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(words.len(), 4, "{text}");
        assert_eq!(words[0], "-hostkey");
        assert_eq!(words[1], keys[0].fingerprint(ssh_key::HashAlg::Sha256).to_string());
    }

    #[test]
    fn options_of_another_client_are_refused_with_the_way_out() {
        let hash = Options {
            hash: true,
            ..Options::default()
        };
        assert!(Client::Dropbear.refuses(&hash).unwrap().contains("leave out --hash"));
        assert!(Client::Paramiko.refuses(&hash).is_none());
        let sshfp = Options {
            sshfp: true,
            ..Options::default()
        };
        assert!(
            Client::Putty
                .refuses(&sshfp)
                .unwrap()
                .contains("--sshfp is for OpenSSH")
        );
        let ca = Options {
            cert_authority: true,
            ..Options::default()
        };
        assert!(Client::Paramiko.refuses(&ca).is_some());
        assert!(Client::Putty.refuses(&ca).is_none());
    }
}
