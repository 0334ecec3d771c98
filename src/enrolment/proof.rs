//! An enrolment request, and its proof that the node holds the keys it
//! asks certificates for, now, for this signer.
//!
//! The identity document has no nonce and never changes for an instance:
//! anyone who once read it (any process that reached IMDS) could replay
//! it. So each host key signs (SSHSIG, namespace [`NAMESPACE`]) the
//! request's bytes: the document's digest, the keys, the time and the
//! signer it is meant for. A stolen document then certifies no key the
//! thief does not hold; the time limits a captured request to minutes,
//! and the signer refuses a time not later than the last it accepted for
//! the instance ([`super::Binding`]), so a replay within them is refused too.

use sha2::Digest;
use ssh_key::{HashAlg, LineEnding, PrivateKey, PublicKey, SshSig};

/// The SSHSIG namespace of an enrolment proof.
pub const NAMESPACE: &str = "enrol@hostkeyctl";

/// What a node sends the signer.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct EnrolRequest {
    /// The identity document, exactly as IMDS served it.
    pub document: String,
    /// Its signature (`.../instance-identity/signature`, base64).
    pub signature: String,
    /// The host keys to certify (OpenSSH public lines).
    pub host_keys: Vec<String>,
    /// When the node made the request (Unix milliseconds: a renewal in
    /// the same second is still later than the last).
    pub issued_at_ms: i64,
    /// The signer it is meant for (the function's ARN).
    pub audience: String,
    /// One SSHSIG (PEM) per host key, over [`signed_bytes`].
    pub proofs: Vec<String>,
}

/// At most one key per managed algorithm (ed25519, ecdsa, rsa).
pub const MAX_KEYS: usize = 3;

/// Why a request's proof does not hold.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProofError {
    /// A key or a signature does not parse, or they do not pair up.
    #[error("the enrolment request is malformed: {0}")]
    Malformed(String),
    /// A key's signature is not over this request.
    #[error("host key {0} did not sign this request: the node must hold the keys it enrols")]
    NotSigned(String),
}

/// The bytes each host key signs.
pub fn signed_bytes(document: &str, host_keys: &[String], issued_at_ms: i64, audience: &str) -> Vec<u8> {
    let digest = hex::encode(sha2::Sha256::digest(document.as_bytes()));
    format!(
        "hostkeyctl-enrol-v1\naudience {audience}\nissued {issued_at_ms}\ndocument {digest}\n{}\n",
        host_keys.join("\n")
    )
    .into_bytes()
}

/// The request a node makes with its own host keys.
pub fn request(
    document: &str,
    signature: &str,
    keys: &[PrivateKey],
    issued_at_ms: i64,
    audience: &str,
) -> Result<EnrolRequest, ProofError> {
    let host_keys: Vec<String> = keys
        .iter()
        .map(|k| {
            PublicKey::from(k.public_key().key_data().clone())
                .to_openssh()
                .map_err(|e| ProofError::Malformed(e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    let message = signed_bytes(document, &host_keys, issued_at_ms, audience);
    let proofs = keys
        .iter()
        .map(|k| {
            k.sign(NAMESPACE, HashAlg::Sha512, &message)
                .and_then(|s| s.to_pem(LineEnding::LF))
                .map_err(|e| ProofError::Malformed(e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    Ok(EnrolRequest {
        document: document.to_owned(),
        signature: signature.to_owned(),
        host_keys,
        issued_at_ms,
        audience: audience.to_owned(),
        proofs,
    })
}

/// The host keys of `request`, each shown to have signed it.
pub fn check(request: &EnrolRequest) -> Result<Vec<PublicKey>, ProofError> {
    if request.host_keys.is_empty()
        || request.host_keys.len() > MAX_KEYS
        || request.host_keys.len() != request.proofs.len()
    {
        return Err(ProofError::Malformed(format!(
            "{} host keys and {} proofs (1 to {MAX_KEYS} keys, one proof each)",
            request.host_keys.len(),
            request.proofs.len()
        )));
    }
    let message = signed_bytes(
        &request.document,
        &request.host_keys,
        request.issued_at_ms,
        &request.audience,
    );
    request
        .host_keys
        .iter()
        .zip(&request.proofs)
        .map(|(line, proof)| {
            let key = PublicKey::from_openssh(line).map_err(|e| ProofError::Malformed(format!("a host key: {e}")))?;
            let sig = SshSig::from_pem(proof).map_err(|e| ProofError::Malformed(format!("a proof: {e}")))?;
            key.verify(NAMESPACE, &message, &sig)
                .map_err(|_| ProofError::NotSigned(key.fingerprint(HashAlg::Sha256).to_string()))?;
            Ok(PublicKey::new(key.key_data().clone(), ""))
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|keys| {
            let mut kinds: Vec<String> = keys.iter().map(|k| k.algorithm().as_str().to_owned()).collect();
            kinds.sort();
            kinds.dedup();
            if kinds.len() == keys.len() {
                Ok(keys)
            } else {
                Err(ProofError::Malformed(
                    "two host keys of one type: a node enrols one key per type".to_owned(),
                ))
            }
        })
}

#[cfg(test)]
mod tests {
    use super::{ProofError, check, request};
    use crate::keyset::{KeyAlgorithm, KeySet};

    fn own_keys() -> Vec<ssh_key::PrivateKey> {
        let set = KeySet::generate(&[KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa], 0).unwrap();
        set.keys().map(|k| k.private_key().clone()).collect()
    }

    #[test]
    fn a_request_proves_its_keys_and_any_change_breaks_the_proof() {
        let keys = own_keys();
        let req = request(
            "{\"doc\":1}",
            "sig",
            &keys,
            1_000,
            "arn:aws:lambda:us-east-1:1:function:f",
        )
        .unwrap();
        assert_eq!(check(&req).unwrap().len(), 2);
        // A thief's key beside the node's proofs, another time, another signer.
        let thief = own_keys();
        let mut swapped = req.clone();
        swapped.host_keys[0] = request("{\"doc\":1}", "sig", &thief, 1_000, &req.audience)
            .unwrap()
            .host_keys[0]
            .clone();
        assert!(matches!(check(&swapped), Err(ProofError::NotSigned(_))));
        for change in [
            |r: &mut super::EnrolRequest| r.issued_at_ms += 1,
            |r: &mut super::EnrolRequest| r.audience.push('x'),
            |r: &mut super::EnrolRequest| r.document.push(' '),
        ] {
            let mut changed = req.clone();
            change(&mut changed);
            assert!(matches!(check(&changed), Err(ProofError::NotSigned(_))));
        }
        let mut short = req.clone();
        short.proofs.pop();
        assert!(matches!(check(&short), Err(ProofError::Malformed(_))));
        // Two keys of one type, or more keys than types: refused.
        let twice = [keys[0].clone(), own_keys()[0].clone()];
        let doubled = request("{\"doc\":1}", "sig", &twice, 1_000, &req.audience).unwrap();
        assert!(matches!(check(&doubled), Err(ProofError::Malformed(m)) if m.contains("one key per type")));
        let many: Vec<_> = (0..4).map(|_| own_keys()[0].clone()).collect();
        let many = request("{\"doc\":1}", "sig", &many, 1_000, &req.audience).unwrap();
        assert!(matches!(check(&many), Err(ProofError::Malformed(m)) if m.contains("1 to 3 keys")));
    }
}
