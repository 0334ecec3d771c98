//! The connection budget itself: how many unauthenticated connections a
//! server may see from this host, and when the next may go.

use super::*;
use std::collections::BTreeMap;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::scan::{Answer, Handshake, Prober};

/// Connections a server may be owed at once (its `min` is 15 s of 1 s each).
pub const BURST: f64 = 10.0;
/// Connections a server forgives per second.
pub const RATE: f64 = 1.0;
/// The environment variable naming the ledger's directory; empty keeps the
/// ledger in the process.
pub const DIR_ENV: &str = "HOSTKEYCTL_PACING_DIR";
/// The ledger's directory for root.
pub const ROOT_DIR: &str = "/run/hostkeyctl/pacing";

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What this process knows of one endpoint.
#[derive(Debug, Default)]
struct Entry {
    /// The budget, when the ledger is in the process and the endpoint is
    /// known to penalize.
    budget: Option<Budget>,
    /// Connections made before the endpoint was known to penalize: owed,
    /// but not yet booked.
    unbooked: usize,
    /// Backends the endpoint spreads over, if a load balancer.
    backends: usize,
    /// Whether this process has booked the endpoint as penalizing.
    registered: bool,
}

/// What a source owes each server known to penalize: in the process, or
/// shared through a directory with every process on the host.
#[derive(Debug, Default)]
pub struct Ledger {
    dir: Option<PathBuf>,
    /// Set once the directory failed: the ledger goes on in the process.
    dir_failed: AtomicBool,
    entries: Mutex<BTreeMap<(String, u16), Entry>>,
}

impl Ledger {
    /// A ledger of this process alone.
    pub fn in_memory() -> Self {
        Ledger::default()
    }

    /// A ledger shared through `dir` (which must exist, private to this
    /// user) with every process that uses it.
    pub fn shared(dir: PathBuf) -> Self {
        Ledger {
            dir: Some(dir),
            ..Ledger::default()
        }
    }

    /// The ledger hostkeyctl's commands use: in [`DIR_ENV`] if set (empty:
    /// in the process), else [`ROOT_DIR`] for root and
    /// `$XDG_RUNTIME_DIR/hostkeyctl/pacing` for another user. A directory
    /// that cannot be made, or is not this user's alone, leaves the ledger
    /// in the process, with a warning: pacing per process is what it was.
    pub fn for_this_user() -> Self {
        let dir = match std::env::var_os(DIR_ENV) {
            Some(d) if d.is_empty() => None,
            Some(d) => Some(PathBuf::from(d)),
            None if rustix::process::geteuid().is_root() => Some(PathBuf::from(ROOT_DIR)),
            None => std::env::var_os("XDG_RUNTIME_DIR").map(|d| PathBuf::from(d).join("hostkeyctl/pacing")),
        };
        let Some(dir) = dir else {
            return Ledger::in_memory();
        };
        match private_dir(&dir) {
            Ok(()) => Ledger::shared(dir),
            Err(e) => {
                tracing::warn!(
                    "connection budget kept in this process only: {}: {e} (set {DIR_ENV} to a directory of this user's)",
                    dir.display()
                );
                Ledger::in_memory()
            }
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, u16), Entry>> {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn dir(&self) -> Option<&Path> {
        self.dir.as_deref().filter(|_| !self.dir_failed.load(Ordering::Relaxed))
    }

    fn file_failed(&self, path: &Path, e: &std::io::Error) {
        if !self.dir_failed.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "connection budget kept in this process from now on: {}: {e}",
                path.display()
            );
        }
    }

    /// Updates `host:port`'s file with `update`, under its lock; `None` if
    /// there is no file and `create` is false. `update` gets the budget in
    /// the file (none if it was just made or unreadable).
    fn with_file<T>(
        &self,
        host: &str,
        port: u16,
        create: bool,
        update: impl FnOnce(Option<Budget>) -> (Option<Budget>, T),
    ) -> Result<Option<T>, ()> {
        let Some(dir) = self.dir() else { return Err(()) };
        let path = dir.join(file_name(host, port));
        let result = (|| -> std::io::Result<Option<T>> {
            let mut file = match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(create)
                .truncate(false)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !create => return Ok(None),
                Err(e) => return Err(e),
            };
            file.lock()?;
            let mut text = String::new();
            file.read_to_string(&mut text)?;
            let (budget, out) = update(Budget::from_line(&text));
            if let Some(budget) = budget {
                file.rewind()?;
                file.set_len(0)?;
                file.write_all(budget.to_line().as_bytes())?;
            }
            Ok(Some(out))
        })();
        result.map_err(|e| self.file_failed(&path, &e))
    }

    /// Books the next connection to `host:port` and says how long to wait
    /// before making it; zero for an endpoint not known to penalize.
    pub fn reserve(&self, host: &str, port: u16) -> Duration {
        let now = unix_now();
        if let Ok(Some(wait)) = self.with_file(host, port, false, |b| {
            let mut b = b.unwrap_or_else(|| Budget::new(1, 0, now));
            let wait = b.reserve(now);
            (Some(b), wait)
        }) {
            return wait;
        }
        let mut entries = self.entries();
        let entry = entries.entry((host.to_owned(), port)).or_default();
        match &mut entry.budget {
            Some(budget) => budget.reserve(now),
            None => {
                entry.unbooked += 1;
                Duration::ZERO
            }
        }
    }

    /// Takes back a connection booked by [`Ledger::reserve`] and never
    /// made (nothing listened).
    pub fn refund(&self, host: &str, port: u16) {
        if let Ok(Some(())) = self.with_file(host, port, false, |b| {
            (
                b.map(|mut b| {
                    b.refund();
                    b
                }),
                (),
            )
        }) {
            return;
        }
        let mut entries = self.entries();
        if let Some(entry) = entries.get_mut(&(host.to_owned(), port)) {
            match &mut entry.budget {
                Some(budget) => budget.refund(),
                None => entry.unbooked = entry.unbooked.saturating_sub(1),
            }
        }
    }

    /// Says that `host:port` spreads connections over `backends` servers.
    pub fn spread(&self, host: &str, port: u16, backends: usize) {
        self.entries().entry((host.to_owned(), port)).or_default().backends = backends;
    }

    /// Notes that `host:port` penalizes (its banner said so): from now on
    /// its connections are paced, and those made before are owed.
    pub fn penalizes(&self, host: &str, port: u16) {
        let (owed, backends) = {
            let mut entries = self.entries();
            let entry = entries.entry((host.to_owned(), port)).or_default();
            if entry.registered {
                return;
            }
            entry.registered = true;
            (std::mem::take(&mut entry.unbooked), entry.backends)
        };
        let now = unix_now();
        let booked = self.with_file(host, port, true, |b| {
            let mut b = b.unwrap_or_else(|| Budget::new(backends, 0, now));
            b.settle(now);
            b.owed += owed as f64;
            if backends > 0 {
                b.backends = backends;
            }
            (Some(b), ())
        });
        if booked.is_err() {
            let mut entries = self.entries();
            let entry = entries.entry((host.to_owned(), port)).or_default();
            entry.budget.get_or_insert_with(|| Budget::new(backends, 0, now)).owed += owed as f64;
        }
    }

    /// Notes that `host:port` does not penalize (its banner said a release
    /// before 9.8): a node that was upgraded back, or a new server at an
    /// old address, is no longer paced. A load balancer is left as it is,
    /// since its backends may differ.
    pub fn does_not_penalize(&self, host: &str, port: u16) {
        let mut entries = self.entries();
        let entry = entries.entry((host.to_owned(), port)).or_default();
        if entry.backends > 1 {
            return;
        }
        entry.budget = None;
        entry.registered = false;
        if let Some(dir) = self.dir() {
            match std::fs::remove_file(dir.join(file_name(host, port))) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => self.file_failed(dir, &e),
            }
        }
    }

    /// `host:port`'s budget now, if it is known to penalize.
    pub fn budget(&self, host: &str, port: u16) -> Option<Budget> {
        if let Ok(found) = self.with_file(host, port, false, |b| (None, b)) {
            return found.flatten();
        }
        self.entries()
            .get(&(host.to_owned(), port))
            .and_then(|e| e.budget.clone())
    }
}

/// The file of `host:port` in the ledger's directory: the host with every
/// byte but letters, digits, `.` and `-` percent-encoded (no two hosts
/// share a name, and none climbs out of the directory), then the port.
fn file_name(host: &str, port: u16) -> String {
    let mut name = String::with_capacity(host.len() + 8);
    for b in host.bytes() {
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' {
            name.push(char::from(b));
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    // "." and ".." are not names.
    if name.chars().all(|c| c == '.') {
        name = name.replace('.', "%2E");
    }
    format!("{name}_{port}")
}

/// Makes `dir` (mode 0700) unless it exists, and checks that it is a
/// directory of this user's that nobody else can write.
fn private_dir(dir: &Path) -> std::io::Result<()> {
    crate::fsutil::create_dir_all(dir, 0o700)?;
    let meta = std::fs::symlink_metadata(dir)?;
    let uid = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "not a directory of uid {uid}'s alone (owner {}, mode {:o})",
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// A [`Prober`] that books every connection in a [`Ledger`] and waits
/// what the ledger says before making it; each answer's banner tells the
/// ledger whether its server penalizes.
#[derive(Debug)]
pub struct Paced<P> {
    inner: P,
    ledger: std::sync::Arc<Ledger>,
}

impl Paced<crate::scan::SshProber> {
    /// Real handshakes, paced by this user's ledger: what every command
    /// that scans uses.
    pub fn for_this_user() -> Self {
        Paced::new(crate::scan::SshProber, std::sync::Arc::new(Ledger::for_this_user()))
    }
}

impl<P> Paced<P> {
    /// `inner`, paced by `ledger`.
    pub fn new(inner: P, ledger: std::sync::Arc<Ledger>) -> Self {
        Paced { inner, ledger }
    }

    /// The prober it paces.
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

impl<P: Prober> Prober for Paced<P> {
    async fn handshake(&self, to: Handshake<'_>) -> Answer {
        let (host, port) = (to.host, to.port);
        let wait = self.ledger.reserve(host, port);
        if !wait.is_zero() {
            tracing::debug!("{host}:{port}: waiting {wait:?} for the connection budget");
            tokio::time::sleep(wait).await;
        }
        let answer = self.inner.handshake(to).await;
        if !answer.connected {
            self.ledger.refund(host, port);
        }
        match &answer.hello {
            Some(hello) if hello.may_penalize() => self.ledger.penalizes(host, port),
            Some(_) => self.ledger.does_not_penalize(host, port),
            None => {}
        }
        answer
    }

    fn spread(&self, host: &str, port: u16, backends: usize) {
        self.ledger.spread(host, port, backends);
    }

    fn budget(&self, host: &str, port: u16) -> Option<Budget> {
        self.ledger.budget(host, port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_one_per_host_and_stay_in_the_directory() {
        assert_eq!(file_name("127.0.0.1", 22), "127.0.0.1_22");
        assert_eq!(file_name("::1", 22), "%3A%3A1_22");
        assert_eq!(file_name("../x", 22), "..%2Fx_22");
        assert_eq!(file_name("..", 22), "%2E%2E_22");
        assert_eq!(file_name("a_b", 1), "a%5Fb_1");
        assert_ne!(file_name("a:b", 1), file_name("a_b", 1));
    }

    /// Two processes (two ledgers on one directory): what the first owes
    /// the server, the second waits for; in memory, each owes alone.
    #[test]
    fn ledgers_on_one_directory_add_up_what_they_owe() {
        let dir = tempfile::tempdir().unwrap();
        let first = Ledger::shared(dir.path().to_owned());
        let second = Ledger::shared(dir.path().to_owned());
        // Unknown: not paced, but counted; learnt: booked in the file.
        for _ in 0..4 {
            assert_eq!(first.reserve("node", 22), Duration::ZERO);
        }
        first.penalizes("node", 22);
        let owed = first.budget("node", 22).unwrap().owed;
        assert!((3.9..=4.0).contains(&owed), "{owed}");
        // The second process books after the first's 4: 6 at once, then
        // it waits, about a second more for each.
        let waits: Vec<Duration> = (0..8).map(|_| second.reserve("node", 22)).collect();
        assert!(waits[..6].iter().all(|w| w.is_zero()), "{waits:?}");
        assert!(waits[6] > Duration::from_millis(900), "{waits:?}");
        assert!(waits[7] > Duration::from_millis(1900), "{waits:?}");
        // A connection never made is taken back.
        let before = second.budget("node", 22).unwrap().owed;
        second.refund("node", 22);
        assert!(second.budget("node", 22).unwrap().owed < before);
        // A banner of a release that does not penalize: not paced again.
        second.does_not_penalize("node", 22);
        assert_eq!(first.budget("node", 22), None);
        assert_eq!(first.reserve("node", 22), Duration::ZERO);

        let alone = Ledger::in_memory();
        alone.penalizes("node", 22);
        assert!(alone.budget("node", 22).is_some());
        assert_eq!(Ledger::in_memory().budget("node", 22), None);
    }

    #[test]
    fn a_directory_others_can_write_is_not_used() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = private_dir(&open).unwrap_err();
        assert!(err.to_string().contains("alone"), "{err}");
        let fresh = dir.path().join("a/b");
        private_dir(&fresh).unwrap();
        assert_eq!(std::fs::metadata(&fresh).unwrap().mode() & 0o777, 0o700);
    }
}
