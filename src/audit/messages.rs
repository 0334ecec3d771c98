//! What clients print about each node and the load balancer
//! ([`crate::scan::warnings`]), from the handshakes the audit made anyway,
//! and the balancer's addresses one by one: a name that resolves to one
//! address per zone is sampled through the first alone, so each other
//! address is asked once (CheckHostIP, and a zone that serves another key).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::judge::{AddressFinding, Expected, Verdict};
use crate::scan::warnings::{self, ClientMessage, ClientVersion};
use crate::scan::{Endpoint, Prober, ScanAlgorithm, Scanner, ServedProbe};

/// The messages for one endpoint: from every banner and KEXINIT it
/// answered with, and the RSA key it served.
pub fn for_endpoint<P: Prober>(
    scanner: &Scanner<P>,
    endpoint: &Endpoint,
    served: Option<&BTreeMap<ScanAlgorithm, ServedProbe>>,
    client: ClientVersion,
) -> Vec<ClientMessage> {
    let mut out: Vec<ClientMessage> = Vec::new();
    for hello in scanner.hellos(endpoint) {
        for m in warnings::from_hello(&hello, client) {
            if !out.iter().any(|o| o.code == m.code) {
                out.push(m);
            }
        }
    }
    let rsa = served
        .and_then(|s| s.get(&ScanAlgorithm::Rsa))
        .and_then(|p| p.as_ref().ok());
    if let Some(bits) = rsa.and_then(|s| rsa_bits(&s.key()))
        && let Some(m) = warnings::from_rsa_bits(bits, client)
    {
        out.push(m);
    }
    out
}

/// The messages for each node audited, by its address and port.
pub fn for_nodes<P: Prober>(
    scanner: &Scanner<P>,
    endpoints: &[Endpoint],
    probes: &[BTreeMap<ScanAlgorithm, ServedProbe>],
    client: ClientVersion,
) -> BTreeMap<(String, u16), Vec<ClientMessage>> {
    endpoints
        .iter()
        .zip(probes)
        .map(|(e, served)| ((e.host.clone(), e.port), for_endpoint(scanner, e, Some(served), client)))
        .collect()
}

/// Marks the messages whose code the site accepts (`--accept-message`).
pub fn accept(nodes: &mut [super::NodeReport], lb: Option<&mut super::LbReport>, accepted: &[warnings::MessageCode]) {
    let all = nodes.iter_mut().flat_map(|n| n.client_messages.iter_mut());
    for m in all.chain(lb.into_iter().flat_map(|lb| lb.client_messages.iter_mut())) {
        m.accepted = accepted.contains(&m.code);
    }
}

/// The size of an RSA key, in bits.
fn rsa_bits(key: &ssh_key::PublicKey) -> Option<usize> {
    key.key_data().rsa().map(|k| k.key_size() as usize)
}

/// The balancer's name resolved to every address (an NLB's DNS name has
/// one per zone; the samples reach only the first): each address is asked
/// once for the first expected type. An address serving another
/// key is drift, and a `CheckHostIP` message for clients that check.
pub async fn lb_addresses<P: Prober>(
    scanner: &Arc<Scanner<P>>,
    lb: &Endpoint,
    expected: &Expected,
    client: ClientVersion,
) -> (Vec<AddressFinding>, Vec<ClientMessage>) {
    let Some((&algorithm, want)) = expected.by_type.iter().next() else {
        return (Vec::new(), Vec::new());
    };
    if lb.host.parse::<IpAddr>().is_ok() {
        return (Vec::new(), Vec::new());
    }
    let mut addresses: Vec<IpAddr> = match tokio::net::lookup_host((lb.host.as_str(), lb.port)).await {
        Ok(found) => found.map(|a| a.ip()).collect(),
        Err(e) => {
            tracing::warn!("cannot resolve {}: {e}", crate::escape::escape(&lb.host));
            return (Vec::new(), Vec::new());
        }
    };
    addresses.sort_unstable();
    addresses.dedup();
    if addresses.len() < 2 {
        return (Vec::new(), Vec::new());
    }
    let endpoints: Vec<Endpoint> = addresses
        .iter()
        .map(|ip| Endpoint {
            name: format!("{}@{ip}", lb.name),
            host: ip.to_string(),
            port: lb.port,
        })
        .collect();
    let answers = scanner.greet_nodes(&endpoints, algorithm).await;
    let mut findings = Vec::new();
    let mut messages = Vec::new();
    for (endpoint, answer) in endpoints.iter().zip(answers) {
        let (status, served, detail) = match answer.served {
            Ok(s) => {
                let fp = crate::keyset::fingerprint_of(&s.key());
                let status = if &fp == want { Verdict::Ok } else { Verdict::Mismatch };
                (status, Some(fp), None)
            }
            Err(e @ crate::scan::ScanError::NotOffered(_)) => (Verdict::Missing, None, Some(e.to_string())),
            Err(e) => (Verdict::Unreachable, None, Some(e.to_string())),
        };
        if status == Verdict::Mismatch {
            messages.push(warnings::check_host_ip(
                algorithm.key_type(),
                &lb.host,
                &endpoint.host,
                client,
            ));
        }
        findings.push(AddressFinding {
            address: endpoint.host.clone(),
            key_type: algorithm.key_type().to_owned(),
            status,
            served,
            detail,
        });
    }
    (findings, messages)
}
