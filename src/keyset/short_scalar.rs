//! A work-around for ECDSA P-256 private keys whose scalar OpenSSH wrote
//! in 31 bytes (a minimal mpint when the top byte is zero: about one key in
//! 256 that `ssh-keygen` makes). ssh-key 0.7.0-rc.11, which russh pins,
//! accepts 32 or 33 bytes only. [`pad`] re-encodes such a key with the
//! scalar left-padded to 32 bytes (the same number) and changes nothing
//! else; every other key is left to ssh-key as it is.

use base64ct::{Base64, Encoding};
use zeroize::Zeroizing;

const BEGIN: &str = "-----BEGIN OPENSSH PRIVATE KEY-----";
const END: &str = "-----END OPENSSH PRIVATE KEY-----";
const MAGIC: &[u8] = b"openssh-key-v1\0";

/// Reads length-prefixed fields (RFC 4251 `string`, `uint32`).
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn u32(&mut self) -> Option<u32> {
        let b = self.bytes.get(self.at..self.at + 4)?;
        self.at += 4;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u32()?).ok()?;
        let s = self.bytes.get(self.at..self.at.checked_add(len)?)?;
        self.at += len;
        Some(s)
    }
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) -> Option<()> {
    out.extend_from_slice(&u32::try_from(s.len()).ok()?.to_be_bytes());
    out.extend_from_slice(s);
    Some(())
}

/// The key re-encoded with a 32-byte scalar, when it is an unencrypted
/// `ecdsa-sha2-nistp256` key whose scalar is shorter; else `None`.
pub fn pad(pem: &str) -> Option<Zeroizing<String>> {
    let body: Zeroizing<String> = Zeroizing::new(
        pem.trim()
            .strip_prefix(BEGIN)?
            .strip_suffix(END)?
            .split_whitespace()
            .collect(),
    );
    let blob = Zeroizing::new(Base64::decode_vec(&body).ok()?);
    let rest = blob.strip_prefix(MAGIC)?;
    let mut outer = Fields { bytes: rest, at: 0 };
    let (cipher, kdf, kdf_options) = (outer.string()?, outer.string()?, outer.string()?);
    if cipher != b"none" || kdf != b"none" || outer.u32()? != 1 {
        return None;
    }
    let public = outer.string()?;
    let private = outer.string()?;
    let mut inner = Fields { bytes: private, at: 0 };
    let (check1, check2) = (inner.u32()?, inner.u32()?);
    let key_type = inner.string()?;
    let curve = inner.string()?;
    let point = inner.string()?;
    let scalar = inner.string()?;
    let comment = inner.string()?;
    if key_type != b"ecdsa-sha2-nistp256" || curve != b"nistp256" || scalar.is_empty() || scalar.len() >= 32 {
        return None;
    }
    let mut padded_scalar = Zeroizing::new(vec![0u8; 32 - scalar.len()]);
    padded_scalar.extend_from_slice(scalar);
    let mut section = Zeroizing::new(Vec::with_capacity(private.len() + 8));
    section.extend_from_slice(&check1.to_be_bytes());
    section.extend_from_slice(&check2.to_be_bytes());
    for field in [key_type, curve, point, padded_scalar.as_slice(), comment] {
        put_string(&mut section, field)?;
    }
    // Padding to the cipher block size (8 for "none"): 1, 2, 3, ...
    let mut pad_byte = 1u8;
    while section.len() % 8 != 0 {
        section.push(pad_byte);
        pad_byte += 1;
    }
    let mut out = Zeroizing::new(MAGIC.to_vec());
    for field in [cipher, kdf, kdf_options] {
        put_string(&mut out, field)?;
    }
    out.extend_from_slice(&1u32.to_be_bytes());
    put_string(&mut out, public)?;
    put_string(&mut out, &section)?;
    let encoded = Zeroizing::new(Base64::encode_string(&out));
    let mut text = Zeroizing::new(String::with_capacity(encoded.len() + 80));
    text.push_str(BEGIN);
    text.push('\n');
    for line in encoded.as_bytes().chunks(70) {
        text.push_str(std::str::from_utf8(line).ok()?);
        text.push('\n');
    }
    text.push_str(END);
    text.push('\n');
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::pad;

    #[test]
    fn other_keys_and_other_text_are_left_alone() {
        assert!(pad("not a key").is_none());
        assert!(pad("-----BEGIN OPENSSH PRIVATE KEY-----\n!!!\n-----END OPENSSH PRIVATE KEY-----").is_none());
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        for name in [
            "node-a/ssh_host_ecdsa_key",
            "node-a/ssh_host_ed25519_key",
            "encrypted_ed25519_key",
        ] {
            let text = std::fs::read_to_string(fixtures.join(name)).unwrap();
            assert!(pad(&text).is_none(), "{name}");
        }
    }

    /// Regression: a key ssh-keygen wrote with a 31-byte scalar (found by
    /// generating keys until one had it) was refused, so adopting such a
    /// node failed, about one P-256 key in 256.
    #[test]
    fn a_31_byte_scalar_key_from_ssh_keygen_is_read_as_the_same_key() {
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let text = std::fs::read_to_string(fixtures.join("ecdsa_short_scalar_key")).unwrap();
        assert!(
            ssh_key::PrivateKey::from_openssh(&text).is_err(),
            "the pinned ssh-key reads it now: drop this work-around"
        );
        let key = crate::keyset::HostKey::from_openssh(&text).unwrap();
        let public = std::fs::read_to_string(fixtures.join("ecdsa_short_scalar_key.pub")).unwrap();
        let public = ssh_key::PublicKey::from_openssh(public.trim()).unwrap();
        assert_eq!(key.fingerprint(), &crate::keyset::fingerprint_of(&public));
    }
}
