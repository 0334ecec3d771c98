//! Host keys and the key set: [`KeyAlgorithm`], [`HostKey`] (zeroized,
//! never printed) and [`KeySet`], one key per algorithm.

use super::*;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use ssh_key::private::{KeypairData, RsaKeypair};
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, LineEnding, PrivateKey, PublicKey};
use zeroize::Zeroizing;

use crate::fingerprint::Fingerprint;

/// Smallest RSA modulus hostkeyctl accepts (OpenSSH refuses smaller ones).
pub const MIN_RSA_BITS: usize = 2048;
/// RSA modulus size used when none is given (what `ssh-keygen -A` makes).
pub const DEFAULT_RSA_BITS: usize = 3072;
/// Largest RSA modulus accepted. Every handshake costs the node an RSA
/// signature, which grows with the cube of the size; a 16384-bit key in the
/// secret (all OpenSSH allows) would let whoever can write the secret slow
/// every login node's sshd (and the validation here) to a crawl.
pub const MAX_RSA_BITS: usize = 8192;

/// A host key algorithm hostkeyctl manages. Each key set has at most one key
/// per algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum KeyAlgorithm {
    /// `ssh-ed25519`.
    Ed25519,
    /// `ecdsa-sha2-nistp256`.
    Ecdsa,
    /// `ssh-rsa` keys (served as `rsa-sha2-512`/`rsa-sha2-256`).
    Rsa,
}

impl KeyAlgorithm {
    /// Every managed algorithm, in the order sshd lists its default host keys.
    pub const ALL: [KeyAlgorithm; 3] = [KeyAlgorithm::Rsa, KeyAlgorithm::Ecdsa, KeyAlgorithm::Ed25519];

    /// The short name used on the command line and in host key file names.
    pub fn short_name(self) -> &'static str {
        match self {
            KeyAlgorithm::Ed25519 => "ed25519",
            KeyAlgorithm::Ecdsa => "ecdsa",
            KeyAlgorithm::Rsa => "rsa",
        }
    }

    /// The SSH key type name, as in a public key line.
    pub fn key_type(self) -> &'static str {
        match self {
            KeyAlgorithm::Ed25519 => "ssh-ed25519",
            KeyAlgorithm::Ecdsa => "ecdsa-sha2-nistp256",
            KeyAlgorithm::Rsa => "ssh-rsa",
        }
    }

    /// Parses an SSH key type name (`ssh-ed25519`, ...).
    pub fn from_key_type(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.key_type() == name)
    }

    /// The managed algorithm of an `ssh-key` algorithm, if it is one.
    pub fn of(algorithm: &Algorithm) -> Option<Self> {
        match algorithm {
            Algorithm::Ed25519 => Some(KeyAlgorithm::Ed25519),
            Algorithm::Ecdsa {
                curve: EcdsaCurve::NistP256,
            } => Some(KeyAlgorithm::Ecdsa),
            Algorithm::Rsa { .. } => Some(KeyAlgorithm::Rsa),
            _ => None,
        }
    }

    /// `ssh_host_<alg>_key`, the private key file name sshd uses by default.
    pub fn private_file_name(self) -> String {
        format!("ssh_host_{}_key", self.short_name())
    }

    /// `ssh_host_<alg>_key.pub`.
    pub fn public_file_name(self) -> String {
        format!("ssh_host_{}_key.pub", self.short_name())
    }
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key_type())
    }
}

impl Serialize for KeyAlgorithm {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.key_type())
    }
}

impl FromStr for KeyAlgorithm {
    type Err = String;

    /// Accepts the short names (`ed25519`, `ecdsa`, `rsa`) and the key type
    /// names (`ssh-ed25519`, ...).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        Self::ALL
            .into_iter()
            .find(|a| a.short_name().eq_ignore_ascii_case(s) || a.key_type() == s)
            .ok_or_else(|| format!("unknown host key algorithm {s:?}: expected ed25519, ecdsa or rsa"))
    }
}

/// Why one private key cannot be a managed host key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The text is not an OpenSSH private key.
    #[error("not an OpenSSH private key ({0}); expected the text of an `ssh_host_<alg>_key` file")]
    Unparsable(ssh_key::Error),
    /// The key is protected by a passphrase, which sshd cannot enter.
    #[error(
        "the private key is encrypted with a passphrase; host keys must be unencrypted because sshd cannot ask for one"
    )]
    Encrypted,
    /// A key type hostkeyctl does not manage (DSA, ECDSA on other curves, FIDO keys).
    #[error("{key_type} keys are not managed; hostkeyctl manages ssh-ed25519, ecdsa-sha2-nistp256 and ssh-rsa")]
    Unsupported {
        /// The key type found.
        key_type: String,
    },
    /// An RSA key below [`MIN_RSA_BITS`].
    #[error("RSA key of {bits} bits is too small; at least {MIN_RSA_BITS} bits are required")]
    RsaTooSmall {
        /// The modulus size found.
        bits: usize,
    },
    /// An RSA key above [`MAX_RSA_BITS`].
    #[error("RSA key of {bits} bits is too large; at most {MAX_RSA_BITS} bits are accepted")]
    RsaTooLarge {
        /// The modulus size found.
        bits: usize,
    },
    /// The private half does not produce signatures its own public half accepts.
    #[error("the private key does not match its own public key (a test signature did not verify)")]
    Inconsistent,
    /// A set of no algorithm was asked for.
    #[error("--algorithms is empty; name at least one of ed25519, ecdsa, rsa")]
    NoAlgorithm,
    /// A new RSA key's size is outside [`MIN_RSA_BITS`]..=[`MAX_RSA_BITS`].
    #[error("--rsa-bits {bits} is out of range; use {MIN_RSA_BITS} to {MAX_RSA_BITS} (default 3072)")]
    RsaBits {
        /// The size asked for.
        bits: usize,
    },
    /// Generating a key failed.
    #[error("generating the {algorithm} key failed: {source}")]
    Generate {
        /// Which key was being made.
        algorithm: KeyAlgorithm,
        /// What went wrong.
        source: ssh_key::Error,
    },
}

impl crate::exit::ExitStatus for KeyError {
    /// A key, or the options for new ones, the operator gave: bad input.
    fn status(&self) -> crate::exit::Status {
        crate::exit::Status::Usage
    }
}

/// One host key: the private key and what is derived from it.
#[derive(Clone)]
pub struct HostKey {
    algorithm: KeyAlgorithm,
    private: PrivateKey,
    fingerprint: Fingerprint,
}

impl HostKey {
    /// Checks a private key and makes it a host key: unencrypted, a managed
    /// algorithm, RSA large enough, and its private half really belongs to
    /// its public half (proved by signing and verifying a test message).
    pub fn from_private(private: PrivateKey) -> Result<Self, KeyError> {
        if private.is_encrypted() {
            return Err(KeyError::Encrypted);
        }
        let algorithm = KeyAlgorithm::of(&private.algorithm()).ok_or_else(|| KeyError::Unsupported {
            key_type: private.algorithm().as_str().to_owned(),
        })?;
        if let KeypairData::Rsa(rsa) = private.key_data() {
            let bits = rsa_bits(rsa);
            if bits < MIN_RSA_BITS {
                return Err(KeyError::RsaTooSmall { bits });
            }
            if bits > MAX_RSA_BITS {
                return Err(KeyError::RsaTooLarge { bits });
            }
        }
        // The OpenSSH format stores the public key next to the private one;
        // a signature check proves the private scalar really matches it.
        let message = b"hostkeyctl key consistency check";
        let signature = private
            .sign("hostkeyctl", HashAlg::Sha512, message)
            .map_err(|_| KeyError::Inconsistent)?;
        private
            .public_key()
            .verify("hostkeyctl", message, &signature)
            .map_err(|_| KeyError::Inconsistent)?;
        let fingerprint = fingerprint_of(private.public_key());
        Ok(HostKey {
            algorithm,
            private,
            fingerprint,
        })
    }

    /// Parses and checks the text of an OpenSSH private key file.
    pub fn from_openssh(pem: &str) -> Result<Self, KeyError> {
        let private = match PrivateKey::from_openssh(pem) {
            Ok(private) => private,
            Err(ssh_key::Error::Encrypted) => return Err(KeyError::Encrypted),
            Err(first) => {
                // OpenSSH writes an ECDSA scalar as a minimal mpint, so about
                // one P-256 key in 256 (top byte zero) has a 31-byte scalar,
                // which the pinned ssh-key refuses ("length invalid").
                let padded = short_scalar::pad(pem).ok_or(KeyError::Unparsable(first))?;
                PrivateKey::from_openssh(padded.as_str()).map_err(KeyError::Unparsable)?
            }
        };
        Self::from_private(private)
    }

    /// Generates a new key. `rsa_bits` is used for [`KeyAlgorithm::Rsa`] only.
    pub fn generate(algorithm: KeyAlgorithm, rsa_bits: usize) -> Result<Self, KeyError> {
        let mut rng = rand::rng();
        let generated = match algorithm {
            KeyAlgorithm::Ed25519 => PrivateKey::random(&mut rng, Algorithm::Ed25519),
            KeyAlgorithm::Ecdsa => PrivateKey::random(
                &mut rng,
                Algorithm::Ecdsa {
                    curve: EcdsaCurve::NistP256,
                },
            ),
            KeyAlgorithm::Rsa => {
                if rsa_bits < MIN_RSA_BITS {
                    return Err(KeyError::RsaTooSmall { bits: rsa_bits });
                }
                RsaKeypair::random(&mut rng, rsa_bits).and_then(|kp| PrivateKey::new(KeypairData::Rsa(kp), ""))
            }
        };
        let mut private = generated.map_err(|source| KeyError::Generate { algorithm, source })?;
        private.set_comment("hostkeyctl");
        Self::from_private(private)
    }

    /// Which algorithm this key is for.
    pub fn algorithm(&self) -> KeyAlgorithm {
        self.algorithm
    }

    /// The `SHA256:...` fingerprint, as `ssh-keygen -l` prints it.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The public key.
    pub fn public_key(&self) -> &PublicKey {
        self.private.public_key()
    }

    /// The public key line (`ssh-ed25519 AAAA... comment`), without newline.
    pub fn public_line(&self) -> String {
        public_line(self.private.public_key())
    }

    /// The RSA modulus size, for RSA keys.
    pub fn rsa_bits(&self) -> Option<usize> {
        match self.private.key_data() {
            KeypairData::Rsa(rsa) => Some(rsa_bits(rsa)),
            _ => None,
        }
    }

    /// The private key, for signing (certificates). Never log or print it.
    pub(crate) fn private_key(&self) -> &PrivateKey {
        &self.private
    }

    /// The OpenSSH private key file text. This is secret: the buffer is
    /// zeroized when dropped; never log or print it.
    pub fn reveal_private_openssh(&self) -> Zeroizing<String> {
        // Encoding a key that passed `from_private` cannot fail: it is
        // unencrypted and of a supported type.
        self.private
            .to_openssh(LineEnding::LF)
            .unwrap_or_else(|_| Zeroizing::new(String::new()))
    }
}

impl PartialEq for HostKey {
    /// Two host keys are equal when their private keys are (constant time).
    fn eq(&self, other: &Self) -> bool {
        self.private == other.private
    }
}

impl fmt::Debug for HostKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostKey")
            .field("algorithm", &self.algorithm)
            .field("fingerprint", &self.fingerprint)
            .finish_non_exhaustive()
    }
}

/// The `SHA256:...` fingerprint of a public key.
pub fn fingerprint_of(public: &PublicKey) -> Fingerprint {
    Fingerprint::of(public)
}

/// The OpenSSH public key line of a key, without newline.
pub fn public_line(public: &PublicKey) -> String {
    // Encoding a public key into a String only fails for key types this
    // crate cannot represent at all, which never reach here.
    public.to_openssh().unwrap_or_default()
}

fn rsa_bits(rsa: &RsaKeypair) -> usize {
    let n = rsa.public().n().as_positive_bytes().unwrap_or_default();
    let Some(first) = n.first() else { return 0 };
    n.len() * 8 - first.leading_zeros() as usize
}

/// A set of host keys, at most one per algorithm.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KeySet {
    keys: BTreeMap<KeyAlgorithm, HostKey>,
}

impl KeySet {
    /// Generates a new set with one key per algorithm in `algorithms`
    /// (named twice, made once).
    pub fn generate(algorithms: &[KeyAlgorithm], rsa_bits: usize) -> Result<Self, KeyError> {
        if algorithms.is_empty() {
            return Err(KeyError::NoAlgorithm);
        }
        if algorithms.contains(&KeyAlgorithm::Rsa) && !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&rsa_bits) {
            return Err(KeyError::RsaBits { bits: rsa_bits });
        }
        let mut set = KeySet::default();
        for &algorithm in algorithms {
            if !set.keys.contains_key(&algorithm) {
                set.insert(HostKey::generate(algorithm, rsa_bits)?);
            }
        }
        Ok(set)
    }

    /// Adds a key, returning the one it replaces for the same algorithm.
    pub fn insert(&mut self, key: HostKey) -> Option<HostKey> {
        self.keys.insert(key.algorithm(), key)
    }

    /// The key for an algorithm.
    pub fn get(&self, algorithm: KeyAlgorithm) -> Option<&HostKey> {
        self.keys.get(&algorithm)
    }

    /// The keys, in algorithm order.
    pub fn keys(&self) -> impl Iterator<Item = &HostKey> {
        self.keys.values()
    }

    /// The algorithms present.
    pub fn algorithms(&self) -> Vec<KeyAlgorithm> {
        self.keys.keys().copied().collect()
    }

    /// How many keys the set holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the set holds no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Keeps only the keys of the given algorithms.
    pub fn retain(&mut self, algorithms: &[KeyAlgorithm]) {
        self.keys.retain(|a, _| algorithms.contains(a));
    }

    /// The word a node's sshd adds to its version banner while it serves
    /// this set as extra host keys ([`NEXT_MARKER_PREFIX`] and the first 12
    /// hex digits of a SHA-256 over the set's fingerprints). Extra keys are
    /// invisible to a handshake before authentication (sshd signs with the
    /// first key of each type), so the banner is how a scan tells that a
    /// node's sshd loaded them (docs/rotation.md, "How the extra keys are
    /// served").
    pub fn next_marker(&self) -> String {
        marker_of(self.keys().map(|k| k.fingerprint()))
    }
}

/// [`KeySet::next_marker`] from a set's fingerprints alone, in the order
/// of their algorithms (ed25519, ecdsa, rsa): what a reader of the
/// secret's fingerprint tags computes without a private key.
pub fn marker_of<'a>(fingerprints: impl IntoIterator<Item = &'a crate::fingerprint::Fingerprint>) -> String {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    for fp in fingerprints {
        hash.update(fp.as_str().as_bytes());
        hash.update(b"\n");
    }
    let digest = hex::encode(hash.finalize());
    format!("{NEXT_MARKER_PREFIX}{}", &digest[..12])
}

/// The start of the banner word that names the extra set a node serves
/// ([`KeySet::next_marker`]).
pub const NEXT_MARKER_PREFIX: &str = "hostkeyctl-next-";

/// A key's public facts, for reports.
#[derive(Debug, serde::Serialize)]
pub struct KeyRow {
    /// Key type.
    pub algorithm: String,
    /// `SHA256:` fingerprint.
    pub fingerprint: crate::fingerprint::Fingerprint,
    /// Public key line.
    pub public_key: String,
}

/// Public facts of every key of a set.
pub fn key_rows(keys: &KeySet) -> Vec<KeyRow> {
    keys.keys()
        .map(|k| KeyRow {
            algorithm: k.algorithm().key_type().to_owned(),
            fingerprint: k.fingerprint().clone(),
            public_key: k.public_line(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{HostKey, KeyAlgorithm, KeyError, KeySet};

    #[test]
    fn algorithm_names_parse_both_ways() {
        for a in KeyAlgorithm::ALL {
            assert_eq!(a.short_name().parse::<KeyAlgorithm>(), Ok(a));
            assert_eq!(a.key_type().parse::<KeyAlgorithm>(), Ok(a));
            assert_eq!(KeyAlgorithm::from_key_type(a.key_type()), Some(a));
        }
        let err = "dsa".parse::<KeyAlgorithm>().unwrap_err();
        assert!(err.contains("expected ed25519, ecdsa or rsa"), "{err}");
    }

    #[test]
    fn generated_keys_are_consistent_and_redacted() {
        let set = KeySet::generate(&[KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa], 3072).unwrap();
        assert_eq!(set.algorithms(), vec![KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa]);
        for key in set.keys() {
            assert!(key.fingerprint().as_str().starts_with("SHA256:"));
            let pem = key.reveal_private_openssh();
            let debug = format!("{set:?}");
            let body: String = pem.lines().nth(1).unwrap().to_owned();
            assert!(!debug.contains(&body), "Debug shows private key material");
            let again = HostKey::from_openssh(&pem).unwrap();
            assert_eq!(&again, key);
        }
    }

    #[test]
    fn sizes_out_of_range_and_empty_sets_are_refused() {
        let err = KeySet::generate(&[KeyAlgorithm::Rsa], 1024).unwrap_err();
        assert!(matches!(err, KeyError::RsaBits { bits: 1024 }), "{err}");
        let err = KeySet::generate(&[KeyAlgorithm::Ed25519, KeyAlgorithm::Rsa], 16384).unwrap_err();
        assert!(err.to_string().contains("--rsa-bits 16384 is out of range"), "{err}");
        // No RSA key asked for: its size does not matter.
        assert!(KeySet::generate(&[KeyAlgorithm::Ed25519], 1024).is_ok());
        let err = KeySet::generate(&[], 3072).unwrap_err();
        assert!(matches!(err, KeyError::NoAlgorithm), "{err}");
    }
}
