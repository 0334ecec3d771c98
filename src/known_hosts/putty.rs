//! What PuTTY (PuTTY, plink, pscp, psftp; WinSCP shares the format) needs
//! to trust the set: `-hostkey` fingerprints, the host key cache as a
//! Windows registry file, and a host CA (PuTTY 0.78 and later).
//!
//! The cache holds one key per host, port and type, each in PuTTY's own
//! notation (its `cache_str`): `0xE,0xN` for RSA (type `rsa2`),
//! `nistp256,0xX,0xY` for ECDSA, `0xX,0xY` for Ed25519, where X and Y are
//! the point's affine coordinates in lower-case hex without leading zeros.
//! Ed25519's X is not in the public key (RFC 8032 stores Y and X's sign),
//! so it is recovered here as RFC 8032, 5.1.3, decodes a point.

use num_bigint::BigUint;
use sha2::{Digest, Sha256};
use ssh_key::PublicKey;
use ssh_key::public::{EcdsaPublicKey, KeyData};

/// The registry key PuTTY keeps its host key cache under.
pub const HOST_KEYS: &str = r"HKEY_CURRENT_USER\Software\SimonTatham\PuTTY\SshHostKeys";
/// The registry key PuTTY 0.78 and later keeps its trusted host CAs under.
pub const HOST_CAS: &str = r"HKEY_CURRENT_USER\Software\SimonTatham\PuTTY\SshHostCAs";

/// PuTTY's name for a key's type in its cache, and the key in its
/// notation; `None` for a type PuTTY does not cache (none hostkeyctl makes).
pub fn cache_entry(key: &PublicKey) -> Option<(&'static str, String)> {
    match key.key_data() {
        KeyData::Rsa(rsa) => Some((
            "rsa2",
            format!(
                "0x{},0x{}",
                hex_of(rsa.e().as_positive_bytes()?),
                hex_of(rsa.n().as_positive_bytes()?)
            ),
        )),
        KeyData::Ecdsa(EcdsaPublicKey::NistP256(point)) => Some((
            "ecdsa-sha2-nistp256",
            format!("nistp256,0x{},0x{}", hex_of(point.x()?), hex_of(point.y()?)),
        )),
        KeyData::Ed25519(ed) => {
            let (x, y) = ed25519_affine(&ed.0)?;
            Some((
                "ssh-ed25519",
                format!("0x{},0x{}", x.to_str_radix(16), y.to_str_radix(16)),
            ))
        }
        _ => None,
    }
}

/// The cache's value name for a key type at a host and port.
pub fn cache_name(kind: &str, host: &str, port: u16) -> String {
    format!("{kind}@{port}:{host}")
}

/// Big-endian bytes as PuTTY prints a number: lower-case hex, no leading
/// zeros ("0" for zero).
fn hex_of(bytes: &[u8]) -> String {
    BigUint::from_bytes_be(bytes).to_str_radix(16)
}

/// The affine coordinates of an encoded Ed25519 point (RFC 8032, 5.1.3),
/// or `None` when the bytes are no point of the curve.
fn ed25519_affine(encoded: &[u8; 32]) -> Option<(BigUint, BigUint)> {
    let p = (BigUint::from(1u8) << 255u32) - BigUint::from(19u8);
    let mut y_bytes = *encoded;
    let sign = y_bytes[31] >> 7;
    y_bytes[31] &= 0x7f;
    let y = BigUint::from_bytes_le(&y_bytes);
    if y >= p {
        return None;
    }
    let one = BigUint::from(1u8);
    // d = -121665 / 121666 (mod p); an inverse is a power p - 2 (Fermat).
    let inverse = |v: &BigUint| v.modpow(&(&p - BigUint::from(2u8)), &p);
    let d = (&p - BigUint::from(121_665u32)) * inverse(&BigUint::from(121_666u32)) % &p;
    let yy = &y * &y % &p;
    let u = (&yy + &p - &one) % &p;
    let v = (&d * &yy + &one) % &p;
    // x = u v^3 (u v^7)^((p-5)/8), then fixed up by sqrt(-1) if needed.
    let v3 = v.modpow(&BigUint::from(3u8), &p);
    let v7 = v.modpow(&BigUint::from(7u8), &p);
    let exponent = (&p - BigUint::from(5u8)) >> 3u32;
    let mut x = &u * &v3 % &p * (&u * &v7 % &p).modpow(&exponent, &p) % &p;
    let vxx = &v * &x % &p * &x % &p;
    let minus_u = (&p - &u) % &p;
    if vxx == minus_u {
        let sqrt_minus_one = BigUint::from(2u8).modpow(&((&p - &one) >> 2u32), &p);
        x = x * sqrt_minus_one % &p;
    } else if vxx != u {
        return None;
    }
    let zero = BigUint::from(0u8);
    if x == zero && sign == 1 {
        return None;
    }
    if u8::from(x.bit(0)) != sign {
        x = &p - x;
    }
    Some((x, y))
}

/// A string value of a `.reg` file, quoted as regedit reads it.
fn reg_string(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A Windows registry file (`regedit /s FILE`, or a double click) that
/// puts every key of `keys` in PuTTY's host key cache for each host.
/// Lines end in CRLF, as regedit writes them.
pub fn registry_host_keys(keys: &[PublicKey], hosts: &[String], port: u16) -> String {
    let mut out = format!("Windows Registry Editor Version 5.00\r\n\r\n[{HOST_KEYS}]\r\n");
    for host in hosts {
        for key in keys {
            if let Some((kind, value)) = cache_entry(key) {
                out.push_str(&format!(
                    "{}={}\r\n",
                    reg_string(&cache_name(kind, host, port)),
                    reg_string(&value)
                ));
            }
        }
    }
    out
}

/// The name a CA is stored under: `hostkeyctl-` and the start of its key's
/// SHA-256, so the same CA always lands on the same entry.
pub fn ca_entry_name(ca: &PublicKey) -> String {
    let blob = ca.to_bytes().unwrap_or_default();
    format!("hostkeyctl-{}", &hex::encode(Sha256::digest(&blob))[..16])
}

/// PuTTY's validity expression for the hosts: each name, joined by `||`.
pub fn validity(hosts: &[String]) -> String {
    hosts.join(" || ")
}

/// Refuses a name PuTTY's validity expression would read as more than a
/// host name or wildcard (its operators `&&`, `||`, `!` and parentheses,
/// `port:` terms): a CA must be valid for exactly the names given.
pub fn check_validity_names(hosts: &[String]) -> Result<(), String> {
    let plain = |n: &str| {
        n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '*' | '?' | ':' | '[' | ']'))
            && !n.contains("port:")
    };
    match hosts.iter().find(|n| !plain(n)) {
        Some(bad) => Err(format!(
            "{bad:?} cannot be a name in PuTTY's host CA validity: give host names, addresses or * ? wildcards"
        )),
        None => Ok(()),
    }
}

/// A Windows registry file that makes PuTTY 0.78 and later trust each CA
/// for the hosts (Connection > SSH > Host keys > Configure host CAs):
/// `PublicKey` is the key's base64 blob, `Validity` the hosts, SHA-1 RSA
/// signatures refused.
pub fn registry_host_cas(cas: &[PublicKey], hosts: &[String]) -> String {
    let mut out = "Windows Registry Editor Version 5.00\r\n".to_owned();
    for ca in cas {
        let blob = <base64ct::Base64 as base64ct::Encoding>::encode_string(&ca.to_bytes().unwrap_or_default());
        out.push_str(&format!(
            "\r\n[{HOST_CAS}\\{}]\r\n\"PublicKey\"={}\r\n\"Validity\"={}\r\n\"PermitRSASHA1\"=dword:00000000\r\n\"PermitRSASHA256\"=dword:00000001\r\n\"PermitRSASHA512\"=dword:00000001\r\n",
            ca_entry_name(ca),
            reg_string(&blob),
            reg_string(&validity(hosts)),
        ));
    }
    out
}

/// `-hostkey` arguments for plink, pscp and psftp (PuTTY 0.72 and later),
/// one per key: with them PuTTY accepts exactly these keys and ignores
/// its cache, so keys of several sets let it follow a rotation.
pub fn hostkey_args(keys: &[PublicKey]) -> String {
    let args: Vec<String> = keys
        .iter()
        .map(|k| format!("-hostkey {}", k.fingerprint(ssh_key::HashAlg::Sha256)))
        .collect();
    format!("{}\n", args.join(" "))
}

#[cfg(test)]
mod tests {
    use super::{cache_entry, registry_host_keys};

    /// Keys and the cache lines PuTTY 0.78's plink wrote for them when it
    /// accepted each from a real sshd (`~/.putty/sshhostkeys`).
    const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIP7PekIC0sT5AfmtK8dfG+I9BXFxtcfzdaByAmPPrlnD";
    const ED25519_CACHE: &str = "0x6e43d0c96754bfe767ee1693f23b60a37c26560347eaf474578a48a848b2f1f5,0x4359aecf630272a075f3c7b57171053de21b5fc72badf901f9c4d202427acffe";

    const ECDSA: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBMa6MuTdeZ0nVMHEb4M96GEikA+35JwPK+NgMPQAZH/53XsibBCM8MMTPOV82VYK8McLWHdKOVikK8me1CcJltw=";
    const ECDSA_CACHE: &str = "nistp256,0xc6ba32e4dd799d2754c1c46f833de86122900fb7e49c0f2be36030f400647ff9,0xdd7b226c108cf0c3133ce57cd9560af0c70b58774a3958a42bc99ed4270996dc";

    #[test]
    fn ecdsa_is_cached_as_plink_caches_it() {
        let key = ssh_key::PublicKey::from_openssh(ECDSA).unwrap();
        let (kind, value) = cache_entry(&key).unwrap();
        assert_eq!((kind, value.as_str()), ("ecdsa-sha2-nistp256", ECDSA_CACHE));
    }

    /// Every Ed25519 key decodes to a point whose Y is the key's and whose
    /// X has the key's sign bit (the plink vector above pins the rest).
    #[test]
    fn every_ed25519_key_has_a_point() {
        for _ in 0..64 {
            let private = ssh_key::PrivateKey::random(&mut rand::rng(), ssh_key::Algorithm::Ed25519).unwrap();
            let ssh_key::public::KeyData::Ed25519(ed) = private.public_key().key_data() else {
                unreachable!()
            };
            let (x, y) = super::ed25519_affine(&ed.0).unwrap();
            let mut y_bytes = ed.0;
            y_bytes[31] &= 0x7f;
            assert_eq!(y, num_bigint::BigUint::from_bytes_le(&y_bytes));
            assert_eq!(u8::from(x.bit(0)), ed.0[31] >> 7);
        }
    }

    #[test]
    fn ed25519_is_cached_as_plink_caches_it() {
        let key = ssh_key::PublicKey::from_openssh(ED25519).unwrap();
        let (kind, value) = cache_entry(&key).unwrap();
        assert_eq!((kind, value.as_str()), ("ssh-ed25519", ED25519_CACHE));
    }

    #[test]
    fn validity_takes_names_and_wildcards_only() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(super::check_validity_names(&names(&["login.test", "*.hp.internal", "10.1.2.3"])).is_ok());
        for bad in ["a||b", "!login", "(x)", "port:22", "a&&b"] {
            assert!(super::check_validity_names(&names(&[bad])).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_registry_file_names_each_host_port_and_type() {
        let key = ssh_key::PublicKey::from_openssh(ED25519).unwrap();
        let reg = registry_host_keys(&[key], &["login.test".into(), "10.0.0.5".into()], 2222);
        let lines: Vec<&str> = reg.split("\r\n").collect();
        assert_eq!(lines[0], "Windows Registry Editor Version 5.00");
        assert_eq!(lines[3], format!("\"ssh-ed25519@2222:login.test\"=\"{ED25519_CACHE}\""));
        assert!(lines[4].starts_with("\"ssh-ed25519@2222:10.0.0.5\"="), "{reg}");
    }
}
