//! Crash-safe file writing: every file hostkeyctl writes goes through here.
//!
//! A file is created as a temporary file in its target directory with its
//! final mode (and owner) before a byte is written, filled, fsynced, renamed
//! over the target and the directory fsynced. A crash at any point leaves
//! either the old file or the new one, never a partial one, and never a
//! private key readable by others even for an instant.

use std::fs::{File, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// How [`write_atomic`] creates a file.
#[derive(Clone, Copy, Debug)]
pub struct WriteOptions {
    /// Final permission bits, e.g. `0o600`.
    pub mode: u32,
    /// Final owner and group, or `None` to keep the creating process's.
    pub owner: Option<(u32, u32)>,
    /// Whether an existing file may be replaced.
    pub overwrite: bool,
}

/// Writes `bytes` to `path` atomically (see the module docs).
///
/// Without `overwrite`, fails with [`io::ErrorKind::AlreadyExists`] if the
/// target exists, even if it appears between the check and the rename.
pub fn write_atomic(path: &Path, bytes: &[u8], options: &WriteOptions) -> io::Result<()> {
    let dir = parent_dir(path);
    let mut tmp = tempfile::Builder::new()
        .prefix(".hostkeyctl-")
        .suffix(".tmp")
        .permissions(Permissions::from_mode(options.mode))
        .tempfile_in(dir)?;
    // The creation mode is filtered by the umask; set it exactly before
    // writing anything.
    tmp.as_file().set_permissions(Permissions::from_mode(options.mode))?;
    if let Some((uid, gid)) = options.owner {
        std::os::unix::fs::fchown(tmp.as_file(), Some(uid), Some(gid))?;
        // chown clears set-id bits; reapply the exact mode.
        tmp.as_file().set_permissions(Permissions::from_mode(options.mode))?;
    }
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    if options.overwrite {
        tmp.persist(path).map_err(|e| e.error)?;
    } else {
        tmp.persist_noclobber(path).map_err(|e| e.error)?;
    }
    sync_dir(dir)
}

/// Fsyncs a directory so renames and creations in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates a directory and its missing parents with `mode` (filtered by
/// the umask, as `mkdir -p` does).
pub fn create_dir_all(dir: &Path, mode: u32) -> io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(mode).create(dir)
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::{WriteOptions, write_atomic};

    #[test]
    fn writes_with_final_mode_and_refuses_to_clobber() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let opts = WriteOptions {
            mode: 0o600,
            owner: None,
            overwrite: false,
        };
        write_atomic(&path, b"one", &opts).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        let err = write_atomic(&path, b"two", &opts).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&path).unwrap(), b"one");
        write_atomic(
            &path,
            b"two",
            &WriteOptions {
                overwrite: true,
                mode: 0o644,
                ..opts
            },
        )
        .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("key")]);
    }
}
