//! Exit codes: the CLI-wide contract scripts rely on (see README).
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success; the fleet is consistent |
//! | 1 | drift found (audit, `install --check`) |
//! | 2 | usage or configuration error, bad input |
//! | 3 | incomplete: some targets failed, timed out or were unreachable |
//! | 4 | AWS error: access denied, not found, throttled, unreachable |
//! | 5 | install failed and its rollback failed too: the node needs attention |
//! | 6 | install: the keys converged, but the set's certificates need renewal (expired or not yet valid, left out) |

use std::fmt;

/// How a command ended, as an exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// 0: success.
    Success,
    /// 1: drift found.
    Drift,
    /// 2: usage, configuration or input error.
    Usage,
    /// 3: some targets failed or could not be reached.
    Incomplete,
    /// 4: an AWS service refused or could not be reached.
    Aws,
    /// 5: an install failed and so did its rollback; the node needs a human.
    RollbackFailed,
    /// 6: the keys converged, but some of the set's certificates are
    /// expired or not yet valid and were left out: renew them.
    CertificatesNeedRenewal,
}

impl Status {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Status::Success => 0,
            Status::Drift => 1,
            Status::Usage => 2,
            Status::Incomplete => 3,
            Status::Aws => 4,
            Status::RollbackFailed => 5,
            Status::CertificatesNeedRenewal => 6,
        }
    }
}

/// A command's failure: the error to print and the exit status it maps to.
pub struct Failure {
    /// Exit status.
    pub status: Status,
    /// The error with its cause chain.
    pub error: anyhow::Error,
}

impl Failure {
    /// A usage, configuration or bad-input failure (exit 2).
    pub fn usage(error: impl Into<anyhow::Error>) -> Self {
        Failure {
            status: Status::Usage,
            error: error.into(),
        }
    }

    /// A failure with an explicit status.
    pub fn with_status(status: Status, error: impl Into<anyhow::Error>) -> Self {
        Failure {
            status,
            error: error.into(),
        }
    }
}

/// An error, or a flow's outcome, that knows the exit status it means:
/// the command layer maps nothing by hand.
pub trait ExitStatus {
    /// The exit status.
    fn status(&self) -> Status;
}

impl<E> From<E> for Failure
where
    E: ExitStatus + std::error::Error + Send + Sync + 'static,
{
    fn from(error: E) -> Self {
        Failure {
            status: error.status(),
            error: error.into(),
        }
    }
}

impl Failure {
    /// The error and its causes, each said once: a cause whose text the
    /// message holds already (an error that quotes its source) is not
    /// repeated, as `{:#}` would.
    pub fn message(&self) -> String {
        causes(self.error.chain())
    }
}

/// Errors' texts joined by ": ", each skipped when the text so far holds it.
pub fn causes<'a>(chain: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>) -> String {
    let mut out = String::new();
    for cause in chain {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} ({:#})", self.status, self.error)
    }
}

/// The documented exit codes, for `--help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success; the fleet is consistent
  1  drift found (audit, install --check)
  2  usage or configuration error, bad input
  3  incomplete: some targets failed, timed out or were unreachable
  4  AWS error: access denied, not found, throttled, unreachable
  5  install failed and its rollback failed too: the node needs attention
  6  install: the keys converged, but a certificate of the set is expired
     or not yet valid and was left out: renew it (hostkeyctl sign)";
