//! The notice an admin sends users for the phase the fleet is in: `rotate`
//! prints it after a run, `status` for the phase it reads. What each client
//! needs and why is docs/clients.md; this is what to tell its users.
//!
//! The notice names the host users connect to as `LOGIN_HOST` (hostkeyctl
//! does not know it) and lists the files to attach, with the commands that
//! make them.

use serde::Serialize;

use crate::ids::SecretId;

/// The phase a notice is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// One set, nothing in flight: the fleet's identity.
    Steady,
    /// A new set is offered beside the current one, not yet promoted.
    Announced,
    /// A new set was just promoted.
    Promoted,
}

/// What to send users, and the files to attach.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Notice {
    /// The phase it is for.
    pub phase: Phase,
    /// The message, with `LOGIN_HOST` for the name users ssh to.
    pub text: String,
    /// The attachments: each a command that writes one.
    pub attach: Vec<String>,
}

/// The notice for `phase`. The attachments' command lines name the secret
/// through [`crate::shell::quote`], the one quoting function: an admin
/// pastes them into a shell.
pub fn for_phase(phase: Phase, secret: &SecretId) -> Notice {
    // A secret id holds no NUL byte (its grammar), so it always quotes.
    let secret = crate::shell::quote(secret.as_str()).unwrap_or_default();
    let known_hosts = format!("hostkeyctl known-hosts --secret-id {secret} --host LOGIN_HOST > known_hosts");
    let ssh_config = "hostkeyctl known-hosts --host LOGIN_HOST --ssh-config > ssh_config".to_owned();
    let per_client = format!(
        "hostkeyctl known-hosts --secret-id {secret} --host LOGIN_HOST --client CLIENT > CLIENT_FILE (CLIENT: putty, paramiko or dropbear)"
    );
    let every_key = format!(
        "hostkeyctl known-hosts --secret-id {secret} --host LOGIN_HOST --client CLIENT > CLIENT_FILE (CLIENT: asyncssh; for plink: --client plink)"
    );
    let (text, attach) = match phase {
        Phase::Steady => (
            "The login nodes behind LOGIN_HOST share one SSH host identity. If you see a host key warning for LOGIN_HOST once more: remove the old entries (`ssh-keygen -R LOGIN_HOST`) and add the attached known_hosts line. From now on, a host key warning for LOGIN_HOST is real: report it, do not accept it. PuTTY, Paramiko and Dropbear users: use the attached file for your client.".to_owned(),
            vec![known_hosts, per_client],
        ),
        Phase::Announced => (
            "The login nodes behind LOGIN_HOST will switch to new SSH host keys. OpenSSH users (Linux, macOS, Windows' built-in client): add the attached ssh_config block to ~/.ssh/config (%USERPROFILE%\\.ssh\\config on Windows) once, then log in once before the switch: ssh learns the new keys by itself. AsyncSSH and plink users: use the attached file now; it holds both sets. PuTTY, Paramiko and Dropbear users: nothing to do now; you will get a new file at the switch. A host key warning for LOGIN_HOST before then is not expected: report it.".to_owned(),
            vec![ssh_config, every_key],
        ),
        Phase::Promoted => (
            "The login nodes behind LOGIN_HOST now serve new SSH host keys. If you logged in with OpenSSH during the announcement, nothing changes for you. If ssh says REMOTE HOST IDENTIFICATION HAS CHANGED for LOGIN_HOST: remove the old entries (`ssh-keygen -R LOGIN_HOST`) and add the attached known_hosts line, from this message only. PuTTY, Paramiko and Dropbear users: replace your file with the attached one.".to_owned(),
            vec![known_hosts, per_client],
        ),
    };
    Notice { phase, text, attach }
}

impl Notice {
    /// The notice as text lines: the message, then what to attach.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec!["notice for users (replace LOGIN_HOST with the name they ssh to):".to_owned()];
        out.push(format!("  {}", self.text));
        for a in &self.attach {
            out.push(format!("  attach: {a}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> SecretId {
        "hostkeys/c".parse().unwrap()
    }

    #[test]
    fn each_phase_tells_each_client_what_to_do() {
        let announced = for_phase(Phase::Announced, &secret());
        assert!(announced.text.contains("Windows"), "{}", announced.text);
        assert!(announced.attach.iter().any(|a| a.contains("--ssh-config")));
        let promoted = for_phase(Phase::Promoted, &secret());
        assert!(promoted.text.contains("ssh-keygen -R LOGIN_HOST"), "{}", promoted.text);
        assert!(
            promoted
                .attach
                .iter()
                .any(|a| a.contains("--client CLIENT > CLIENT_FILE (CLIENT: putty"))
        );
        assert!(
            announced.attach.iter().any(|a| a.contains("asyncssh")),
            "AsyncSSH users fetch during the overlap"
        );
        assert!(promoted.attach.iter().all(|a| a.contains("--secret-id hostkeys/c")));
        let steady = for_phase(Phase::Steady, &secret());
        assert!(steady.text.contains("report it"), "{}", steady.text);
        assert_eq!(steady.lines().len(), 1 + 1 + steady.attach.len());
    }
}
