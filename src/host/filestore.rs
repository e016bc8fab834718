//! Small TOML record files of the home (`grants.toml`): read whole, changed
//! under an exclusive lock, replaced atomically. ([`StoreError`] is also how
//! [`super::state`] reports the state store.)
//!
//! Readers never lock: a file is only ever replaced by a rename, so a reader
//! sees the old or the new one whole. Writers take `flock` on a `.lock` file
//! next to it, re-read, change and write while holding it, so two processes
//! recording different plugins at once both keep their record. This module
//! never decides what a record means; [`super::grants`] does.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::home::Home;

/// A record file that could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{action} `{}`: {reason}", path.display())]
pub struct StoreError {
    pub path: PathBuf,
    pub action: &'static str,
    pub reason: String,
}

impl StoreError {
    fn new(path: &Path, action: &'static str, reason: impl ToString) -> Self {
        StoreError { path: path.to_owned(), action, reason: reason.to_string() }
    }
}

/// Reads `path`; a missing file is the default record.
///
/// # Errors
/// The file exists but cannot be read or is not a valid record.
pub fn read<T: DeserializeOwned + Default>(path: &Path) -> Result<T, StoreError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(T::default()),
        Err(e) => return Err(StoreError::new(path, "failed to read", e)),
    };
    toml::from_str(&text).map_err(|e| StoreError::new(path, "failed to parse", e.to_string().trim_end()))
}

/// Changes the record in `path` with `change` under the file's lock: read,
/// change, write (only when `change` says it changed something, by returning
/// `(true, _)`). Returns what `change` returned.
///
/// # Errors
/// The lock, the read (an unreadable or invalid file is never overwritten) or
/// the write failed.
pub fn update<T, R>(path: &Path, header: &str, change: impl FnOnce(&mut T) -> (bool, R)) -> Result<R, StoreError>
where
    T: DeserializeOwned + Serialize + Default,
{
    let _lock = Lock::acquire(path)?;
    let mut record: T = read(path)?;
    let (changed, result) = change(&mut record);
    if changed {
        let body = toml::to_string(&record).map_err(|e| StoreError::new(path, "failed to write", e))?;
        Home::write_atomic(path, format!("{header}{body}").as_bytes())
            .map_err(|e| StoreError::new(path, "failed to write", e))?;
    }
    Ok(result)
}

/// An exclusive `flock` on `<path>.lock`, released when dropped (the kernel
/// releases it too when the process dies, so a crash never leaves it held).
struct Lock {
    _file: File,
}

impl Lock {
    fn acquire(path: &Path) -> Result<Lock, StoreError> {
        let mut name = path.as_os_str().to_owned();
        name.push(".lock");
        let lock_path = PathBuf::from(name);
        if let Some(dir) = lock_path.parent() {
            Home::ensure_dir(dir).map_err(|e| StoreError::new(path, "failed to lock", e))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| StoreError::new(&lock_path, "failed to open the lock", e))?;
        loop {
            // SAFETY: flock on a file descriptor this function owns; it only
            // changes the lock state of that open file.
            let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                return Ok(Lock { _file: file });
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(StoreError::new(&lock_path, "failed to lock", err));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
    struct Counts {
        #[serde(default)]
        n: BTreeMap<String, u32>,
    }

    #[test]
    fn concurrent_updates_keep_every_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.toml");
        std::thread::scope(|s| {
            for t in 0..8 {
                let path = &path;
                s.spawn(move || {
                    for i in 0..10 {
                        update(path, "# test\n", |c: &mut Counts| (c.n.insert(format!("t{t}-{i}"), i).is_none(), ()))
                            .unwrap();
                    }
                });
            }
        });
        let counts: Counts = read(&path).unwrap();
        assert_eq!(counts.n.len(), 80);
        assert!(std::fs::read_to_string(&path).unwrap().starts_with("# test\n"));
    }

    #[test]
    fn an_invalid_file_is_reported_and_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.toml");
        std::fs::write(&path, "n = [broken").unwrap();
        let err = update(&path, "", |c: &mut Counts| (c.n.insert("x".into(), 1).is_none(), ())).unwrap_err();
        assert!(err.to_string().starts_with(&format!("failed to parse `{}`: ", path.display())), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "n = [broken");
        assert!(read::<Counts>(&dir.path().join("missing.toml")).unwrap().n.is_empty());
    }
}
