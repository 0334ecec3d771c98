//! DNS SSHFP records, as `ssh-keygen -r` prints them: SHA-1 and SHA-256
//! of the key blob.

use sha1::Sha1;
use sha2::{Digest, Sha256};
use ssh_key::PublicKey;

/// `ssh-keygen -r`'s SSHFP records for one key.
pub fn sshfp(name: &str, key: &PublicKey) -> Vec<String> {
    let algorithm = match key.algorithm() {
        ssh_key::Algorithm::Rsa { .. } => 1,
        ssh_key::Algorithm::Dsa => 2,
        ssh_key::Algorithm::Ecdsa { .. } => 3,
        ssh_key::Algorithm::Ed25519 => 4,
        _ => return Vec::new(),
    };
    let Ok(blob) = key.to_bytes() else { return Vec::new() };
    let sha1 = Sha1::digest(&blob);
    let sha256 = Sha256::digest(&blob);
    vec![
        format!("{name} IN SSHFP {algorithm} 1 {}", hex::encode(sha1)),
        format!("{name} IN SSHFP {algorithm} 2 {}", hex::encode(sha256)),
    ]
}
