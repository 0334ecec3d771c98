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
    let Some(support) = inputs.support else {
        return report(KexStatus::Unknown, vec![], None);
    };
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

/// The plan for a node, asked of its own sshd on a trial copy of its
/// configuration in `scratch` (removed after): the `KexAlgorithms` sshd
/// applies without hostkeyctl's settings (`sshd -T` on the copy without
/// them: a site's drop-ins, its crypto policy and `+`/`-` lists all count
/// as sshd counts them), then, with the planned line in their place,
/// whether sshd applies it. A list sshd reads first leaves the line out
/// (`set_earlier`); anything that cannot be asked, `unknown`.
pub(super) fn plan_for(
    sshd: &impl super::sshd::SshdControl,
    ssh_dir: &Path,
    placement: &super::sshd_config::Placement,
    main_text: &str,
    scratch: &Path,
) -> KexPlan {
    let _ = std::fs::remove_dir_all(scratch);
    let asked = |line: Option<&str>| -> Option<String> {
        let trial = trial_config(ssh_dir, placement, main_text, scratch, line).ok()?;
        sshd.effective_of(&trial).ok()?.kex_algorithms
    };
    let base = asked(None);
    // Most nodes offer a hybrid already: what sshd accepts (four `sshd
    // -t` runs) is asked only of the others, not at every timer run.
    let offers = base.as_deref().is_some_and(|b| b.split(',').any(is_post_quantum));
    let support = if offers { None } else { sshd.kex_support() };
    let mut planned = plan(&KexInputs {
        support: support.as_ref(),
        base: base.as_deref(),
        fips: fips_mode(),
    });
    if let Some(line) = planned.line.clone()
        && asked(Some(&line)).as_deref() != Some(line.as_str())
    {
        planned = report(KexStatus::SetEarlier, vec![], None);
    }
    let _ = std::fs::remove_dir_all(scratch);
    planned
}

/// A copy of the configuration under `scratch` with hostkeyctl's settings
/// out (its block stripped, its drop-in not copied) and, with `line`,
/// `KexAlgorithms line` where they go: the main config's includes of the
/// drop-in directory point at a copy of it. Returns the main config's copy.
fn trial_config(
    ssh_dir: &Path,
    placement: &super::sshd_config::Placement,
    main_text: &str,
    scratch: &Path,
    line: Option<&str>,
) -> std::io::Result<PathBuf> {
    use super::sshd_config::{DROP_IN_NAME, Placement, strip_blocks};
    let drop_ins = scratch.join("sshd_config.d");
    let _ = std::fs::remove_dir_all(scratch);
    crate::fsutil::create_dir_all(&drop_ins, 0o700)?;
    for entry in std::fs::read_dir(ssh_dir.join("sshd_config.d"))?.flatten() {
        if entry.file_name() != DROP_IN_NAME && entry.path().is_file() {
            std::fs::copy(entry.path(), drop_ins.join(entry.file_name()))?;
        }
    }
    let mut text = super::sshd_config::redirect_drop_in_includes(ssh_dir, &strip_blocks(main_text), &drop_ins);
    if let Some(line) = line {
        match placement {
            Placement::DropIn(_) => std::fs::write(drop_ins.join(DROP_IN_NAME), format!("KexAlgorithms {line}\n"))?,
            Placement::Inline(_) => text = format!("KexAlgorithms {line}\n{text}"),
        }
    }
    let main = scratch.join("sshd_config");
    std::fs::write(&main, text)?;
    Ok(main)
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
    }

    fn with_base(support: Option<&KexSupport>, base: &str) -> KexPlan {
        plan(&KexInputs {
            support,
            base: Some(base),
            fips: false,
        })
    }

    #[test]
    fn nothing_is_added_where_it_is_offered_impossible_or_not_allowed() {
        let holds = support("OpenSSH_9.2p1", &format!("sntrup761x25519-sha512@openssh.com,{POLICY}"));
        let old = support("OpenSSH_8.4p1 Debian-5+deb11u3, OpenSSL 1.1.1w", POLICY);
        let with = |s, base, fips| {
            plan(&KexInputs {
                support: Some(s),
                base: Some(base),
                fips,
            })
        };
        let offered = with(&holds, "sntrup761x25519-sha512@openssh.com,curve25519-sha256", false);
        assert_eq!((offered.report.status, offered.line), (KexStatus::Offered, None));
        let unsupported = with(&old, POLICY, false);
        assert_eq!(unsupported.report.status, KexStatus::Unsupported);
        assert!(unsupported.report.upgrade.unwrap().contains("Debian 12"));
        assert_eq!(with(&holds, POLICY, true).report.status, KexStatus::Fips);
        let no_x25519 = with(&holds, "ecdh-sha2-nistp256,diffie-hellman-group14-sha256", false);
        assert_eq!(no_x25519.report.status, KexStatus::PolicyForbids);
        for p in [unsupported.line, no_x25519.line] {
            assert_eq!(p, None);
        }
        let unknown = plan(&KexInputs {
            support: Some(&holds),
            base: None,
            fips: false,
        });
        assert_eq!((unknown.report.status, unknown.line), (KexStatus::Unknown, None));
        // A list with a hybrid needs no word of what sshd accepts (not
        // asked then), and one without it cannot do without.
        let offered_unasked = with_base(None, "sntrup761x25519-sha512@openssh.com,curve25519-sha256");
        assert_eq!(offered_unasked.report.status, KexStatus::Offered);
        assert_eq!(with_base(None, POLICY).report.status, KexStatus::Unknown);
    }

    #[test]
    fn the_trial_config_leaves_hostkeyctls_settings_out_and_points_at_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        let ssh = dir.path().join("ssh");
        std::fs::create_dir_all(ssh.join("sshd_config.d")).unwrap();
        std::fs::write(ssh.join("sshd_config.d/00-hostkeyctl.conf"), "KexAlgorithms old\n").unwrap();
        std::fs::write(ssh.join("sshd_config.d/40-site.conf"), "KexAlgorithms +x\n").unwrap();
        let main = format!("Include {}/sshd_config.d/*.conf\nPort 22\n", ssh.display());
        let drop_in = super::super::sshd_config::Placement::DropIn(ssh.join("sshd_config.d/00-hostkeyctl.conf"));
        let scratch = dir.path().join("scratch");
        let trial = trial_config(&ssh, &drop_in, &main, &scratch, None).unwrap();
        let text = std::fs::read_to_string(&trial).unwrap();
        assert!(
            text.starts_with(&format!("Include {}/*.conf", scratch.join("sshd_config.d").display())),
            "{text}"
        );
        assert!(!scratch.join("sshd_config.d/00-hostkeyctl.conf").exists());
        assert!(scratch.join("sshd_config.d/40-site.conf").exists());
        trial_config(&ssh, &drop_in, &main, &scratch, Some("a,b")).unwrap();
        let ours = std::fs::read_to_string(scratch.join("sshd_config.d/00-hostkeyctl.conf")).unwrap();
        assert_eq!(ours, "KexAlgorithms a,b\n");
        // Inline: the line goes first in the main config's copy.
        let inline = super::super::sshd_config::Placement::Inline(ssh.join("sshd_config"));
        let trial = trial_config(&ssh, &inline, "Port 22\n", &scratch, Some("a")).unwrap();
        assert!(std::fs::read_to_string(trial).unwrap().starts_with("KexAlgorithms a\n"));
    }
}
