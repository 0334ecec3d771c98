//! `hostkeyctl rotate`: parses, runs [`crate::rotation`], prints, and maps
//! the outcome to an exit code.

use std::sync::Arc;

use crate::audit::Verdict;
use crate::aws;
use crate::cli::{GlobalArgs, RotateArgs};
use crate::commands::common::{discovery_failure, print_outcome, push_options, resolve_failure, rollout_failure};
use crate::commands::store_failure;
use crate::discovery::{AwsFleet, Fleet, Instance};
use crate::dispatch::SsmDispatcher;
use crate::exit::{Failure, Status};
use crate::fingerprint::Fingerprint;
use crate::output::{self, OutputFormat};
use crate::rotation::{Outcome, Report, Request, Rotation, RotationError};
use crate::scan::SshProber;
use crate::scan::pacing::{Ledger, Paced};
use crate::store::{SecretStore, SecretsManagerStore};

/// The exit status of a rotation outcome.
pub fn exit_status(outcome: Outcome) -> Status {
    match outcome {
        Outcome::Rotated
        | Outcome::StoppedAfterCreate
        | Outcome::StoppedAfterSet
        | Outcome::StoppedAfterTest
        | Outcome::Aborted
        | Outcome::NothingToAbort
        | Outcome::OverlapStarted
        | Outcome::Announced
        | Outcome::Completed => Status::Success,
        Outcome::AuditFailed => Status::Drift,
        Outcome::PushFailed | Outcome::AuditIncomplete | Outcome::AbortPushFailed | Outcome::NotConverged => {
            Status::Incomplete
        }
    }
}

/// Rotation errors as exit statuses.
pub fn rotation_failure(e: RotationError) -> Failure {
    match e {
        RotationError::Store(s) => store_failure(s),
        RotationError::Rollout(r) => rollout_failure(r),
        RotationError::Generate(g) => Failure::usage(anyhow::Error::new(g).context("generating the new key set")),
        RotationError::Refused(m) => Failure::usage(anyhow::anyhow!(m)),
        // Held back (too early, or nodes not serving the set): nothing
        // moved; a later run completes it.
        RotationError::Held(h) => Failure::with_status(Status::Incomplete, anyhow::Error::new(h)),
        RotationError::Interrupted { source, state } => {
            let failure = store_failure(*source);
            Failure::with_status(failure.status, failure.error.context(state))
        }
    }
}

/// The CA of `--ca-secret-id`, read before anything else happens.
async fn rotation_ca(
    args: &RotateArgs,
    store: &SecretsManagerStore,
) -> Result<Option<crate::keyset::HostKey>, Failure> {
    let Some(ca_id) = &args.ca_secret_id else {
        return Ok(None);
    };
    let ca = store.get_ca(ca_id).await.map_err(store_failure)?;
    Ok(Some(ca.key))
}

/// What a rotation reaches: the store, SSM, the nodes and the CA, set up
/// from `rotate`'s options (shared with the scheduled rotation's Lambda
/// function, which takes the same options).
pub struct Prepared {
    /// Secrets Manager.
    pub store: SecretsManagerStore,
    /// SSM Run Command.
    pub dispatcher: SsmDispatcher,
    /// How to push.
    pub push: crate::rollout::PushOptions,
    /// The login nodes (none are looked up for a pull fleet's schedule).
    pub instances: Vec<Instance>,
    /// The CA of `--ca-secret-id`.
    pub ca: Option<crate::keyset::HostKey>,
}

impl Prepared {
    /// The rotation over what was set up.
    pub fn rotation<'a>(
        &'a self,
        args: &'a RotateArgs,
        say: &'a (dyn Fn(&str) + Sync),
    ) -> Rotation<'a, SecretsManagerStore, SsmDispatcher, Paced<SshProber>> {
        Rotation {
            store: &self.store,
            dispatcher: &self.dispatcher,
            prober: Arc::new(Paced::new(SshProber, Arc::new(Ledger::for_this_user()))),
            secret: &args.secret_id,
            instances: &self.instances,
            push: &self.push,
            port: args.port,
            progress: &|_, _| {},
            say,
            ca: self.ca.as_ref(),
            gate: crate::rotation::Gate {
                min_overlap: args.min_overlap,
                trust_timers: args.trust_timers,
                now: crate::rotation::gate::unix_now(),
            },
        }
    }
}

/// Sets up what a rotation reaches. `discover_pull`: look the nodes of a
/// pull fleet up too (the CLI audits them; the schedule's steps do not).
pub async fn prepare(args: &RotateArgs, global: &GlobalArgs, discover_pull: bool) -> Result<Prepared, Failure> {
    if let Some(ca_id) = &args.ca_secret_id {
        args.placement
            .key_set_prefix
            .check_ca(ca_id)
            .map_err(|e| Failure::usage(anyhow::anyhow!("{e}; nothing was read or rotated")))?;
    }
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws_config)?;
    // A pull rotation sends nothing, so it settles no document.
    let dispatcher = SsmDispatcher::new(&config);
    let document = if args.pull {
        None
    } else {
        Some(
            crate::ssm_document::settle(
                &dispatcher,
                &args.rollout.document,
                crate::ssm_document::Kind::Install,
                &args.rollout.node_command,
            )
            .await
            .map_err(resolve_failure)?,
        )
    };
    let push = push_options(&args.rollout, &config, document)?;
    let store = SecretsManagerStore::new(&config);
    let fleet = AwsFleet::new(&config).with_port(args.port);
    let instances = if args.pull && !discover_pull {
        Vec::new()
    } else if args.pull {
        // Audited by handshake only: any node with an address will do,
        // HyperPod nodes included.
        fleet
            .targets(&args.targets)
            .await
            .map_err(discovery_failure)?
            .into_iter()
            .map(|t| Instance {
                instance_id: t.instance_id.unwrap_or_else(|| t.name.clone()),
                private_ip: t.address,
                name: Some(t.name),
            })
            .collect()
    } else {
        fleet.discover(&args.targets).await.map_err(discovery_failure)?
    };
    let ca = rotation_ca(args, &store).await?;
    Ok(Prepared {
        store,
        dispatcher,
        push,
        instances,
        ca,
    })
}

/// Runs `rotate`.
pub async fn run(args: &RotateArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let prepared = prepare(args, global, true).await?;
    let quiet = global.quiet;
    let say = move |message: &str| {
        if !quiet {
            eprintln!("rotate: {message}");
        }
    };
    let rotation = prepared.rotation(args, &say);
    let request = Request {
        resume: args.resume,
        abort: args.abort,
        overlap: args.overlap,
        finish: args.finish,
        rollback: args.rollback,
        stop_after: args.stop_after,
        pull: args.pull.then(|| std::time::Duration::from_secs(args.wait)),
    };
    let mut report = Report::new(args.secret_id.clone());
    let outcome = rotation.run(request, &mut report).await.map_err(rotation_failure)?;
    report.result = Some(outcome);
    report.clients = crate::known_hosts::clients::advice(outcome, &args.secret_id);
    match rotation.revocation(outcome).await {
        Ok(advice) => report.revocation = advice,
        Err(e) => report.steps.push(format!(
            "revocation: the retired keys could not be listed ({e}); `hostkeyctl known-hosts --revoked` lists them"
        )),
    }
    print_report(&report, output)?;
    Ok(exit_status(outcome))
}

fn print_report(report: &Report, output: OutputFormat) -> Result<(), Failure> {
    if output == OutputFormat::Json {
        return output::print_json(report).map_err(Failure::usage);
    }
    if let Some(push) = &report.push {
        print_outcome(push, &report.secret, output)?;
    }
    for (node, findings) in &report.audit {
        for f in findings.iter().filter(|f| f.status != Verdict::Ok) {
            println!(
                "{}: {} {:?} (expected {}, served {})",
                crate::escape::escape(node),
                f.key_type,
                f.status,
                f.expected.as_ref().map_or("-", Fingerprint::as_str),
                f.served
                    .as_ref()
                    .map(Fingerprint::as_str)
                    .or(f.detail.as_deref())
                    .unwrap_or("-")
            );
        }
    }
    let result = report
        .result
        .and_then(|r| serde_json::to_value(r).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    println!("rotation of {}: {result}", report.secret);
    println!("  AWSCURRENT  {}", report.current_version);
    if let Some(p) = &report.pending_version {
        println!("  AWSPENDING  {p}");
    }
    if let Some(p) = &report.previous_version {
        println!("  AWSPREVIOUS {p}");
    }
    if let Some(clients) = &report.clients {
        println!("clients: {clients} (docs/clients.md)");
    }
    if let Some(advice) = &report.revocation {
        println!(
            "revoke: {} retired key(s) keep valid certificates until {}; clients that trust the CA accept them until then. Distribute `hostkeyctl known-hosts --secret-id {secret} --host PATTERN --revoked` (@revoked lines for known_hosts) or `hostkeyctl known-hosts --secret-id {secret} --krl FILE` (for RevokedHostKeys) to those clients now",
            advice.retired.len(),
            advice.until,
            secret = report.secret
        );
        for r in &advice.retired {
            println!("  {} {} (version {})", r.algorithm, r.fingerprint, r.version_id);
        }
    }
    Ok(())
}
