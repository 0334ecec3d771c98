//! `hostkeyctl known-hosts`: client-side files for the canonical set.
//! Parses, reads the set, prints what [`crate::known_hosts`] renders.

use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::cli::{GlobalArgs, KnownHostsArgs};
use crate::exit::{Failure, Status};
use crate::ids::{SecretId, VersionId};
use crate::known_hosts::clients::{self, Client};
use crate::known_hosts::{self, CaSources, Format, Hosts};
use crate::store::VersionSelector;

/// Runs `known-hosts`.
pub async fn run(args: &KnownHostsArgs, global: &GlobalArgs) -> Result<Status, Failure> {
    let usage = |e: String| Failure::usage(anyhow::anyhow!(e));
    let options = clients::Options {
        hash: args.hash,
        sshfp: args.sshfp,
        revoked: args.revoked,
        krl: args.krl.is_some(),
        ssh_config: args.ssh_config,
        cert_authority: args.cert_authority,
    };
    if let Some(why) = args.client.refuses(&options) {
        return Err(usage(format!("{why}; nothing was read or printed")));
    }
    if let Some(path) = &args.krl {
        let Some(secret_id) = &args.secret_id else {
            return Err(usage("--krl needs --secret-id".to_owned()));
        };
        let config = aws::load_config(&global.aws).await?;
        let store = SecretsManagerStore::new(&config);
        return write_krl(&store, secret_id, path, global.quiet).await;
    }
    // plink's arguments name keys, not hosts.
    let hosts = match (args.client, args.hosts.is_empty()) {
        (Client::Plink, true) => None,
        (Client::Plink, false) => {
            return Err(usage(
                "--client plink prints -hostkey arguments, which name keys, not hosts; leave out --host".to_owned(),
            ));
        }
        _ => Some(Hosts::parse(&args.hosts, args.port).map_err(|e| usage(e.to_string()))?),
    };
    if args.ssh_config
        && let Some(hosts) = &hosts
    {
        let text = known_hosts::ssh_config_text(hosts.names(), &args.nodes, hosts.port()).map_err(usage)?;
        print!("{text}");
        return Ok(Status::Success);
    }
    for ca_id in &args.ca_secret_ids {
        args.placement
            .key_set_prefix
            .check_ca(ca_id)
            .map_err(|e| usage(format!("{e}; nothing was read or printed")))?;
    }
    if args.cert_authority
        && args.client == Client::Putty
        && let Some(hosts) = &hosts
    {
        known_hosts::putty::check_validity_names(hosts.names())
            .map_err(|e| usage(format!("{e}; nothing was read or printed")))?;
    }
    let config = aws::load_config(&global.aws).await?;
    let store = SecretsManagerStore::new(&config);
    let pin = (args.version_id.is_some() || args.stage.is_some())
        .then(|| VersionSelector::from_options(args.version_id.as_ref(), args.stage.as_ref()));
    if args.cert_authority
        && let Some(hosts) = &hosts
    {
        let sources = CaSources {
            secret: args.secret_id.as_ref().map(|s| (s, pin)),
            ca_secret_ids: &args.ca_secret_ids,
        };
        let cas = known_hosts::cert_authorities(&store, &sources).await?;
        match args.client {
            Client::Putty => print!("{}", known_hosts::putty::registry_host_cas(&cas, hosts.names())),
            _ => print!(
                "{}",
                known_hosts::cert_authority_lines(&cas, &hosts.patterns().join(",")).concat()
            ),
        }
        return Ok(Status::Success);
    }
    let Some(secret_id) = &args.secret_id else {
        return Err(usage("--secret-id is required without --cert-authority".to_owned()));
    };
    if args.revoked
        && let Some(hosts) = &hosts
    {
        return revoked(&store, secret_id, hosts, global.quiet).await;
    }
    let served = clients::served(&store, secret_id, pin, args.client).await?;
    let format = match (args.sshfp, args.hash) {
        (true, _) => Format::Sshfp,
        (false, true) => Format::Hashed,
        (false, false) => Format::Plain,
    };
    print!("{}", clients::render(args.client, &served.keys, hosts.as_ref(), format));
    if !global.quiet
        && let Some(announced) = &served.announced
    {
        eprintln!("known-hosts: {}", rotation_note(args.client, announced));
    }
    Ok(Status::Success)
}

/// What the user of `client` should know of the rotation in flight.
fn rotation_note(client: Client, announced: &VersionId) -> String {
    if client.takes_every_served_set() {
        format!(
            "a rotation is announced (version {announced}): its keys follow the current ones, so this output stays right after the promotion"
        )
    } else if client.fetch_again_at_promotion() {
        format!(
            "a rotation is announced (version {announced}): {} keeps one key per host and type, so this file is right until the promotion; fetch it again once `rotate --finish` reports `rotated` (docs/clients.md)",
            client.name()
        )
    } else {
        format!(
            "a rotation is announced (version {announced}): ssh learns its keys at login with UpdateHostKeys (see --ssh-config), or add `--stage AWSPENDING`'s lines beside these (docs/clients.md)"
        )
    }
}

/// The keys rotations retired whose certificates are still valid, and
/// what the revocation is for and until when.
async fn retired(
    store: &SecretsManagerStore,
    secret_id: &SecretId,
    now: u64,
) -> Result<(Vec<crate::revocation::Retired>, String), Failure> {
    let retired = crate::revocation::retired(store, secret_id, now).await?;
    let summary = match crate::revocation::until(&retired).map(crate::certificate::rfc3339) {
        None => "no retired key of this secret has a certificate that is still valid: nothing to revoke".to_owned(),
        Some(until) => format!(
            "{} retired key(s) with certificates valid until {until} at the latest: keep this revocation with the clients that trust the CA until then",
            retired.len()
        ),
    };
    Ok((retired, summary))
}

/// `--revoked`: `@revoked` lines for the --host patterns.
async fn revoked(
    store: &SecretsManagerStore,
    secret_id: &SecretId,
    hosts: &Hosts,
    quiet: bool,
) -> Result<Status, Failure> {
    let (retired, summary) = retired(store, secret_id, crate::certificate::now_unix()).await?;
    print!(
        "{}",
        crate::revocation::revoked_lines(&retired, &hosts.patterns().join(","))
    );
    if !quiet {
        eprintln!("known-hosts: {summary}");
    }
    Ok(Status::Success)
}

/// `--krl FILE`: the same keys as an OpenSSH KRL, written atomically.
async fn write_krl(
    store: &SecretsManagerStore,
    secret_id: &SecretId,
    path: &std::path::Path,
    quiet: bool,
) -> Result<Status, Failure> {
    let now = crate::certificate::now_unix();
    let (retired, summary) = retired(store, secret_id, now).await?;
    let bytes = crate::revocation::krl(&retired, now).map_err(Failure::usage)?;
    // Public data: readable by every client on the host.
    let options = crate::fsutil::WriteOptions {
        mode: 0o644,
        owner: None,
        overwrite: true,
    };
    crate::fsutil::write_atomic(path, &bytes, &options).map_err(|e| {
        Failure::usage(anyhow::anyhow!(
            "cannot write the KRL to {}: {e}; nothing was written",
            path.display()
        ))
    })?;
    if !quiet {
        eprintln!("known-hosts: wrote the KRL {}: {summary}", path.display());
    }
    Ok(Status::Success)
}
