//! A key set as `ssh_host_<alg>_key` files in a directory: adopting a
//! node's keys (`ssh-keygen -A` layout) and writing a set out.

use std::io;
use std::path::{Path, PathBuf};

use super::{HostKey, KeyAlgorithm, KeyError, KeySet, fingerprint_of};
use crate::fingerprint::Fingerprint;
use crate::fsutil;
use serde::Serialize;
use ssh_key::PublicKey;
use zeroize::Zeroizing;

/// Why a directory of host key files cannot be read as a key set.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The directory cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
    /// A private key file is not a usable host key.
    #[error("{}: {source}", path.display())]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        source: KeyError,
    },
    /// A private key file holds a key of another algorithm than its name says.
    #[error("{}: holds a {found} key but its name says {expected}", path.display())]
    WrongFile {
        /// The file.
        path: PathBuf,
        /// What the file name promises.
        expected: KeyAlgorithm,
        /// What the file holds.
        found: KeyAlgorithm,
    },
    /// The `.pub` file beside a private key is another key.
    #[error("{}: does not match its private key {} (the .pub is {pub_fp}, the private key's is {key_fp}); fix or delete the .pub", public_path.display(), private_path.display())]
    PublicMismatch {
        /// The private key file.
        private_path: PathBuf,
        /// The public key file.
        public_path: PathBuf,
        /// Fingerprint of the `.pub` file.
        pub_fp: Fingerprint,
        /// Fingerprint of the private key.
        key_fp: Fingerprint,
    },
    /// The `.pub` file is not a public key line.
    #[error("{}: not an OpenSSH public key line ({source})", path.display())]
    BadPublic {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        source: ssh_key::Error,
    },
    /// No host key of a managed algorithm was found.
    #[error("no host keys in {}: expected files named ssh_host_ed25519_key, ssh_host_ecdsa_key or ssh_host_rsa_key (as `ssh-keygen -A` writes them)", dir.display())]
    Empty {
        /// The directory.
        dir: PathBuf,
    },
}

/// Why a key set cannot be written out as files.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// A file is in the way and overwriting was not allowed.
    #[error("{} already exists; pass --force to overwrite the key files", path.display())]
    Exists {
        /// The file in the way.
        path: PathBuf,
    },
    /// Creating, writing or renaming a file failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        source: io::Error,
    },
}

impl KeySet {
    /// Loads the `ssh_host_<alg>_key` files of every managed algorithm found
    /// in `dir`. Each `.pub` beside a key, when present, must match it.
    pub fn load_dir(dir: &Path) -> Result<Self, LoadError> {
        std::fs::read_dir(dir).map_err(|source| LoadError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let mut set = KeySet::default();
        for algorithm in KeyAlgorithm::ALL {
            let private_path = dir.join(algorithm.private_file_name());
            let pem = match std::fs::read_to_string(&private_path) {
                Ok(text) => Zeroizing::new(text),
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(LoadError::Io {
                        path: private_path,
                        source,
                    });
                }
            };
            let key = HostKey::from_openssh(&pem).map_err(|source| LoadError::Key {
                path: private_path.clone(),
                source,
            })?;
            if key.algorithm() != algorithm {
                return Err(LoadError::WrongFile {
                    path: private_path,
                    expected: algorithm,
                    found: key.algorithm(),
                });
            }
            let public_path = dir.join(algorithm.public_file_name());
            match std::fs::read_to_string(&public_path) {
                Ok(line) => {
                    let public = PublicKey::from_openssh(line.trim()).map_err(|source| LoadError::BadPublic {
                        path: public_path.clone(),
                        source,
                    })?;
                    if public.key_data() != key.public_key().key_data() {
                        return Err(LoadError::PublicMismatch {
                            private_path,
                            public_path,
                            pub_fp: fingerprint_of(&public),
                            key_fp: key.fingerprint().clone(),
                        });
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(LoadError::Io {
                        path: public_path,
                        source,
                    });
                }
            }
            set.insert(key);
        }
        if set.is_empty() {
            return Err(LoadError::Empty { dir: dir.to_owned() });
        }
        Ok(set)
    }

    /// Writes the set as `ssh_host_<alg>_key` (mode 0600) and `.pub` (0644)
    /// files in `dir`, creating `dir` (0755) if needed. Each file is created
    /// with its final mode in a temporary file beside it, synced and renamed.
    /// Without `overwrite`, nothing is written if any target file exists.
    pub fn write_dir(&self, dir: &Path, overwrite: bool) -> Result<Vec<WrittenKey>, WriteError> {
        fsutil::create_dir_all(dir, 0o755).map_err(|source| WriteError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let planned: Vec<(&HostKey, PathBuf, PathBuf)> = self
            .keys()
            .map(|k| {
                let a = k.algorithm();
                (k, dir.join(a.private_file_name()), dir.join(a.public_file_name()))
            })
            .collect();
        if !overwrite {
            for path in planned.iter().flat_map(|(_, p, q)| [p, q]) {
                if path.symlink_metadata().is_ok() {
                    return Err(WriteError::Exists { path: path.clone() });
                }
            }
        }
        let mut written = Vec::new();
        for (key, private_path, public_path) in planned {
            let pem = key.reveal_private_openssh();
            let line = Zeroizing::new(format!("{}\n", key.public_line()));
            for (path, bytes, mode) in [
                (&private_path, pem.as_bytes(), 0o600),
                (&public_path, line.as_bytes(), 0o644),
            ] {
                let options = fsutil::WriteOptions {
                    mode,
                    owner: None,
                    overwrite,
                };
                fsutil::write_atomic(path, bytes, &options).map_err(|source| match source.kind() {
                    io::ErrorKind::AlreadyExists => WriteError::Exists { path: path.clone() },
                    _ => WriteError::Io {
                        path: path.clone(),
                        source,
                    },
                })?;
            }
            written.push(WrittenKey {
                algorithm: key.algorithm(),
                fingerprint: key.fingerprint().clone(),
                public_key: key.public_line(),
                private_key_file: private_path,
                public_key_file: public_path,
            });
        }
        Ok(written)
    }
}

/// What [`KeySet::write_dir`] wrote for one key (public facts only).
#[derive(Clone, Debug, Serialize)]
pub struct WrittenKey {
    /// The key's algorithm.
    pub algorithm: KeyAlgorithm,
    /// Its `SHA256:` fingerprint.
    pub fingerprint: Fingerprint,
    /// Its public key line.
    pub public_key: String,
    /// Where the private key went.
    pub private_key_file: PathBuf,
    /// Where the public key went.
    pub public_key_file: PathBuf,
}
