//! `hostkeyctl rotate`: the Secrets Manager rotation protocol for host keys.
//!
//! create (new set staged AWSPENDING) → set (push it to every target) →
//! test (audit every target against it) → finish (AWSCURRENT moves to it;
//! AWSPREVIOUS keeps the old set). The secret's stages are the only state,
//! so a crash anywhere is resumed with `--resume`, and AWSCURRENT never
//! moves before every target passed the audit.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::audit::{self, Endpoint, Expected, Finding, ScanPolicy, Scanner, Verdict};
use crate::aws;
use crate::cli::{GlobalArgs, RotateArgs, RotateStep};
use crate::commands::push::{PushOptions, PushOutcome, print_outcome, push_version};
use crate::commands::{discovery_failure, store_failure};
use crate::discovery::{self, Instance};
use crate::document::SecretDocument;
use crate::exit::{Failure, Status};
use crate::fingerprint::Fingerprint;
use crate::ids::{SecretId, VersionId};
use crate::keyset::{DEFAULT_RSA_BITS, KeySet};
use crate::output::{self, OutputFormat};
use crate::scan::ScanAlgorithm;
use crate::store::{
    STAGE_CURRENT, STAGE_PENDING, SecretInfo, SecretStore, SecretsManagerStore, StoredVersion, VersionSelector, stage,
    tag_fingerprints,
};

#[derive(Serialize)]
struct RotateReport {
    secret: SecretId,
    /// `rotated`, `aborted`, `stopped_after_<step>`, `push_failed`,
    /// `audit_failed`, `nothing_to_abort`.
    result: String,
    current_version: VersionId,
    pending_version: Option<VersionId>,
    previous_version: Option<VersionId>,
    steps: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    push: Option<PushOutcome>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    audit: Vec<(String, Vec<Finding>)>,
}

fn say(global: &GlobalArgs, message: &str) {
    if !global.quiet {
        eprintln!("rotate: {message}");
    }
}

fn age(created: Option<&str>) -> String {
    let Some(created) = created else {
        return "unknown age".to_owned();
    };
    match time::OffsetDateTime::parse(created, &time::format_description::well_known::Rfc3339) {
        Ok(t) => {
            let secs = (time::OffsetDateTime::now_utc() - t).whole_seconds().max(0);
            match secs {
                s if s < 120 => format!("{s} s old"),
                s if s < 7200 => format!("{} min old", s / 60),
                s => format!("{} h old", s / 3600),
            }
        }
        Err(_) => format!("created {created}"),
    }
}

/// Audits `instances` against `keys`: every managed type must be served
/// with the new key, and nothing else.
async fn audit_targets(instances: &[Instance], keys: &KeySet, port: u16) -> Vec<(String, Vec<Finding>)> {
    let expected = Expected {
        by_type: keys
            .keys()
            .map(|k| (ScanAlgorithm::for_managed(k.algorithm()), k.fingerprint().clone()))
            .collect(),
        untyped: vec![],
    };
    let endpoints: Vec<Endpoint> = instances
        .iter()
        .map(|i| Endpoint {
            name: i.name.clone().unwrap_or_else(|| i.instance_id.clone()),
            host: i.private_ip.clone().unwrap_or_default(),
            port,
        })
        .collect();
    let scanner = Arc::new(Scanner::new(
        crate::scan::SshProber,
        ScanPolicy {
            concurrency: 32,
            per_host: 4,
            timeout: Duration::from_secs(5),
            attempts: 4,
            algorithms: ScanAlgorithm::ALL.to_vec(),
        },
    ));
    let probes = scanner.scan_nodes(&endpoints).await;
    endpoints
        .into_iter()
        .zip(probes)
        .map(|(e, p)| (e.name, audit::judge_node(&expected, &p)))
        .collect()
}

/// Pushes `version` (with `next` as extra keys during an overlap), shows
/// the per-node table, keeps the outcome in the report; true if all nodes
/// are done.
async fn push_step(
    config: &aws_config::SdkConfig,
    version: &StoredVersion,
    next: Option<&StoredVersion>,
    instances: &[Instance],
    options: &PushOptions,
    output: OutputFormat,
    report: &mut RotateReport,
) -> Result<bool, Failure> {
    let outcome = push_version(config, version, next, instances, options).await?;
    let ok = outcome.all_ok();
    if output != OutputFormat::Json {
        print_outcome(&outcome, version, output)?;
    }
    report.push = Some(outcome);
    Ok(ok)
}

/// Audits the targets against `keys`; `None` when every node passed, else
/// the exit status (drift 1, unreachable 3), with the findings kept.
async fn audit_step(instances: &[Instance], keys: &KeySet, port: u16, report: &mut RotateReport) -> Option<Status> {
    let findings = audit_targets(instances, keys, port).await;
    let verdicts: Vec<Verdict> = findings.iter().flat_map(|(_, f)| f.iter().map(|f| f.status)).collect();
    if verdicts.iter().all(|v| *v == Verdict::Ok) {
        return None;
    }
    report.audit = findings;
    report.result = "audit_failed".to_owned();
    Some(if verdicts.iter().any(|v| v.is_drift()) {
        Status::Drift
    } else {
        Status::Incomplete
    })
}

fn finish_report(report: &RotateReport, output: OutputFormat) -> Result<(), Failure> {
    match output {
        OutputFormat::Json => output::print_json(report).map_err(Failure::usage),
        _ => {
            for (node, findings) in &report.audit {
                for f in findings.iter().filter(|f| f.status != Verdict::Ok) {
                    println!(
                        "{node}: {} {:?} (expected {}, served {})",
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
            println!("rotation of {}: {}", report.secret, report.result);
            println!("  AWSCURRENT  {}", report.current_version);
            if let Some(p) = &report.pending_version {
                println!("  AWSPENDING  {p}");
            }
            if let Some(p) = &report.previous_version {
                println!("  AWSPREVIOUS {p}");
            }
            Ok(())
        }
    }
}

/// How a rotation run starts, decided from the stages alone.
#[derive(Debug, PartialEq, Eq)]
enum Start {
    /// No rotation in flight: create a new pending version.
    Create,
    /// Continue with this pending version.
    Continue(VersionId),
    /// Refuse, saying why and what to do.
    Refuse(String),
}

/// `pending` is the AWSPENDING version (id, creation time) when it is not
/// the current one; `resume` is --resume or --finish.
fn plan_start(current: &VersionId, pending: Option<&(VersionId, Option<String>)>, resume: bool) -> Start {
    match (pending, resume) {
        (Some((id, created)), false) => Start::Refuse(format!(
            "a rotation is already in flight: version {id} is AWSPENDING ({}); continue it with --resume or drop it with --abort",
            age(created.as_deref())
        )),
        (Some((id, _)), true) => Start::Continue(id.clone()),
        (None, true) => Start::Refuse(format!(
            "no rotation in flight to resume (no AWSPENDING version besides AWSCURRENT {current})"
        )),
        (None, false) => Start::Create,
    }
}

fn pending_of(info: &SecretInfo, current: &VersionId) -> Option<(VersionId, Option<String>)> {
    info.version_with_stage(STAGE_PENDING)
        .filter(|v| &v.version_id != current)
        .map(|v| (v.version_id.clone(), v.created.clone()))
}

/// Runs `rotate`.
pub async fn run(args: &RotateArgs, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let push_options = PushOptions::from_args(&args.rollout, global.quiet)?;
    let config = aws::load_config(&global.aws).await.map_err(Failure::aws)?;
    let store = SecretsManagerStore::new(&config);
    let secret = &args.secret_id;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let instances = discovery::discover(&ec2, &args.targets)
        .await
        .map_err(discovery_failure)?;

    let mut info = store.describe(secret).await.map_err(store_failure)?;
    let current = info
        .version_with_stage(STAGE_CURRENT)
        .map(|v| v.version_id.clone())
        .ok_or_else(|| {
            Failure::usage(anyhow::anyhow!(
                "secret {secret} has no AWSCURRENT version; create it with `hostkeyctl init`"
            ))
        })?;
    let current_set = store
        .get(secret, &VersionSelector::VersionId(current.clone()))
        .await
        .map_err(store_failure)?;
    let mut steps = Vec::new();

    // A rotation killed between promoting and cleaning up leaves AWSPENDING
    // on the current version, or stale fingerprint tags: finish that first.
    if info
        .version_with_stage(STAGE_PENDING)
        .is_some_and(|v| v.version_id == current)
    {
        store
            .move_stage(secret, &stage(STAGE_PENDING), None, Some(&current))
            .await
            .map_err(store_failure)?;
        steps.push("cleaned up AWSPENDING left on the current version".to_owned());
    }
    let tagged = info.tagged_fingerprints().ok().flatten().map(|(v, _)| v);
    if tagged.as_ref() != Some(&current) {
        // Missing, stale or tampered tags are rewritten from the value.
        tag_fingerprints(&store, secret, &current, &current_set.document.keys)
            .await
            .map_err(store_failure)?;
        steps.push("refreshed the fingerprint tags to the current version".to_owned());
        info = store.describe(secret).await.map_err(store_failure)?;
    }
    let pending = pending_of(&info, &current);
    let previous = info
        .version_with_stage(crate::store::STAGE_PREVIOUS)
        .map(|v| v.version_id.clone());
    let mut report = RotateReport {
        secret: current_set.arn.clone(),
        result: String::new(),
        current_version: current.clone(),
        pending_version: pending.as_ref().map(|p| p.0.clone()),
        previous_version: previous,
        steps,
        push: None,
        audit: Vec::new(),
    };

    if args.abort {
        let Some((pending_id, _)) = pending else {
            report.result = "nothing_to_abort".to_owned();
            say(global, "no rotation in flight; nothing to abort");
            finish_report(&report, output)?;
            return Ok(Status::Success);
        };
        say(
            global,
            &format!(
                "aborting: pushing AWSCURRENT {current} back to {} node(s)",
                instances.len()
            ),
        );
        let ok = push_step(
            &config,
            &current_set,
            None,
            &instances,
            &push_options,
            output,
            &mut report,
        )
        .await?;
        if !ok {
            report.result = "abort_push_failed".to_owned();
            report.steps.push(
                "pushing AWSCURRENT back failed on some nodes; AWSPENDING kept so --abort can be retried".to_owned(),
            );
            finish_report(&report, output)?;
            return Ok(Status::Incomplete);
        }
        store
            .move_stage(secret, &stage(STAGE_PENDING), None, Some(&pending_id))
            .await
            .map_err(store_failure)?;
        report.steps.push(format!(
            "every node serves {current} again; AWSPENDING removed from {pending_id}"
        ));
        report.pending_version = None;
        report.result = "aborted".to_owned();
        finish_report(&report, output)?;
        return Ok(Status::Success);
    }

    // create
    let pending_id = match plan_start(&current, pending.as_ref(), args.resume || args.finish) {
        Start::Refuse(message) => return Err(Failure::usage(anyhow::anyhow!(message))),
        Start::Continue(id) => {
            say(global, &format!("resuming the rotation to version {id}"));
            id
        }
        Start::Create => {
            let old = &current_set.document.keys;
            let rsa_bits = old
                .get(crate::keyset::KeyAlgorithm::Rsa)
                .and_then(|k| k.rsa_bits())
                .unwrap_or(DEFAULT_RSA_BITS);
            let keys = KeySet::generate(&old.algorithms(), rsa_bits)
                .map_err(|e| Failure::usage(anyhow::Error::new(e).context("generating the new key set")))?;
            let id = store
                .put_version(
                    secret,
                    &SecretDocument::new(keys),
                    &VersionId::random(),
                    &[stage(STAGE_PENDING)],
                )
                .await
                .map_err(store_failure)?;
            say(
                global,
                &format!("create: new key set stored as version {id} (AWSPENDING)"),
            );
            id
        }
    };
    report.pending_version = Some(pending_id.clone());
    report.steps.push(format!("create: version {pending_id} is AWSPENDING"));
    if args.stop_after == Some(RotateStep::Create) {
        report.result = "stopped_after_create".to_owned();
        finish_report(&report, output)?;
        return Ok(Status::Success);
    }

    // set
    let pending_set: StoredVersion = store
        .get(secret, &VersionSelector::VersionId(pending_id.clone()))
        .await
        .map_err(store_failure)?;
    if args.overlap {
        return overlap_phase_one(
            &config,
            args,
            global,
            output,
            &push_options,
            &instances,
            &current_set,
            &pending_set,
            report,
        )
        .await;
    }
    say(
        global,
        &format!("set: installing version {pending_id} on {} node(s)", instances.len()),
    );
    let pushed = push_step(
        &config,
        &pending_set,
        None,
        &instances,
        &push_options,
        output,
        &mut report,
    )
    .await?;
    if !pushed {
        report.result = "push_failed".to_owned();
        report.steps.push(format!(
            "set: some nodes failed; AWSCURRENT stays {current}. Fix them and run --resume, or --abort"
        ));
        finish_report(&report, output)?;
        return Ok(Status::Incomplete);
    }
    report.steps.push("set: every node installed the new set".to_owned());
    if args.stop_after == Some(RotateStep::Set) {
        report.result = "stopped_after_set".to_owned();
        finish_report(&report, output)?;
        return Ok(Status::Success);
    }

    // test
    say(global, "test: auditing every node against the new set");
    if let Some(status) = audit_step(&instances, &pending_set.document.keys, args.port, &mut report).await {
        report.steps.push(format!(
            "test: not every node serves the new set; AWSCURRENT stays {current}"
        ));
        finish_report(&report, output)?;
        return Ok(status);
    }
    report
        .steps
        .push("test: every node serves the new set and nothing else".to_owned());
    if args.stop_after == Some(RotateStep::Test) {
        report.result = "stopped_after_test".to_owned();
        finish_report(&report, output)?;
        return Ok(Status::Success);
    }

    // finish
    store
        .move_stage(secret, &stage(STAGE_CURRENT), Some(&pending_id), Some(&current))
        .await
        .map_err(store_failure)?;
    store
        .move_stage(secret, &stage(STAGE_PENDING), None, Some(&pending_id))
        .await
        .map_err(store_failure)?;
    tag_fingerprints(&store, secret, &pending_id, &pending_set.document.keys)
        .await
        .map_err(store_failure)?;
    report
        .steps
        .push(format!("finish: AWSCURRENT is {pending_id}, AWSPREVIOUS is {current}"));
    report.previous_version = Some(current);
    report.current_version = pending_id;
    report.pending_version = None;
    report.result = "rotated".to_owned();
    finish_report(&report, output)?;
    Ok(Status::Success)
}

/// Phase one of an overlapping rotation: every node keeps serving the
/// current set and also offers the pending one; nothing is promoted.
#[allow(clippy::too_many_arguments)]
async fn overlap_phase_one(
    config: &aws_config::SdkConfig,
    args: &RotateArgs,
    global: &GlobalArgs,
    output: OutputFormat,
    push_options: &PushOptions,
    instances: &[Instance],
    current_set: &StoredVersion,
    pending_set: &StoredVersion,
    mut report: RotateReport,
) -> Result<Status, Failure> {
    say(
        global,
        &format!(
            "overlap: {} node(s) keep serving {} and also offer {}",
            instances.len(),
            current_set.version_id,
            pending_set.version_id
        ),
    );
    let pushed = push_step(
        config,
        current_set,
        Some(pending_set),
        instances,
        push_options,
        output,
        &mut report,
    )
    .await?;
    if !pushed {
        report.result = "push_failed".to_owned();
        report
            .steps
            .push("overlap: some nodes failed; fix them and run --overlap --resume, or --abort".to_owned());
        finish_report(&report, output)?;
        return Ok(Status::Incomplete);
    }
    if let Some(status) = audit_step(instances, &current_set.document.keys, args.port, &mut report).await {
        report
            .steps
            .push("overlap: a node no longer serves the current set first".to_owned());
        finish_report(&report, output)?;
        return Ok(status);
    }
    report.steps.push(format!(
        "overlap: every node serves {} and offers {}; clients with UpdateHostKeys learn the new keys when they log in. Run `rotate --finish` when ready",
        current_set.version_id, pending_set.version_id
    ));
    report.result = "overlap_started".to_owned();
    finish_report(&report, output)?;
    Ok(Status::Success)
}

#[cfg(test)]
mod tests {
    use super::{Start, age, plan_start};
    use crate::ids::VersionId;

    #[test]
    fn the_start_follows_the_stages() {
        let c = VersionId::random();
        let p = VersionId::random();
        assert_eq!(plan_start(&c, None, false), Start::Create);
        let pending = (p.clone(), Some("2020-01-01T00:00:00Z".to_owned()));
        assert_eq!(plan_start(&c, Some(&pending), true), Start::Continue(p.clone()));
        let Start::Refuse(busy) = plan_start(&c, Some(&pending), false) else {
            panic!("not refused")
        };
        assert!(
            busy.contains(&format!("version {p} is AWSPENDING")) && busy.contains("h old") && busy.contains("--abort"),
            "{busy}"
        );
        let Start::Refuse(idle) = plan_start(&c, None, true) else {
            panic!("not refused")
        };
        assert!(
            idle.contains("no rotation in flight") && idle.contains(&format!("AWSCURRENT {c}")),
            "{idle}"
        );
    }

    #[test]
    fn ages_read_naturally() {
        assert_eq!(age(None), "unknown age");
        assert_eq!(age(Some("not a time")), "created not a time");
        let now = time::OffsetDateTime::now_utc() - time::Duration::minutes(5);
        let stamp = now.format(&time::format_description::well_known::Rfc3339).unwrap();
        assert_eq!(age(Some(&stamp)), "5 min old");
    }
}
