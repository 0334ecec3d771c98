//! The instance metadata service, for root alone (issue 56).
//!
//! Whoever reaches the metadata service holds the instance's role, and a
//! login node's role reads the key set's private keys: every login user
//! could otherwise fetch the fleet's identity with one `curl`. AWS's
//! answer is a netfilter owner match on the node ("Limit access to the
//! Instance Metadata Service", EC2 User Guide: `iptables --append OUTPUT
//! --proto tcp --destination 169.254.169.254 --match owner ! --uid-owner
//! root --jump REJECT`). hostkeyctl keeps that rule in a chain of its own
//! ([`CHAIN`]), for IPv4 (169.254.169.254) and the Nitro IPv6 endpoint
//! (fd00:ec2::254):
//!
//! - the chain is written with `iptables-restore --noflush` in one
//!   transaction, so it is never seen empty (open) while it is replaced;
//! - the jump from `OUTPUT` is kept first, so no earlier rule lets a
//!   connection past it;
//! - root, and the users named (a CloudWatch agent that runs as its own
//!   user, say), return from the chain; every other packet to the address
//!   is rejected (a TCP reset: a client fails at once, never hangs);
//! - what is applied is read back (`iptables -S`) and checked.
//!
//! Netfilter rules do not survive a reboot, nor a firewall manager's
//! reload: `hostkeyctl-imds-guard.service` applies them at every boot,
//! after the firewall services, and `imds-guard --check` says whether a
//! node is guarded now.

pub mod boot;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// hostkeyctl's chain.
pub const CHAIN: &str = "HOSTKEYCTL-IMDS";

/// The user EC2 Instance Connect's `AuthorizedKeysCommand` runs as (the
/// `ec2-instance-connect` package of Amazon Linux and Ubuntu), which asks
/// the metadata service for the instance's identity: allowed whenever it
/// exists.
pub const INSTANCE_CONNECT_USER: &str = "ec2-instance-connect";

/// The metadata service's two addresses, and the tools for each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// 169.254.169.254 (`iptables`).
    Ipv4,
    /// fd00:ec2::254, Nitro instances with the IPv6 endpoint (`ip6tables`).
    Ipv6,
}

impl Family {
    /// Both.
    pub const ALL: [Family; 2] = [Family::Ipv4, Family::Ipv6];

    /// The metadata service's address, as a host route.
    pub fn destination(self) -> &'static str {
        match self {
            Family::Ipv4 => "169.254.169.254/32",
            Family::Ipv6 => "fd00:ec2::254/128",
        }
    }

    fn tool(self) -> &'static str {
        match self {
            Family::Ipv4 => "iptables",
            Family::Ipv6 => "ip6tables",
        }
    }
}

/// What to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Root alone, and these uids, reach the service.
    Restrict(Vec<u32>),
    /// Remove the rule: every user reaches it (the opt-out).
    Open,
    /// Say what is in place, change nothing.
    Check,
}

/// One family's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    /// Only root and `allowed` reach the service.
    RootOnly {
        /// The uids besides root.
        allowed: Vec<u32>,
    },
    /// Every user reaches the service.
    Open,
    /// IPv6 is off on this node (no `/proc/net/if_inet6`): nothing reaches
    /// the IPv6 endpoint.
    Ipv6Off,
}

impl State {
    /// Its name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            State::RootOnly { .. } => "root_only",
            State::Open => "open",
            State::Ipv6Off => "ipv6_off",
        }
    }
}

/// What a run found or left, per family: `{"family", "destination",
/// "state", "allowed"}` in JSON (written by hand: serde's flattening would
/// cost the node build more than its 10 MB budget has left).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FamilyReport {
    /// Which address.
    pub family: Family,
    /// The address.
    pub destination: &'static str,
    /// Its state now.
    pub state: State,
}

impl serde::Serialize for FamilyReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let mut out = serializer.serialize_struct("FamilyReport", 4)?;
        out.serialize_field("family", &self.family)?;
        out.serialize_field("destination", self.destination)?;
        out.serialize_field("state", self.state.name())?;
        let none = Vec::new();
        let allowed = match &self.state {
            State::RootOnly { allowed } => allowed,
            _ => &none,
        };
        out.serialize_field("allowed", allowed)?;
        out.end()
    }
}

/// Who reaches the metadata service, in one word (what `install --check`
/// reports and `doctor` reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Access {
    /// Root (and the users allowed) alone, on every address.
    RootOnly,
    /// hostkeyctl's guard is not in place on at least one address.
    Open,
    /// No iptables on the node: no guard can be there.
    NoIptables,
    /// The rules could not be read (no `CAP_NET_ADMIN`, the xtables lock
    /// held); a later release's word reads as this too.
    #[serde(other)]
    Unknown,
}

/// Who reaches the metadata service now, changing nothing. A read waits
/// at most 2 s for the xtables lock (the check it rides on has its own
/// deadline); a lock held longer is `Unknown`.
pub fn access(tables: &Tables) -> Access {
    let tables = Tables {
        wait: "2",
        ..tables.clone()
    };
    match run(&tables, &Action::Check) {
        Ok(reports) if reports.iter().any(|r| r.state == State::Open) => Access::Open,
        Ok(_) => Access::RootOnly,
        Err(GuardError::NoIptables(_)) => Access::NoIptables,
        Err(_) => Access::Unknown,
    }
}

/// Why the guard could not be applied or read.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// iptables (or ip6tables, with IPv6 on) is not installed.
    #[error(
        "{0} is missing: install iptables (or iptables-nft) and run again, or set HOSTKEYCTL_IMDS=open to leave the metadata service, and the key set, open to every user"
    )]
    NoIptables(String),
    /// A user to allow does not exist.
    #[error("--allow-user {0}: no such user on this node (getent passwd finds none)")]
    NoUser(String),
    /// A tool failed.
    #[error(
        "{command} failed ({status}): {stderr}; the metadata service may be open until `hostkeyctl imds-guard` succeeds"
    )]
    Tool {
        /// What was run.
        command: String,
        /// Its exit status.
        status: String,
        /// What it said.
        stderr: String,
    },
    /// What was applied did not read back.
    #[error("{family:?}: {CHAIN} reads back as {found:?}, not root-only: another firewall manager may own OUTPUT")]
    NotApplied {
        /// Which family.
        family: Family,
        /// What was read.
        found: State,
    },
}

impl crate::exit::ExitStatus for GuardError {
    /// Every failure is the node's configuration: 2.
    fn status(&self) -> crate::exit::Status {
        crate::exit::Status::Usage
    }
}

/// The netfilter tools, found where root's PATH and the sbin directories
/// have them (a systemd unit's PATH may lack sbin).
#[derive(Clone, Debug)]
pub struct Tables {
    dirs: Vec<PathBuf>,
    /// `-w`: seconds to wait for the xtables lock.
    wait: &'static str,
}

impl Default for Tables {
    fn default() -> Self {
        let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        for d in ["/usr/sbin", "/sbin", "/usr/bin", "/bin"] {
            dirs.push(PathBuf::from(d));
        }
        Tables { dirs, wait: "30" }
    }
}

impl Tables {
    fn find(&self, name: &str) -> Option<PathBuf> {
        // `-w` (30 s; 2 for `access`): a stuck xtables lock fails the run,
        // never hangs a boot ordered before user sessions.
        self.dirs.iter().map(|d| d.join(name)).find(|p| p.is_file())
    }

    fn run(&self, family: Family, suffix: &str, args: &[&str], stdin: Option<&str>) -> Result<String, GuardError> {
        let name = format!("{}{suffix}", family.tool());
        let path = self.find(&name).ok_or_else(|| GuardError::NoIptables(name.clone()))?;
        let mut child = Command::new(&path)
            .args(args)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| tool_error(&name, args, &e.to_string(), ""))?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes())
                .map_err(|e| tool_error(&name, args, &e.to_string(), ""))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| tool_error(&name, args, &e.to_string(), ""))?;
        if !out.status.success() {
            return Err(tool_error(
                &name,
                args,
                &out.status.to_string(),
                &String::from_utf8_lossy(&out.stderr),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Whether this family's tool is here (iptables must be; ip6tables
    /// may not).
    fn has(&self, family: Family) -> bool {
        self.find(family.tool()).is_some()
    }
}

fn tool_error(name: &str, args: &[&str], status: &str, stderr: &str) -> GuardError {
    GuardError::Tool {
        command: format!("{name} {}", args.join(" ")),
        status: status.to_owned(),
        stderr: crate::escape::escape(stderr.trim()),
    }
}

/// The uid of a user name or number (NSS: `getent passwd`, so directory
/// users resolve as they do for the kernel).
pub fn uid_of(user: &str) -> Result<u32, GuardError> {
    if let Ok(uid) = user.parse::<u32>() {
        return Ok(uid);
    }
    let out = Command::new("getent")
        .args(["passwd", user])
        .output()
        .map_err(|_| GuardError::NoUser(crate::escape::escape(user)))?;
    String::from_utf8_lossy(&out.stdout)
        .split(':')
        .nth(2)
        .and_then(|u| u.trim().parse().ok())
        .filter(|_| out.status.success())
        .ok_or_else(|| GuardError::NoUser(crate::escape::escape(user)))
}

/// The `iptables-restore --noflush` input that replaces [`CHAIN`] in one
/// transaction (a chain declared in the input is flushed and refilled
/// atomically), removes `stale_jumps` jumps to it and, when `jump` is set,
/// puts the jump first in `OUTPUT`.
pub fn restore_input(family: Family, allowed: &[u32], stale_jumps: usize, jump: bool) -> String {
    let mut out = format!("*filter\n:{CHAIN} - [0:0]\n");
    // Jumps elsewhere in OUTPUT go in the same transaction (a rule number
    // read before it could name another tool's rule by then).
    for _ in 0..stale_jumps {
        out.push_str(&format!("-D OUTPUT -d {} -j {CHAIN}\n", family.destination()));
    }
    for uid in std::iter::once(&0).chain(allowed.iter().filter(|u| **u != 0)) {
        out.push_str(&format!("-A {CHAIN} -m owner --uid-owner {uid} -j RETURN\n"));
    }
    out.push_str(&format!("-A {CHAIN} -p tcp -j REJECT --reject-with tcp-reset\n"));
    out.push_str(&format!("-A {CHAIN} -j REJECT\n"));
    if jump {
        out.push_str(&format!("-I OUTPUT 1 -d {} -j {CHAIN}\n", family.destination()));
    }
    out.push_str("COMMIT\n");
    out
}

/// The state `iptables -S OUTPUT` and `iptables -S CHAIN` show: root-only
/// when the first `OUTPUT` rule jumps to the chain for the address, and
/// the chain returns for root (and some uids) and ends rejecting
/// everything else.
pub fn state_of(family: Family, output: &str, chain: Option<&str>) -> State {
    let jump = jump_rule(family);
    let first_is_jump = output.lines().find(|l| l.starts_with("-A OUTPUT ")) == Some(jump.as_str());
    let Some(chain) = chain.filter(|_| first_is_jump) else {
        return State::Open;
    };
    // Only hostkeyctl's own rules: a RETURN on any other match (a group, a
    // negation, a protocol) or a jump elsewhere would let users past.
    let rules: Vec<&str> = chain.lines().filter(|l| l.starts_with("-A ")).collect();
    let owner = format!("-A {CHAIN} -m owner --uid-owner ");
    let tcp_reset = format!("-A {CHAIN} -p tcp -j REJECT --reject-with tcp-reset");
    let reject = format!("-A {CHAIN} -j REJECT");
    let mut uids = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        let last = i + 1 == rules.len();
        if let Some(uid) = rule
            .strip_prefix(&owner)
            .and_then(|r| r.strip_suffix(" -j RETURN"))
            .and_then(|u| u.parse::<u32>().ok())
        {
            uids.push(uid);
            continue;
        }
        let final_reject = last && (*rule == reject || rule.starts_with(&format!("{reject} --reject-with ")));
        if *rule != tcp_reset && !final_reject {
            return State::Open;
        }
    }
    let ends_rejecting = rules.last().is_some_and(|l| l.starts_with(&reject));
    if !uids.contains(&0) || !ends_rejecting {
        return State::Open;
    }
    uids.retain(|u| *u != 0);
    State::RootOnly { allowed: uids }
}

fn jump_rule(family: Family) -> String {
    format!("-A OUTPUT -d {} -j {CHAIN}", family.destination())
}

/// How a run ends: a check that finds the service open to every user is
/// drift (exit 1); anything else that returned is success.
pub fn verdict(action: &Action, reports: &[FamilyReport]) -> crate::exit::Status {
    if *action == Action::Check && reports.iter().any(|r| r.state == State::Open) {
        crate::exit::Status::Drift
    } else {
        crate::exit::Status::Success
    }
}

/// Applies `action` to both families and reports each one's state after.
/// iptables must be here for any action (without it nothing can be told);
/// ip6tables too, unless IPv6 is off on this node.
pub fn run(tables: &Tables, action: &Action) -> Result<Vec<FamilyReport>, GuardError> {
    let mut reports = Vec::new();
    for family in Family::ALL {
        let state = if family == Family::Ipv6 && !std::path::Path::new("/proc/net/if_inet6").exists() {
            State::Ipv6Off
        } else {
            if !tables.has(family) {
                return Err(GuardError::NoIptables(family.tool().to_owned()));
            }
            match action {
                Action::Restrict(allowed) => restrict(tables, family, allowed)?,
                Action::Open => open(tables, family)?,
                Action::Check => read(tables, family)?,
            }
        };
        reports.push(FamilyReport {
            family,
            destination: family.destination(),
            state,
        });
    }
    Ok(reports)
}

fn read(tables: &Tables, family: Family) -> Result<State, GuardError> {
    let output = tables.run(family, "", &["-w", tables.wait, "-S", "OUTPUT"], None)?;
    // No chain yet: `-S CHAIN` fails, which is "open", not an error.
    let chain = tables.run(family, "", &["-w", tables.wait, "-S", CHAIN], None).ok();
    Ok(state_of(family, &output, chain.as_deref()))
}

fn restrict(tables: &Tables, family: Family, allowed: &[u32]) -> Result<State, GuardError> {
    let output = tables.run(family, "", &["-w", tables.wait, "-S", "OUTPUT"], None)?;
    let jump = jump_rule(family);
    let rules: Vec<&str> = output.lines().filter(|l| l.starts_with("-A OUTPUT ")).collect();
    let jumps = rules.iter().filter(|l| **l == jump).count();
    let in_place = rules.first() == Some(&jump.as_str()) && jumps == 1;
    let (stale, insert) = if in_place { (0, false) } else { (jumps, true) };
    tables.run(
        family,
        "-restore",
        &["-w", tables.wait, "--noflush"],
        Some(&restore_input(family, allowed, stale, insert)),
    )?;
    let state = read(tables, family)?;
    let want: Vec<u32> = allowed.iter().copied().filter(|u| *u != 0).collect();
    match &state {
        State::RootOnly { allowed } if *allowed == want => Ok(state),
        _ => Err(GuardError::NotApplied { family, found: state }),
    }
}

fn open(tables: &Tables, family: Family) -> Result<State, GuardError> {
    let jump = ["-d", family.destination(), "-j", CHAIN];
    while tables
        .run(
            family,
            "",
            &[&["-w", tables.wait, "-C", "OUTPUT"][..], &jump[..]].concat(),
            None,
        )
        .is_ok()
    {
        tables.run(
            family,
            "",
            &[&["-w", tables.wait, "-D", "OUTPUT"][..], &jump[..]].concat(),
            None,
        )?;
    }
    if tables.run(family, "", &["-w", tables.wait, "-S", CHAIN], None).is_ok() {
        tables.run(family, "", &["-w", tables.wait, "-F", CHAIN], None)?;
        tables.run(family, "", &["-w", tables.wait, "-X", CHAIN], None)?;
    }
    read(tables, family)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_restore_input_returns_for_root_and_the_allowed_then_rejects() {
        let input = restore_input(Family::Ipv4, &[0, 998], 0, true);
        assert_eq!(
            input,
            "*filter\n:HOSTKEYCTL-IMDS - [0:0]\n\
             -A HOSTKEYCTL-IMDS -m owner --uid-owner 0 -j RETURN\n\
             -A HOSTKEYCTL-IMDS -m owner --uid-owner 998 -j RETURN\n\
             -A HOSTKEYCTL-IMDS -p tcp -j REJECT --reject-with tcp-reset\n\
             -A HOSTKEYCTL-IMDS -j REJECT\n\
             -I OUTPUT 1 -d 169.254.169.254/32 -j HOSTKEYCTL-IMDS\nCOMMIT\n"
        );
        assert!(!restore_input(Family::Ipv6, &[], 0, false).contains("OUTPUT"));
        assert!(restore_input(Family::Ipv6, &[], 0, true).contains("-d fd00:ec2::254/128"));
        let moved = restore_input(Family::Ipv4, &[], 2, true);
        assert_eq!(
            moved
                .matches("-D OUTPUT -d 169.254.169.254/32 -j HOSTKEYCTL-IMDS\n")
                .count(),
            2
        );
        assert!(moved.find("-D OUTPUT").unwrap() < moved.find("-I OUTPUT 1").unwrap());
    }

    #[test]
    fn a_guard_is_read_as_root_only_only_when_whole_and_first() {
        let chain = "-N HOSTKEYCTL-IMDS\n\
            -A HOSTKEYCTL-IMDS -m owner --uid-owner 0 -j RETURN\n\
            -A HOSTKEYCTL-IMDS -m owner --uid-owner 998 -j RETURN\n\
            -A HOSTKEYCTL-IMDS -p tcp -j REJECT --reject-with tcp-reset\n\
            -A HOSTKEYCTL-IMDS -j REJECT --reject-with icmp-port-unreachable\n";
        let first = "-P OUTPUT ACCEPT\n-A OUTPUT -d 169.254.169.254/32 -j HOSTKEYCTL-IMDS\n-A OUTPUT -o lo -j ACCEPT\n";
        assert_eq!(
            state_of(Family::Ipv4, first, Some(chain)),
            State::RootOnly { allowed: vec![998] }
        );
        let behind = "-P OUTPUT ACCEPT\n-A OUTPUT -j ACCEPT\n-A OUTPUT -d 169.254.169.254/32 -j HOSTKEYCTL-IMDS\n";
        assert_eq!(
            state_of(Family::Ipv4, behind, Some(chain)),
            State::Open,
            "a rule above it"
        );
        assert_eq!(state_of(Family::Ipv4, first, None), State::Open, "no chain");
        let no_reject: String = chain.lines().take(3).map(|l| format!("{l}\n")).collect();
        assert_eq!(state_of(Family::Ipv4, first, Some(&no_reject)), State::Open);
        for loose in [
            chain.replace("--uid-owner 998 -j RETURN", "--uid-owner 998 -j ACCEPT"),
            chain.replace(
                "-m owner --uid-owner 998 -j RETURN",
                "-m owner --gid-owner 100 -j RETURN",
            ),
            chain.replace(
                "-m owner --uid-owner 998 -j RETURN",
                "-m owner ! --uid-owner 5 -j RETURN",
            ),
            chain.replace("-m owner --uid-owner 998 -j RETURN", "-p tcp -j RETURN"),
            chain.replace("-m owner --uid-owner 998 -j RETURN", "-j ELSEWHERE"),
        ] {
            assert_eq!(state_of(Family::Ipv4, first, Some(&loose)), State::Open, "{loose}");
        }
        let negated = first.replace("-A OUTPUT -d", "-A OUTPUT ! -d");
        assert_eq!(
            state_of(Family::Ipv4, &negated, Some(chain)),
            State::Open,
            "a negated jump"
        );
        let narrowed = first.replace("-A OUTPUT -d", "-A OUTPUT -o eth1 -d");
        assert_eq!(
            state_of(Family::Ipv4, &narrowed, Some(chain)),
            State::Open,
            "one interface"
        );
        assert_eq!(
            state_of(Family::Ipv6, first, Some(chain)),
            State::Open,
            "the other address"
        );
    }

    #[test]
    fn users_resolve_by_number_or_name() {
        assert_eq!(uid_of("998").unwrap(), 998);
        assert_eq!(uid_of("root").unwrap(), 0);
        assert!(matches!(uid_of("no-such-user-hk"), Err(GuardError::NoUser(_))));
    }
}
