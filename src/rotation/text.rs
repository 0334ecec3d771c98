//! A rotation's report as people read it (`rotate --output table`): the
//! nodes the test step found wrong, the stages at the end, what clients'
//! users fetch, and what to revoke.

use super::{Outcome, Report};
use crate::audit::Verdict;
use crate::fingerprint::Fingerprint;
use crate::ids::SecretId;

impl Report {
    /// The report as text (the push's table, when there was one, is
    /// printed before it).
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        for (node, findings) in &self.audit {
            for f in findings.iter().filter(|f| f.status != Verdict::Ok) {
                out.push(format!(
                    "{}: {} {:?} (expected {}, served {})",
                    crate::escape::escape(node),
                    f.key_type,
                    f.status,
                    f.expected.as_ref().map_or("-", Fingerprint::as_str),
                    f.served
                        .as_ref()
                        .map(Fingerprint::as_str)
                        .or(f.detail.as_deref())
                        .unwrap_or("-")
                ));
            }
        }
        let result = self
            .result
            .and_then(|r| serde_json::to_value(r).ok())
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        out.push(format!("rotation of {}: {result}", self.secret));
        out.push(format!("  AWSCURRENT  {}", self.current_version));
        if let Some(p) = &self.pending_version {
            out.push(format!("  AWSPENDING  {p}"));
        }
        if let Some(p) = &self.previous_version {
            out.push(format!("  AWSPREVIOUS {p}"));
        }
        if let Some(clients) = &self.clients {
            out.push(format!("clients: {clients} (docs/clients.md)"));
        }
        if let Some(notice) = &self.user_notice {
            out.extend(notice.lines());
        }
        if let Some(advice) = &self.revocation {
            out.push(format!(
                "revoke: {} retired key(s) keep valid certificates until {}; clients that trust the CA accept them until then. Distribute `hostkeyctl known-hosts --secret-id {secret} --host PATTERN --revoked` (@revoked lines for known_hosts) or `hostkeyctl known-hosts --secret-id {secret} --krl FILE` (for RevokedHostKeys) to those clients now",
                advice.retired.len(),
                advice.until,
                secret = self.secret
            ));
            for r in &advice.retired {
                out.push(format!(
                    "  {} {} (version {})",
                    r.algorithm, r.fingerprint, r.version_id
                ));
            }
        }
        out.push(String::new());
        out.join("\n")
    }
}

/// The notice for users after a run ended in `outcome`, if it announced
/// or promoted a set.
pub fn user_notice(outcome: Outcome, secret: &SecretId) -> Option<crate::notice::Notice> {
    use crate::notice::{Phase, for_phase};
    match outcome {
        Outcome::OverlapStarted | Outcome::Announced => Some(for_phase(Phase::Announced, secret)),
        // Not while nodes still serve the old set: strict clients given the
        // new file would fail there. `status` has the notice once they do.
        Outcome::Rotated | Outcome::Completed => Some(for_phase(Phase::Promoted, secret)),
        _ => None,
    }
}

/// What clients' users fetch after a run ended in `outcome` (printed by
/// `rotate`, docs/clients.md), if anything.
pub fn client_advice(outcome: Outcome, secret: &SecretId) -> Option<String> {
    match outcome {
        Outcome::OverlapStarted | Outcome::Announced => Some(format!(
            "a new set is announced: OpenSSH users learn it at their next login (UpdateHostKeys, with `hostkeyctl known-hosts --host NAME --ssh-config`); AsyncSSH and plink users fetch theirs now (`hostkeyctl known-hosts --secret-id {secret} --client asyncssh|plink`); Paramiko, Dropbear and PuTTY's cache keep one key per host and type: theirs stay right until the promotion, then are fetched again"
        )),
        Outcome::Rotated | Outcome::Completed => Some(format!(
            "the new set is promoted and served: Paramiko, Dropbear and PuTTY's cache keep one key per host and type, so their users fetch their files again now (`hostkeyctl known-hosts --secret-id {secret} --host NAME --client paramiko|dropbear|putty`)"
        )),
        Outcome::NotConverged | Outcome::Converging => Some(format!(
            "the new set is promoted, not yet served everywhere: once every node serves it, Paramiko, Dropbear and PuTTY's cache users fetch their files again (`hostkeyctl known-hosts --secret-id {secret} --host NAME --client paramiko|dropbear|putty`)"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notice::Phase;

    /// No "promoted" notice (replace your client files) while nodes still
    /// serve the old set: strict clients given the new file would fail
    /// there.
    #[test]
    fn users_are_told_of_a_promotion_only_once_it_is_served() {
        let secret: SecretId = "hostkeys/c".parse().unwrap();
        let phase = |o| user_notice(o, &secret).map(|n| n.phase);
        assert_eq!(phase(Outcome::Rotated), Some(Phase::Promoted));
        assert_eq!(phase(Outcome::OverlapStarted), Some(Phase::Announced));
        assert_eq!(phase(Outcome::Converging), None);
        assert_eq!(phase(Outcome::NotConverged), None);
    }
}
