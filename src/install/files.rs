//! The host key files on the node: reading them, replacing them as one
//! transaction that can be undone without free disk space, and backups.
//!
//! Before a file is replaced, its current version is hard-linked beside it
//! as `.hostkeyctl-rollback.<name>.old` (no data copied, so this works on a
//! full disk). Undo renames the link back; commit deletes the links. A run
//! killed in between leaves every file complete (each replacement is an
//! atomic rename) and the next run, under the lock, removes the leftovers
//! and converges.

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

use crate::fsutil::{self, WriteOptions};

const ROLLBACK_PREFIX: &str = ".hostkeyctl-rollback.";
const ROLLBACK_SUFFIX: &str = ".old";

/// A file as found on disk.
pub struct Current {
    /// Its bytes (zeroized on drop: may be a private key).
    pub content: Zeroizing<Vec<u8>>,
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// Where a managed file really is. A symlink (config management often
/// links `sshd_config`) is written through to its target, which must be a
/// regular file; the link itself stays. A path that does not exist yet is
/// itself. Anything else (a directory, a dangling link) is refused.
pub fn managed_path(path: &Path) -> io::Result<PathBuf> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(path.to_owned()),
        Err(e) => Err(e),
        Ok(m) if m.file_type().is_symlink() => {
            let target = fs::canonicalize(path).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("it is a symlink whose target cannot be resolved ({e})"),
                )
            })?;
            if fs::metadata(&target)?.is_file() {
                Ok(target)
            } else {
                Err(io::Error::other(format!(
                    "it is a symlink to {}, which is not a regular file",
                    target.display()
                )))
            }
        }
        Ok(m) if m.is_file() => Ok(path.to_owned()),
        Ok(_) => Err(io::Error::other("it is not a regular file")),
    }
}

/// Reads a file (following a symlink: the mode and owner are the real
/// file's, never the link's), or `None` if it does not exist.
pub fn read_current(path: &Path) -> io::Result<Option<Current>> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let content = Zeroizing::new(fs::read(path)?);
    Ok(Some(Current {
        content,
        mode: meta.permissions().mode() & 0o7777,
        uid: meta.uid(),
        gid: meta.gid(),
    }))
}

/// A file as it must be.
pub struct Desired {
    /// Where.
    pub path: PathBuf,
    /// What (zeroized on drop); `None`: the file must not exist.
    pub content: Option<Zeroizing<Vec<u8>>>,
    /// Permission bits.
    pub mode: u32,
    /// Owner and group, or `None` for the running user's.
    pub owner: Option<(u32, u32)>,
}

fn rollback_link(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!("{ROLLBACK_PREFIX}{name}{ROLLBACK_SUFFIX}"))
}

fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// Removes what a killed run may have left in `dir`: temporary files and
/// rollback links. Call under the install lock.
pub fn remove_leftovers(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut removed = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(removed),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let leftover = (name.starts_with(ROLLBACK_PREFIX) && name.ends_with(ROLLBACK_SUFFIX))
            || (name.starts_with(".hostkeyctl-") && name.ends_with(".tmp"));
        if leftover {
            fs::remove_file(entry.path())?;
            removed.push(entry.path());
        }
    }
    Ok(removed)
}

struct Replaced {
    path: PathBuf,
    link: Option<PathBuf>,
}

/// Replacements that can be undone until committed.
#[derive(Default)]
pub struct Transaction {
    done: Vec<Replaced>,
}

impl Transaction {
    /// Replaces (or, with no content, removes) one file (see the module docs).
    pub fn replace(&mut self, file: &Desired) -> io::Result<()> {
        let link = if fs::symlink_metadata(&file.path).is_ok() {
            let link = rollback_link(&file.path);
            let _ = fs::remove_file(&link);
            fs::hard_link(&file.path, &link)?;
            Some(link)
        } else {
            None
        };
        let Some(content) = &file.content else {
            let removed = fs::remove_file(&file.path).and_then(|()| fsutil::sync_dir(parent(&file.path)));
            self.done.push(Replaced {
                path: file.path.clone(),
                link,
            });
            return removed;
        };
        let options = WriteOptions {
            mode: file.mode,
            owner: file.owner,
            overwrite: true,
        };
        let written = fsutil::write_atomic(&file.path, content, &options);
        // Record before returning any error so a failed write is undone too.
        self.done.push(Replaced {
            path: file.path.clone(),
            link,
        });
        written
    }

    /// How many files were replaced.
    pub fn len(&self) -> usize {
        self.done.len()
    }

    /// Whether nothing was replaced.
    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }

    /// Puts every replaced file back as it was, newest first. Needs no free
    /// space. Returns the files that could not be restored.
    pub fn undo(mut self) -> Vec<(PathBuf, io::Error)> {
        let mut failures = Vec::new();
        while let Some(r) = self.done.pop() {
            let result = match &r.link {
                // rename() between two links to the same inode (the write
                // failed before replacing the file) does nothing, so the
                // link must then be removed by hand.
                Some(link) => fs::rename(link, &r.path).and_then(|()| match fs::remove_file(link) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    other => other,
                }),
                None => match fs::remove_file(&r.path) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    other => other,
                },
            };
            if let Err(e) = result.and_then(|()| fsutil::sync_dir(parent(&r.path))) {
                failures.push((r.path.clone(), e));
            }
        }
        failures
    }

    /// Keeps the new files and drops the rollback links.
    pub fn commit(self) -> io::Result<()> {
        for r in &self.done {
            if let Some(link) = &r.link {
                fs::remove_file(link)?;
                fsutil::sync_dir(parent(link))?;
            }
        }
        Ok(())
    }
}

/// One file recorded in a backup.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct BackupEntry {
    /// Original path.
    pub path: PathBuf,
    /// Whether it existed.
    pub existed: bool,
    /// Permission bits.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// File name of the copy inside the backup directory.
    pub copy: Option<String>,
}

/// Copies the current versions of `paths` into a new directory under
/// `state_dir/backups` (root only, never read by sshd) with a manifest.
pub fn backup(state_dir: &Path, label: &str, paths: &[PathBuf]) -> io::Result<PathBuf> {
    // The state directory may be shared: it is created 0700 when missing
    // and otherwise left as it is, but one that others can write to could
    // have its backups swapped, so it is refused.
    fsutil::create_dir_all(state_dir, 0o700)?;
    let meta = fs::symlink_metadata(state_dir)?;
    if !meta.is_dir() || meta.permissions().mode() & 0o022 != 0 {
        return Err(io::Error::other(format!(
            "{} is not a directory only its owner can write to; give --state-dir a root-only directory",
            state_dir.display()
        )));
    }
    let root = state_dir.join("backups");
    fsutil::create_dir_all(&root, 0o700)?;
    fs::set_permissions(&root, fs::Permissions::from_mode(0o700))?;
    let stamp = time::OffsetDateTime::now_utc();
    let name = format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}.{:09}Z-{label}",
        stamp.year(),
        u8::from(stamp.month()),
        stamp.day(),
        stamp.hour(),
        stamp.minute(),
        stamp.second(),
        stamp.nanosecond()
    );
    let dir = root.join(name);
    fsutil::create_dir_all(&dir, 0o700)?;
    let mut manifest = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let entry = match read_current(path)? {
            Some(current) => {
                let copy = format!("{i:02}-{}", path.file_name().unwrap_or_default().to_string_lossy());
                let options = WriteOptions {
                    mode: 0o600,
                    owner: None,
                    overwrite: false,
                };
                fsutil::write_atomic(&dir.join(&copy), &current.content, &options)?;
                BackupEntry {
                    path: path.clone(),
                    existed: true,
                    mode: current.mode,
                    uid: current.uid,
                    gid: current.gid,
                    copy: Some(copy),
                }
            }
            None => BackupEntry {
                path: path.clone(),
                existed: false,
                mode: 0,
                uid: 0,
                gid: 0,
                copy: None,
            },
        };
        manifest.push(entry);
    }
    let json = serde_json::to_vec_pretty(&manifest).map_err(io::Error::other)?;
    let options = WriteOptions {
        mode: 0o600,
        owner: None,
        overwrite: false,
    };
    fsutil::write_atomic(&dir.join("manifest.json"), &json, &options)?;
    Ok(dir)
}

/// Deletes all but the newest `keep` backups (never `protect`).
pub fn prune_backups(state_dir: &Path, keep: usize, protect: &Path) -> io::Result<()> {
    let root = state_dir.join("backups");
    let mut dirs: Vec<PathBuf> = match fs::read_dir(&root) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    dirs.sort();
    let excess = dirs.len().saturating_sub(keep.max(1));
    for dir in dirs.into_iter().take(excess) {
        if dir != protect {
            fs::remove_dir_all(&dir)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use zeroize::Zeroizing;

    use super::{Desired, Transaction, read_current, remove_leftovers};

    fn desired(path: &std::path::Path, content: &[u8], mode: u32) -> Desired {
        Desired {
            path: path.to_owned(),
            content: Some(Zeroizing::new(content.to_vec())),
            mode,
            owner: None,
        }
    }

    #[test]
    fn undo_restores_bytes_and_mode_and_removes_new_files() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old");
        let new = dir.path().join("new");
        std::fs::write(&old, b"before").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o640)).unwrap();
        let mut tx = Transaction::default();
        tx.replace(&desired(&old, b"after", 0o600)).unwrap();
        tx.replace(&desired(&new, b"fresh", 0o600)).unwrap();
        assert_eq!(std::fs::read(&old).unwrap(), b"after");
        assert!(tx.undo().is_empty());
        let restored = read_current(&old).unwrap().unwrap();
        assert_eq!(&restored.content[..], b"before");
        assert_eq!(restored.mode, 0o640);
        assert!(!new.exists());
        assert!(
            remove_leftovers(dir.path()).unwrap().is_empty(),
            "undo left links behind"
        );
    }

    /// Regression (hardening finding 5): a backup changed the mode of the
    /// --state-dir it was given (a shared directory became 0700).
    #[test]
    fn a_backup_leaves_the_state_dirs_mode_alone_and_refuses_a_writable_one() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        super::backup(&shared, "t", std::slice::from_ref(&file)).unwrap();
        let mode = std::fs::metadata(&shared).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o755);
        let backups = std::fs::metadata(shared.join("backups")).unwrap().permissions().mode() & 0o7777;
        assert_eq!(backups, 0o700);
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let err = super::backup(&open, "t", &[file]).unwrap_err().to_string();
        assert!(err.contains("root-only directory"), "{err}");
    }

    /// Regression (hardening finding 2): a symlinked managed file is
    /// written through to its target; its mode is the target's, never the
    /// link's 0777.
    #[test]
    fn a_symlinked_file_resolves_to_its_target_with_the_targets_mode() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("real_sshd_config");
        std::fs::write(&target, b"Port 22\n").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = dir.path().join("sshd_config");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let resolved = super::managed_path(&link).unwrap();
        assert_eq!(resolved, std::fs::canonicalize(&target).unwrap());
        assert_eq!(read_current(&link).unwrap().unwrap().mode, 0o640);
        let dangling = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert!(super::managed_path(&dangling).is_err());
        let to_dir = dir.path().join("to_dir");
        std::os::unix::fs::symlink(dir.path(), &to_dir).unwrap();
        assert!(super::managed_path(&to_dir).is_err());
    }

    #[test]
    fn commit_drops_rollback_links() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"before").unwrap();
        let mut tx = Transaction::default();
        tx.replace(&desired(&path, b"after", 0o600)).unwrap();
        tx.commit().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"after");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
