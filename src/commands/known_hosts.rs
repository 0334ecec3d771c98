//! `hostkeyctl known-hosts`: client-side files for the canonical set.
//! Parses, reads the set, prints what [`crate::known_hosts`] renders.

use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::cli::{GlobalArgs, KnownHostsArgs};
use crate::exit::{Failure, Status};
use crate::ids::SecretId;
use crate::known_hosts::clients::{self, Client};
use crate::known_hosts::made::{MadeKrl, MadeText};
use crate::known_hosts::{self, CaSources, Hosts};
use crate::output::{self, OutputFormat};

/// Runs `known-hosts`.
pub async fn run(args: &KnownHostsArgs, global: &GlobalArgs) -> Result<Status, Failure> {
    let usage = |e: String| Failure::usage(anyhow::anyhow!(e));
    let hosts = args.hosts().map_err(usage)?;
    if args.ssh_config
        && let Some(hosts) = &hosts
    {
        // Needs no AWS.
        let text = known_hosts::ssh_config_text(hosts.names(), &args.nodes, hosts.port()).map_err(usage)?;
        return emit(global, "ssh_config", args, &text);
    }
    let config = aws::load_config(&global.aws).await?;
    let store = SecretsManagerStore::new(&config);
    if let (Some(path), Some(secret_id)) = (&args.krl, &args.secret_id) {
        return revocation(&store, secret_id, Revocation::Krl(path), global, args).await;
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
        let text = match args.client {
            Client::Putty => known_hosts::putty::registry_host_cas(&cas, hosts.names()),
            _ => known_hosts::cert_authority_lines(&cas, &hosts.patterns().join(",")).concat(),
        };
        return emit(global, "cert_authority", args, &text);
    }
    let Some(secret_id) = &args.secret_id else {
        return Err(usage("--secret-id is required without --cert-authority".to_owned()));
    };
    if args.revoked
        && let Some(hosts) = &hosts
    {
        return revocation(&store, secret_id, Revocation::Lines(hosts), global, args).await;
    }
    let served = clients::served(&store, secret_id, pin, args.client).await?;
    let text = clients::render(args.client, &served.keys, hosts.as_ref(), args.format());
    emit(global, "known_hosts", args, &text)?;
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
    global: &GlobalArgs,
    args: &KnownHostsArgs,
) -> Result<Status, Failure> {
    let quiet = global.quiet;
    let now = crate::certificate::now_unix();
    let retired = crate::revocation::retired(store, secret_id, now).await?;
    let summary = crate::revocation::summary(&retired);
    // Recorded before anything is written: `rotate --rollback` then knows
    // which keys clients may refuse (docs/certificates.md, "Revocation").
    crate::revocation::record(store, secret_id, &retired).await.map_err(|e| {
        let status = crate::exit::ExitStatus::status(&e);
        Failure::with_status(
            status,
            anyhow::anyhow!(
                "{e}\n  known-hosts records what it revokes in the secret's tag {} (secretsmanager:TagResource, the admin role's) before it writes anything, so that rotate --rollback knows which keys clients refuse; nothing was written",
                crate::revocation::TAG_REVOKED
            ),
        )
    })?;
    match to {
        Revocation::Lines(hosts) => {
            let text = crate::revocation::revoked_lines(&retired, &hosts.patterns().join(","));
            emit(global, "revoked", args, &text)?;
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
            if global.output == OutputFormat::Json {
                let client = client_name(args);
                let written = MadeKrl::new(path, client.as_deref(), &summary);
                output::print_json(&written).map_err(Failure::usage)?;
            }
            if !quiet {
                eprintln!("known-hosts: wrote the KRL {}: {summary}", path.display());
            }
        }
    }
    Ok(Status::Success)
}

/// `--client`'s name.
fn client_name(args: &KnownHostsArgs) -> Option<String> {
    clap::ValueEnum::to_possible_value(&args.client).map(|v| v.get_name().to_owned())
}

/// Prints what known-hosts made: the text as it is (the default: it goes
/// into files and command lines), or, with `--output json` (or
/// `HOSTKEYCTL_OUTPUT=json`), one JSON object holding it (`schema`,
/// `kind`, `client`, `text`).
fn emit(global: &GlobalArgs, kind: &str, args: &KnownHostsArgs, text: &str) -> Result<Status, Failure> {
    if global.output == OutputFormat::Json {
        let client = client_name(args);
        output::print_json(&MadeText::new(kind, client.as_deref(), text)).map_err(Failure::usage)?;
    } else {
        print!("{text}");
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
