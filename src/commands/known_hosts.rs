//! `hostkeyctl known-hosts`: client-side files for the canonical set.
//! Parses, reads the set, prints what [`crate::known_hosts`] renders.

use crate::aws;
use crate::cli::{GlobalArgs, KnownHostsArgs};
use crate::commands::store_failure;
use crate::exit::{Failure, Status};
use crate::known_hosts::{self, CaSources, Format, Hosts, TrustError};
use crate::store::{SecretStore, SecretsManagerStore, VersionSelector};

/// Runs `known-hosts`.
pub async fn run(args: &KnownHostsArgs, global: &GlobalArgs) -> Result<Status, Failure> {
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
