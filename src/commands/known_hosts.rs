//! `hostkeyctl known-hosts`: client-side files for the canonical set.
//! Parses, reads the set, prints what [`crate::known_hosts`] renders.

use crate::aws;
use crate::cli::{GlobalArgs, KnownHostsArgs};
use crate::commands::store_failure;
use crate::exit::{Failure, Status};
use crate::ids::SecretId;
use crate::known_hosts::{self, CaSources, Format, Hosts, TrustError};
use crate::store::{SecretStore, SecretsManagerStore, VersionSelector};

/// Runs `known-hosts`.
pub async fn run(args: &KnownHostsArgs, global: &GlobalArgs) -> Result<Status, Failure> {
    if let Some(path) = &args.krl {
        let Some(secret_id) = &args.secret_id else {
            return Err(Failure::usage(anyhow::anyhow!("--krl needs --secret-id")));
        };
        let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
        let store = SecretsManagerStore::new(&config);
        return write_krl(&store, secret_id, path, global.quiet).await;
    }
    let hosts = Hosts::parse(&args.hosts, args.port).map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
    if args.ssh_config {
        let text = known_hosts::ssh_config_text(hosts.names(), &args.nodes, hosts.port())
            .map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
        print!("{text}");
        return Ok(Status::Success);
    }
    for ca_id in &args.ca_secret_ids {
        args.placement
            .key_set_prefix
            .check_ca(ca_id)
            .map_err(|e| Failure::usage(anyhow::anyhow!("{e}; nothing was read or printed")))?;
    }
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
    let store = SecretsManagerStore::new(&config);
    let pin = (args.version_id.is_some() || args.stage.is_some())
        .then(|| VersionSelector::from_options(args.version_id.as_ref(), args.stage.as_ref()));
    if args.cert_authority {
        let sources = CaSources {
            secret: args.secret_id.as_ref().map(|s| (s, pin)),
            ca_secret_ids: &args.ca_secret_ids,
        };
        let lines = known_hosts::cert_authorities(&store, &sources, &hosts.patterns().join(","))
            .await
            .map_err(|e| match e {
                TrustError::Store(e) => store_failure(e),
                e @ TrustError::NoCertificates { .. } => Failure::usage(anyhow::anyhow!(e)),
            })?;
        print!("{}", lines.concat());
        return Ok(Status::Success);
    }
    let Some(secret_id) = &args.secret_id else {
        return Err(Failure::usage(anyhow::anyhow!(
            "--secret-id is required without --cert-authority"
        )));
    };
    if args.revoked {
        return revoked(&store, secret_id, &hosts, global.quiet).await;
    }
    let selector = pin.unwrap_or_else(|| VersionSelector::from_options(None, None));
    let version = store.get(secret_id, &selector).await.map_err(store_failure)?;
    let format = match (args.sshfp, args.hash) {
        (true, _) => Format::Sshfp,
        (false, true) => Format::Hashed,
        (false, false) => Format::Plain,
    };
    print!("{}", known_hosts::lines(&version.document.keys, &hosts, format));
    Ok(Status::Success)
}

/// The keys rotations retired whose certificates are still valid, and
/// what the revocation is for and until when.
async fn retired(
    store: &SecretsManagerStore,
    secret_id: &SecretId,
    now: u64,
) -> Result<(Vec<crate::revocation::Retired>, String), Failure> {
    let retired = crate::revocation::retired(store, secret_id, now)
        .await
        .map_err(store_failure)?;
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
