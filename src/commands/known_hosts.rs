//! `hostkeyctl known-hosts`: client-side files for the canonical set.
//! Parses, reads the set, prints what [`crate::known_hosts`] renders.

use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::cli::{GlobalArgs, KnownHostsArgs};
use crate::exit::{Failure, Status};
use crate::ids::SecretId;
use crate::known_hosts::clients::{self, Client};
use crate::known_hosts::{self, CaSources, Hosts};

/// Runs `known-hosts`.
pub async fn run(args: &KnownHostsArgs, global: &GlobalArgs) -> Result<Status, Failure> {
    let usage = |e: String| Failure::usage(anyhow::anyhow!(e));
    let hosts = args.hosts().map_err(usage)?;
    if args.ssh_config
        && let Some(hosts) = &hosts
    {
        // Needs no AWS.
        let text = known_hosts::ssh_config_text(hosts.names(), &args.nodes, hosts.port()).map_err(usage)?;
        print!("{text}");
        return Ok(Status::Success);
    }
    let config = aws::load_config(&global.aws).await?;
    let store = SecretsManagerStore::new(&config);
    if let (Some(path), Some(secret_id)) = (&args.krl, &args.secret_id) {
        return revocation(&store, secret_id, Revocation::Krl(path), global.quiet).await;
    }
    let pin = args.pin();
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
        return revocation(&store, secret_id, Revocation::Lines(hosts), global.quiet).await;
    }
    let served = clients::served(&store, secret_id, pin, args.client).await?;
    print!(
        "{}",
        clients::render(args.client, &served.keys, hosts.as_ref(), args.format())
    );
    if !global.quiet
        && let Some(announced) = &served.announced
    {
        eprintln!("known-hosts: {}", args.client.rotation_note(announced));
    }
    Ok(Status::Success)
}

/// `--revoked` (`@revoked` lines for the --host patterns) or `--krl FILE`
/// (the same keys as an OpenSSH KRL, written atomically): the keys
/// rotations retired whose certificates are still valid.
async fn revocation(
    store: &SecretsManagerStore,
    secret_id: &SecretId,
    to: Revocation<'_>,
    quiet: bool,
) -> Result<Status, Failure> {
    let now = crate::certificate::now_unix();
    let retired = crate::revocation::retired(store, secret_id, now).await?;
    let summary = crate::revocation::summary(&retired);
    match to {
        Revocation::Lines(hosts) => {
            print!(
                "{}",
                crate::revocation::revoked_lines(&retired, &hosts.patterns().join(","))
            );
            if !quiet {
                eprintln!("known-hosts: {summary}");
            }
        }
        Revocation::Krl(path) => {
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
        }
    }
    Ok(Status::Success)
}

/// Where the revocation goes.
enum Revocation<'a> {
    /// `@revoked` lines on stdout.
    Lines(&'a Hosts),
    /// A KRL file.
    Krl(&'a std::path::Path),
}
