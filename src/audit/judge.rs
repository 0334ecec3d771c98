//! Judging what was served against the expected set: a verdict per node
//! and key type, and per key type through the load balancer.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::certificate::{CertFinding, CertPolicy, CertVerdict};
use crate::fingerprint::Fingerprint;
use crate::scan::{Endpoint, Probe, ServedProbe, Usage};
use crate::scan::{ScanAlgorithm, ScanError};

/// What the fleet must serve.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Expected {
    /// Fingerprint per key type.
    pub by_type: BTreeMap<ScanAlgorithm, Fingerprint>,
    /// Fingerprints whose type is unknown (`--expect`): matched by value.
    pub untyped: Vec<Fingerprint>,
}

impl Expected {
    /// The expected fingerprint for a type, resolving untyped fingerprints
    /// by what was served.
    fn for_type(&self, algorithm: ScanAlgorithm, served: Option<&Fingerprint>) -> Option<Fingerprint> {
        if let Some(fp) = self.by_type.get(&algorithm) {
            return Some(fp.clone());
        }
        served.filter(|s| self.untyped.contains(s)).cloned()
    }

    /// Whether no fingerprint is expected at all.
    pub fn is_empty(&self) -> bool {
        self.by_type.is_empty() && self.untyped.is_empty()
    }
}

/// A finding's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Serves the expected key.
    Ok,
    /// Serves another key of an expected type.
    Mismatch,
    /// Serves a type outside the set.
    Unmanaged,
    /// Does not serve an expected type.
    Missing,
    /// Could not be asked.
    Unreachable,
    /// Refused by the server's PerSourcePenalties (OpenSSH 9.8 and later):
    /// not known, like unreachable, and the detail names the remedies.
    Penalized,
}

impl Verdict {
    /// Whether this is drift (exit 1).
    pub fn is_drift(self) -> bool {
        matches!(self, Verdict::Mismatch | Verdict::Unmanaged | Verdict::Missing)
    }
}

/// One node and key type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Key type.
    pub key_type: String,
    /// Verdict.
    pub status: Verdict,
    /// Expected fingerprint.
    pub expected: Option<Fingerprint>,
    /// Served fingerprint.
    pub served: Option<Fingerprint>,
    /// Why unreachable: refused, timeout, dropped before the key, ...
    pub detail: Option<String>,
    /// With `--ca-fingerprint`: the certificate verdict.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertFinding>,
}

/// One node's findings.
#[derive(Clone, Debug, Serialize)]
pub struct NodeReport {
    /// The endpoint.
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// Findings, by key type.
    pub findings: Vec<Finding>,
    /// Where the node was found and its health there (lb:, tg:, hyperpod:
    /// targets); a node that is not healthy is audited all the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::discovery::Health>,
    /// The connections the audit opened to it (from OpenSSH 9.8, each one
    /// counts against this host in the node's PerSourcePenalties).
    #[serde(flatten)]
    pub usage: Usage,
    /// What OpenSSH clients print about it ([`crate::scan::warnings`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub client_messages: Vec<crate::scan::warnings::ClientMessage>,
}

/// The finding for a node that has no address to connect to.
pub fn no_address() -> Vec<Finding> {
    vec![Finding {
        key_type: "*".to_owned(),
        status: Verdict::Unreachable,
        expected: None,
        served: None,
        detail: Some("no private address (a stopped or terminated instance?)".to_owned()),
        certificate: None,
    }]
}

/// The verdict for a probe that got no key: penalized, or unreachable.
fn unanswered(e: &ScanError) -> Verdict {
    match e {
        ScanError::Penalized(_) => Verdict::Penalized,
        _ => Verdict::Unreachable,
    }
}

/// Judges one node from its probes (one per key type asked).
pub fn judge_node(expected: &Expected, probes: &BTreeMap<ScanAlgorithm, Probe>) -> Vec<Finding> {
    let all_failed = probes
        .values()
        .all(|p| matches!(p, Err(e) if !matches!(e, ScanError::NotOffered(_))));
    if all_failed && let Some(Err(e)) = probes.values().next() {
        return vec![Finding {
            key_type: "*".to_owned(),
            status: unanswered(e),
            expected: None,
            served: None,
            detail: Some(e.to_string()),
            certificate: None,
        }];
    }
    let mut out = Vec::new();
    for (algorithm, probe) in probes {
        let served = probe.as_ref().ok().cloned();
        let want = expected.for_type(*algorithm, served.as_ref());
        let typed = expected.by_type.contains_key(algorithm);
        let (status, detail) = match (probe, &want) {
            (Ok(s), Some(w)) if s == w => (Verdict::Ok, None),
            (Ok(_), Some(_)) => (Verdict::Mismatch, None),
            // Only untyped expectations (--expect): any type may hold one of
            // them, so a served key that is none of them is a mismatch.
            (Ok(_), None) if expected.by_type.is_empty() && !expected.untyped.is_empty() => (Verdict::Mismatch, None),
            (Ok(_), None) => (Verdict::Unmanaged, None),
            (Err(ScanError::NotOffered(_)), _) if typed => (Verdict::Missing, None),
            (Err(ScanError::NotOffered(_)), _) => continue,
            (Err(e), _) => (unanswered(e), Some(e.to_string())),
        };
        out.push(Finding {
            key_type: algorithm.key_type().to_owned(),
            status,
            expected: want.or_else(|| expected.by_type.get(algorithm).cloned()),
            served,
            detail,
            certificate: None,
        });
    }
    // Untyped fingerprints nobody served: the node lacks that key.
    for fp in &expected.untyped {
        if !out.iter().any(|f| f.served.as_ref() == Some(fp)) {
            out.push(Finding {
                key_type: "?".to_owned(),
                status: Verdict::Missing,
                expected: Some(fp.clone()),
                served: None,
                detail: Some("no key type served this fingerprint".to_owned()),
                certificate: None,
            });
        }
    }
    out
}

/// A key seen through the load balancer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Seen {
    /// Fingerprint.
    pub fingerprint: Fingerprint,
    /// How many samples showed it.
    pub count: usize,
    /// Whether it is the expected one.
    pub expected: bool,
}

/// One key type through the load balancer.
#[derive(Clone, Debug, Serialize)]
pub struct LbType {
    /// Key type.
    pub key_type: String,
    /// Verdict: OK (one key, the expected one), MISMATCH, UNMANAGED,
    /// MISSING or UNREACHABLE (no sample answered).
    pub status: Verdict,
    /// Distinct keys with counts.
    pub seen: Vec<Seen>,
    /// Samples that did not answer, with reasons.
    pub failed: BTreeMap<String, usize>,
    /// With `--ca-fingerprint`: the worst certificate verdict among the
    /// samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate_status: Option<CertVerdict>,
    /// With `--ca-fingerprint`: samples per certificate verdict.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub certificates: BTreeMap<CertVerdict, usize>,
}

/// The load balancer's findings.
#[derive(Clone, Debug, Serialize)]
pub struct LbReport {
    /// The LB endpoint.
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// Samples per key type.
    pub samples: usize,
    /// Backends behind it, when known.
    pub backends: Option<usize>,
    /// Whether `backends` is an assumption (the number of nodes audited)
    /// rather than given or read from the load balancer.
    pub backends_assumed: bool,
    /// With K backends, the chance that one given backend was never hit by
    /// any sample of a type (connections spread uniformly): (1 - 1/K)^N.
    pub miss_probability: Option<f64>,
    /// Per key type.
    pub types: Vec<LbType>,
    /// The most distinct keys the samples of one type saw: 1 through a
    /// balancer that pins this host to one backend (source affinity, NLB
    /// flow hashing), whatever the others serve.
    pub distinct: usize,
    /// Whether no backend was audited directly: the samples alone cannot
    /// show every backend, so such an audit is at best incomplete.
    pub alone: bool,
    /// The connections the samples opened.
    #[serde(flatten)]
    pub usage: Usage,
    /// What OpenSSH clients print about the backends the samples reached,
    /// and about the balancer's addresses (CheckHostIP).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub client_messages: Vec<crate::scan::warnings::ClientMessage>,
    /// Each address the balancer's name resolves to, asked once, when it
    /// resolves to more than one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<AddressFinding>,
}

/// One of the balancer's addresses, asked once.
#[derive(Clone, Debug, Serialize)]
pub struct AddressFinding {
    /// The address.
    pub address: String,
    /// The key type asked for.
    pub key_type: String,
    /// OK, MISMATCH (another key than the set's), MISSING (none of that
    /// type), or UNREACHABLE.
    pub status: Verdict,
    /// What it served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served: Option<Fingerprint>,
    /// Why no key, when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Judges the LB samples of one key type.
pub fn judge_lb(expected: &Expected, algorithm: ScanAlgorithm, probes: &[Probe]) -> LbType {
    let mut counts: BTreeMap<Fingerprint, usize> = BTreeMap::new();
    let mut failed: BTreeMap<String, usize> = BTreeMap::new();
    let mut not_offered = 0;
    for p in probes {
        match p {
            Ok(fp) => *counts.entry(fp.clone()).or_default() += 1,
            Err(ScanError::NotOffered(_)) => not_offered += 1,
            Err(e) => *failed.entry(e.to_string()).or_default() += 1,
        }
    }
    let typed = expected.by_type.get(&algorithm);
    let seen: Vec<Seen> = counts
        .into_iter()
        .map(|(fingerprint, count)| Seen {
            expected: typed == Some(&fingerprint) || expected.untyped.contains(&fingerprint),
            fingerprint,
            count,
        })
        .collect();
    let status = if seen.is_empty() && not_offered == 0 {
        if probes.iter().any(|p| matches!(p, Err(ScanError::Penalized(_)))) {
            Verdict::Penalized
        } else {
            Verdict::Unreachable
        }
    } else if seen.iter().any(|s| !s.expected) {
        if typed.is_some() || (expected.by_type.is_empty() && !expected.untyped.is_empty()) {
            Verdict::Mismatch
        } else {
            Verdict::Unmanaged
        }
    } else if typed.is_some() && (not_offered > 0 || seen.is_empty()) {
        Verdict::Missing
    } else if probes.iter().any(|p| matches!(p, Err(ScanError::Penalized(_)))) {
        // A backend refused the samples' source: it may serve another key.
        Verdict::Penalized
    } else if !failed.is_empty() {
        // A sample that got no answer may have hit the one backend that
        // serves another key: the verdict is at best incomplete.
        Verdict::Unreachable
    } else {
        Verdict::Ok
    };
    LbType {
        key_type: algorithm.key_type().to_owned(),
        status,
        seen,
        failed,
        certificate_status: None,
        certificates: BTreeMap::new(),
    }
}

/// Adds the certificate verdict to each finding of a managed type that
/// answered. The served probes are the ones the findings were judged from.
pub fn judge_certificates(
    findings: &mut [Finding],
    served: &BTreeMap<ScanAlgorithm, ServedProbe>,
    expected: &Expected,
    policy: &CertPolicy,
    now: u64,
) {
    for f in findings.iter_mut() {
        let Some((algorithm, Ok(s))) = served.iter().find(|(a, _)| a.key_type() == f.key_type) else {
            continue;
        };
        if expected.by_type.contains_key(algorithm) || f.status == Verdict::Ok {
            f.certificate = Some(crate::certificate::judge(s.certificate(), policy, now));
        }
    }
}

/// With certificates asked for, the findings of the certified keys
/// (`findings`) and of the plain keys a client that trusts keys sees
/// (`plain`, a second scan): sshd serves its certificate for the cert
/// algorithm and a plain key for the plain one, and they need not be the
/// same key. A type is OK only when both are; a plain key that is not the
/// set's is the finding, whatever the certificate says.
pub fn with_plain_keys(findings: &mut Vec<Finding>, plain: Vec<Finding>) {
    for p in plain {
        match findings.iter_mut().find(|f| f.key_type == p.key_type) {
            Some(f) if f.status == Verdict::Ok && p.status != Verdict::Ok => {
                f.status = p.status;
                f.served = p.served;
                f.detail = Some(match p.detail {
                    Some(d) => format!("plain key: {d}"),
                    None => "the plain key is not the one the certificate certifies".to_owned(),
                });
            }
            Some(_) => {}
            None if p.status != Verdict::Ok => findings.push(p),
            None => {}
        }
    }
}

/// The worst certificate verdict among LB samples that answered, with how
/// many samples gave each.
pub fn judge_lb_certificates(
    samples: &[ServedProbe],
    policy: &CertPolicy,
    now: u64,
) -> Option<(CertVerdict, BTreeMap<CertVerdict, usize>)> {
    let mut counts: BTreeMap<CertVerdict, usize> = BTreeMap::new();
    for s in samples.iter().flatten() {
        *counts
            .entry(crate::certificate::judge(s.certificate(), policy, now).status)
            .or_default() += 1;
    }
    let worst = counts.keys().copied().max()?;
    Some((worst, counts))
}

/// (1 - 1/K)^N: the chance that N uniformly spread samples all miss one
/// given backend out of K.
pub fn miss_probability(backends: usize, samples: usize) -> Option<f64> {
    if backends == 0 {
        return None;
    }
    let k = backends as f64;
    Some((1.0 - 1.0 / k).powi(i32::try_from(samples).unwrap_or(i32::MAX)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{Expected, Verdict, judge_lb, judge_node, miss_probability};
    use crate::fingerprint::Fingerprint;
    use crate::scan::{ScanAlgorithm, ScanError};

    fn fp(c: char) -> Fingerprint {
        Fingerprint::from_digest(&[c as u8; 32])
    }

    fn expected() -> Expected {
        Expected {
            by_type: [(ScanAlgorithm::Ed25519, fp('A')), (ScanAlgorithm::Rsa, fp('R'))].into(),
            untyped: vec![],
        }
    }

    fn not_offered(a: ScanAlgorithm) -> Result<Fingerprint, ScanError> {
        Err(ScanError::NotOffered(a.key_type().into()))
    }

    #[test]
    fn node_findings_cover_every_verdict() {
        let probes: BTreeMap<_, _> = [
            (ScanAlgorithm::Ed25519, Ok(fp('A'))),
            (ScanAlgorithm::EcdsaP256, Ok(fp('E'))),
            (ScanAlgorithm::EcdsaP384, not_offered(ScanAlgorithm::EcdsaP384)),
            (ScanAlgorithm::Rsa, not_offered(ScanAlgorithm::Rsa)),
        ]
        .into();
        let f = judge_node(&expected(), &probes);
        let verdicts: Vec<(String, Verdict)> = f.iter().map(|f| (f.key_type.clone(), f.status)).collect();
        assert_eq!(
            verdicts,
            vec![
                ("ssh-ed25519".into(), Verdict::Ok),
                ("ecdsa-sha2-nistp256".into(), Verdict::Unmanaged),
                ("ssh-rsa".into(), Verdict::Missing),
            ]
        );
        let wrong: BTreeMap<_, _> = [(ScanAlgorithm::Ed25519, Ok(fp('B')))].into();
        assert_eq!(judge_node(&expected(), &wrong)[0].status, Verdict::Mismatch);
        let down: BTreeMap<_, _> = [
            (ScanAlgorithm::Ed25519, Err(ScanError::Refused)),
            (ScanAlgorithm::Rsa, Err(ScanError::Refused)),
        ]
        .into();
        let f = judge_node(&expected(), &down);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Verdict::Unreachable);
        assert_eq!(f[0].detail.as_deref(), Some("connection refused"));
    }

    #[test]
    fn untyped_expectations_match_by_value() {
        let e = Expected {
            by_type: BTreeMap::new(),
            untyped: vec![fp('A'), fp('R')],
        };
        let probes: BTreeMap<_, _> = [(ScanAlgorithm::Ed25519, Ok(fp('A'))), (ScanAlgorithm::Rsa, Ok(fp('X')))].into();
        let f = judge_node(&e, &probes);
        assert_eq!(f[0].status, Verdict::Ok);
        assert_eq!(f[1].status, Verdict::Mismatch);
        assert_eq!(f[2].status, Verdict::Missing, "R was served nowhere: {f:?}");
    }

    #[test]
    fn lb_counts_distinct_keys() {
        let probes = vec![Ok(fp('A')), Ok(fp('B')), Ok(fp('A')), Err(ScanError::Timeout(5))];
        let t = judge_lb(&expected(), ScanAlgorithm::Ed25519, &probes);
        assert_eq!(t.status, Verdict::Mismatch);
        assert_eq!(t.seen.len(), 2);
        assert_eq!(t.seen[0].count, 2);
        assert!(t.seen[0].expected);
        assert_eq!(t.failed.values().sum::<usize>(), 1);
        let ok = judge_lb(&expected(), ScanAlgorithm::Ed25519, &[Ok(fp('A'))]);
        assert_eq!(ok.status, Verdict::Ok);
        // Regression (hardening finding 8): a sample with no answer was
        // ignored whenever another answered; it may have been the bad backend.
        let partly = judge_lb(
            &expected(),
            ScanAlgorithm::Ed25519,
            &[Ok(fp('A')), Err(ScanError::Timeout(5000))],
        );
        assert_eq!(partly.status, Verdict::Unreachable);
        let gone = judge_lb(
            &expected(),
            ScanAlgorithm::EcdsaP384,
            &[not_offered(ScanAlgorithm::EcdsaP384)],
        );
        assert_eq!(
            gone.status,
            Verdict::Ok,
            "an unexpected type that is not served is fine"
        );
    }

    #[test]
    fn miss_probability_follows_the_formula() {
        let p = miss_probability(3, 20).unwrap();
        assert!((p - (2.0f64 / 3.0).powi(20)).abs() < 1e-12);
        assert_eq!(miss_probability(0, 5), None);
        assert_eq!(miss_probability(1, 5), Some(0.0));
    }
}
