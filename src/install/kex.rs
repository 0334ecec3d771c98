//! The post-quantum key exchange a node's sshd holds and its configuration
//! leaves out: OpenSSH 10.1 and later clients warn on every connection
//! without one (docs/clients.md, "Messages clients print").
//!
//! Where sshd accepts a post-quantum hybrid (`sshd -t -o
//! KexAlgorithms=NAME`; sshd has no `-Q`) that the effective
//! `KexAlgorithms` (a crypto policy, a distribution's drop-in) leaves out,
//! install puts a `KexAlgorithms` line in its own settings: the hybrids
//! sshd holds, first, then every exchange the configuration allowed, in
//! its order. Nothing is taken away, and each hybrid runs X25519 beside
//! its post-quantum half, so it is added only where the list already
//! allows X25519 (`curve25519-sha256`): a policy that forbids X25519, FIPS
//! mode, and a `KexAlgorithms` sshd reads before hostkeyctl's (the main
//! config before its drop-ins, a drop-in that sorts first) are left alone
//! and reported. sshd -T checks the line took effect, a
//! handshake that sshd offers it, and a failure rolls back with the keys.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::sshd::KexSupport;
use crate::scan::warnings::{self, POST_QUANTUM_KEX, X25519_KEX, is_post_quantum};

/// What install did about the post-quantum key exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KexStatus {
    /// sshd offers one already: nothing to do.
    Offered,
    /// install added the hybrids sshd holds (`added`).
    Added,
    /// sshd holds none (OpenSSH before 8.5): `upgrade` names the release.
    Unsupported,
    /// The kernel is in FIPS mode: left alone.
    Fips,
    /// The configuration allows no X25519, which every hybrid runs: left
    /// alone.
    PolicyForbids,
    /// sshd reads a `KexAlgorithms` before hostkeyctl's (in the main
    /// config before its drop-ins, or in a drop-in that sorts first),
    /// which wins: the site's choice, left alone.
    SetEarlier,
    /// sshd could not say what it holds.
    Unknown,
    /// A later release's word.
    #[serde(other)]
    Other,
}

/// The `kex` part of the install report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KexReport {
    /// What was done.
    pub status: KexStatus,
    /// The hybrids added (with `added`) or offered (with `offered`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_quantum: Vec<String>,
    /// With `unsupported`: the release that brings one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<String>,
}

/// What the node is like, for the plan.
#[derive(Clone, Debug, Default)]
pub struct KexInputs<'a> {
    /// What sshd holds (`None`: it could not say).
    pub support: Option<&'a KexSupport>,
    /// The `KexAlgorithms` sshd applies without hostkeyctl's line.
    pub base: Option<&'a str>,
    /// The kernel runs in FIPS mode.
    pub fips: bool,
    /// sshd reads a `KexAlgorithms` before hostkeyctl's.
    pub set_earlier: bool,
}

/// The plan: the line to write (if any) and the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KexPlan {
    /// The `KexAlgorithms` value for hostkeyctl's settings.
    pub line: Option<String>,
    /// What to report.
    pub report: KexReport,
}

fn report(status: KexStatus, post_quantum: Vec<String>, upgrade: Option<String>) -> KexPlan {
    KexPlan {
        line: None,
        report: KexReport {
            status,
            post_quantum,
            upgrade,
        },
    }
}

/// Decides the line.
pub fn plan(inputs: &KexInputs<'_>) -> KexPlan {
    let Some(support) = inputs.support else {
        return report(KexStatus::Unknown, vec![], None);
    };
    let Some(base) = inputs.base else {
        return report(KexStatus::Unknown, vec![], None);
    };
    let base: Vec<&str> = base.split(',').filter(|k| !k.is_empty()).collect();
    let offered: Vec<String> = base
        .iter()
        .filter(|k| is_post_quantum(k))
        .map(|k| (*k).to_owned())
        .collect();
    if !offered.is_empty() {
        return report(KexStatus::Offered, offered, None);
    }
    let held: Vec<String> = POST_QUANTUM_KEX
        .iter()
        .filter(|k| support.supported.iter().any(|s| s == *k))
        .map(|k| (*k).to_owned())
        .collect();
    if held.is_empty() {
        let banner = format!("SSH-2.0-{}", support.release.split(',').next().unwrap_or_default());
        return report(KexStatus::Unsupported, vec![], Some(warnings::upgrade(&banner)));
    }
    if inputs.fips {
        return report(KexStatus::Fips, vec![], None);
    }
    if !base.iter().any(|k| X25519_KEX.contains(k)) {
        return report(KexStatus::PolicyForbids, vec![], None);
    }
    if inputs.set_earlier {
        return report(KexStatus::SetEarlier, vec![], None);
    }
    let mut line: Vec<String> = held.clone();
    line.extend(base.iter().map(|k| (*k).to_owned()));
    KexPlan {
        line: Some(line.join(",")),
        report: KexReport {
            status: KexStatus::Added,
            post_quantum: held,
            upgrade: None,
        },
    }
}

/// The `KexAlgorithms` sshd applies without hostkeyctl's own line:
/// `effective` (sshd -T) when hostkeyctl's settings set none; otherwise
/// the crypto policy's, when the node has one (a policy changed since the
/// last install is followed), else hostkeyctl's line without the hybrids
/// it added.
pub fn base(effective: Option<&str>, own_line: Option<&str>, policy: Option<&str>) -> Option<String> {
    let Some(own) = own_line else {
        return effective.map(str::to_owned);
    };
    if let Some(policy) = policy {
        return Some(policy.to_owned());
    }
    let kept: Vec<&str> = own
        .split(',')
        .filter(|k| !k.is_empty() && !is_post_quantum(k))
        .collect();
    Some(kept.join(","))
}

/// The crypto policy's server back-end of the `/etc` that holds `ssh_dir`
/// (RHEL, Amazon Linux 2023, Fedora).
pub fn policy_file(ssh_dir: &Path) -> PathBuf {
    ssh_dir
        .parent()
        .unwrap_or(Path::new("/etc"))
        .join("crypto-policies/back-ends/opensshserver.config")
}

/// The first `KexAlgorithms` value in `text`, outside any Match block.
pub fn first_value(text: &str) -> Option<String> {
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next().map(str::to_ascii_lowercase).as_deref() {
            Some("match") => return None,
            Some("kexalgorithms") => return words.next().map(|v| v.trim_start_matches('=').to_owned()),
            _ => {}
        }
    }
    None
}

/// The plan for a node: its sshd, its config's text and hostkeyctl's own
/// settings as they are now.
pub(super) fn plan_for(
    sshd: &impl super::sshd::SshdControl,
    ssh_dir: &Path,
    placement: &super::sshd_config::Placement,
    main_text: &str,
    own_settings: &str,
) -> Result<KexPlan, super::InstallError> {
    let effective = sshd.effective()?.kex_algorithms;
    let policy = std::fs::read_to_string(policy_file(ssh_dir))
        .ok()
        .and_then(|t| first_value(&t));
    let own = first_value(own_settings);
    let base = base(effective.as_deref(), own.as_deref(), policy.as_deref());
    let support = sshd.kex_support();
    let set_earlier = matches!(placement, super::sshd_config::Placement::DropIn(_))
        && (super::sshd_config::set_before_drop_in(ssh_dir, main_text, "kexalgorithms")
            || earlier_drop_in_sets(ssh_dir));
    Ok(plan(&KexInputs {
        support: support.as_ref(),
        base: base.as_deref(),
        fips: fips_mode(),
        set_earlier,
    }))
}

/// Whether a drop-in that sorts before hostkeyctl's sets `KexAlgorithms`.
fn earlier_drop_in_sets(ssh_dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(ssh_dir.join("sshd_config.d")) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.ends_with(".conf")
            && name.as_str() < super::sshd_config::DROP_IN_NAME
            && std::fs::read_to_string(e.path()).is_ok_and(|t| first_value(&t).is_some())
    })
}

/// Whether the kernel runs in FIPS mode.
pub fn fips_mode() -> bool {
    std::fs::read_to_string("/proc/sys/crypto/fips_enabled").is_ok_and(|s| s.trim() == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = "curve25519-sha256,curve25519-sha256@libssh.org,ecdh-sha2-nistp256";

    fn support(release: &str, supported: &str) -> KexSupport {
        KexSupport {
            supported: supported.split(',').map(str::to_owned).collect(),
            release: release.to_owned(),
        }
    }

    #[test]
    fn a_policy_without_a_hybrid_gets_the_ones_sshd_holds_first_and_keeps_the_rest() {
        let s = support(
            "OpenSSH_9.2p1 Debian-2+deb12u10",
            &format!("sntrup761x25519-sha512@openssh.com,{POLICY}"),
        );
        let p = plan(&KexInputs {
            support: Some(&s),
            base: Some(POLICY),
            ..KexInputs::default()
        });
        assert_eq!(p.report.status, KexStatus::Added);
        assert_eq!(
            p.line.as_deref(),
            Some(format!("sntrup761x25519-sha512@openssh.com,{POLICY}").as_str())
        );
        // Run again over its own line: the same line, not a longer one.
        let again = base(p.line.as_deref(), p.line.as_deref(), None);
        assert_eq!(again.as_deref(), Some(POLICY));
    }

    #[test]
    fn nothing_is_added_where_it_is_offered_impossible_or_not_allowed() {
        let holds = support("OpenSSH_9.2p1", &format!("sntrup761x25519-sha512@openssh.com,{POLICY}"));
        let old = support("OpenSSH_8.4p1 Debian-5+deb11u3, OpenSSL 1.1.1w", POLICY);
        let with = |s, base, fips, set_earlier| {
            plan(&KexInputs {
                support: Some(s),
                base: Some(base),
                fips,
                set_earlier,
            })
        };
        let offered = with(
            &holds,
            "sntrup761x25519-sha512@openssh.com,curve25519-sha256",
            false,
            false,
        );
        assert_eq!((offered.report.status, offered.line), (KexStatus::Offered, None));
        let unsupported = with(&old, POLICY, false, false);
        assert_eq!(unsupported.report.status, KexStatus::Unsupported);
        assert!(unsupported.report.upgrade.unwrap().contains("Debian 12"));
        assert_eq!(with(&holds, POLICY, true, false).report.status, KexStatus::Fips);
        let no_x25519 = with(&holds, "ecdh-sha2-nistp256,diffie-hellman-group14-sha256", false, false);
        assert_eq!(no_x25519.report.status, KexStatus::PolicyForbids);
        assert_eq!(with(&holds, POLICY, false, true).report.status, KexStatus::SetEarlier);
        for p in [unsupported.line, no_x25519.line] {
            assert_eq!(p, None);
        }
    }

    #[test]
    fn the_base_follows_a_changed_policy_over_the_own_line() {
        let own = "sntrup761x25519-sha512@openssh.com,curve25519-sha256,ecdh-sha2-nistp256";
        assert_eq!(
            base(Some(own), Some(own), Some("curve25519-sha256")).as_deref(),
            Some("curve25519-sha256")
        );
        assert_eq!(base(Some("a,b"), None, Some("c")).as_deref(), Some("a,b"));
        assert_eq!(
            first_value("# x\nKexAlgorithms a,b\nKexAlgorithms c\n").as_deref(),
            Some("a,b")
        );
        assert_eq!(first_value("Match User x\nKexAlgorithms a\n"), None);
    }
}
