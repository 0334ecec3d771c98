//! The reload-pending marker: how the next run knows whether sshd has
//! loaded what is on disk.
//!
//! A run killed after writing the files and before sshd was verified to
//! serve them leaves files that already match the set. Judged by the files,
//! the next run would have nothing to do, while sshd still serves the old
//! keys, or (during a rotation's overlap, where the extra keys are not
//! visible to a handshake) lacks the next set's keys. So install writes
//! this marker in its state directory before the first file changes and
//! removes it once sshd is verified to serve the files (or a rollback is
//! verified to serve the old ones). A run that finds it reloads and
//! verifies even when every file is already right.

use std::io;
use std::path::{Path, PathBuf};

use crate::fsutil::{self, WriteOptions};

/// The marker's file name inside the state directory.
pub const FILE_NAME: &str = "reload-pending";

/// Where the marker lives.
pub fn path(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE_NAME)
}

/// Writes the marker (crash-safe, 0600), saying what was being installed.
pub fn mark(state_dir: &Path, what: &str) -> io::Result<()> {
    let text = format!(
        "hostkeyctl install of {what} changed files here; sshd was not yet verified to serve them.\n\
         The next `hostkeyctl install` reloads sshd and verifies. Do not delete this file by hand.\n"
    );
    let options = WriteOptions {
        mode: 0o600,
        owner: None,
        overwrite: true,
    };
    fsutil::write_atomic(&path(state_dir), text.as_bytes(), &options)
}

/// Whether a marker is there.
pub fn is_marked(state_dir: &Path) -> bool {
    path(state_dir).exists()
}

/// Removes the marker (durably); a missing marker is fine.
pub fn clear(state_dir: &Path) -> io::Result<()> {
    match std::fs::remove_file(path(state_dir)) {
        Ok(()) => fsutil::sync_dir(state_dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
