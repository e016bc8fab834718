//! The `.cwasm` cache: a compiled component is stored under its content hash
//! and the engine's compatibility hash, and loaded back only when this host
//! wrote it. The trust checks run on descriptors: what is checked is what is
//! read.
//!
//! Owns compiling a component and the cache directory. Never loads a file it
//! did not check through the descriptor it reads from, never follows a
//! symlink, and never trusts a dir or file another user could write.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use wasmtime::Engine;
use wasmtime::component::Component;

/// Compiles `bytes`, or loads the machine code a previous compile left in
/// `cache_dir` (`<sha256 of the component>-<engine compatibility>.cwasm`).
///
/// Loading precompiled code runs it as-is, so only files this host wrote are
/// loaded: the cache dir must belong to this user and be writable by no one
/// else (else nothing is loaded from it nor written to it); each `.cwasm` has
/// a `.sha256` beside it written in the same step; both are opened once,
/// without following a symlink, checked through that descriptor (a regular
/// file of this user, writable by no one else) and read from it; and the
/// hash must match. Anything else is ignored and recompiled over.
pub(super) fn compile(engine: &Engine, bytes: &[u8], cache_dir: Option<&Path>) -> Result<(Component, bool), String> {
    use sha2::{Digest, Sha256};
    use std::hash::{Hash, Hasher};
    let compile = || Component::new(engine, bytes).map_err(|e| format!("cannot compile it: {e:#}"));
    let Some(cache_dir) = cache_dir else { return compile().map(|c| (c, false)) };
    let mut compat = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut compat);
    let key = format!("{}-{:016x}", &hex::encode(Sha256::digest(bytes))[..40], compat.finish());
    let (cwasm, stamp) = (format!("{key}.cwasm"), format!("{key}.sha256"));
    let dir = match open_dir(cache_dir) {
        Ok(dir) => dir,
        Err(why) => {
            tracing::warn!("not using the compile cache `{}`: {why}", cache_dir.display());
            return compile().map(|c| (c, false));
        }
    };
    if let Some(code) = trusted_file(&dir, &cwasm, &stamp) {
        // SAFETY: `code` is a serialized component this host wrote (see
        // `trusted_file`) for an engine with this compatibility hash.
        if let Ok(component) = unsafe { Component::deserialize(engine, &code) } {
            return Ok((component, true));
        }
    }
    let component = compile()?;
    if let Ok(code) = component.serialize() {
        let written = crate::home::Home::write_atomic(&cache_dir.join(&cwasm), &code).and_then(|()| {
            crate::home::Home::write_atomic(&cache_dir.join(&stamp), hex::encode(Sha256::digest(&code)).as_bytes())
        });
        if let Err(e) = written {
            tracing::debug!("could not cache the compiled component in `{}`: {e}", cache_dir.display());
        }
    }
    Ok((component, false))
}

/// Mode bits that let the group or others write.
const OTHERS_WRITE: u32 = 0o022;

/// The largest file read from the cache (a compiled component is a few MiB).
const MAX_FILE: u64 = 1 << 30;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// `dir` (made `0755` when missing), opened; refused when another user
/// owns it or the group or others may write to it (they could swap its
/// files between check and use).
fn open_dir(dir: &Path) -> Result<File, String> {
    std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| format!("cannot open it: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("cannot stat it: {e}"))?;
    if meta.uid() != euid() {
        return Err(format!("it belongs to uid {}, not to this user (uid {})", meta.uid(), euid()));
    }
    if meta.mode() & OTHERS_WRITE != 0 {
        return Err(format!("its group or others may write to it (mode {:o}); `chmod go-w` it", meta.mode() & 0o7777));
    }
    Ok(file)
}

/// The bytes of `name` in `dir`, opened once without following a symlink
/// (nor blocking on a FIFO): a regular file of this user that no one else
/// may write, no larger than [`MAX_FILE`].
fn read_own(dir: &File, name: &str) -> Option<Vec<u8>> {
    let name = CString::new(Path::new(name).as_os_str().as_bytes()).ok()?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY;
    // SAFETY: `dir` is an open directory and `name` a NUL-terminated path.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let mut file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != euid() || meta.mode() & OTHERS_WRITE != 0 || meta.len() > MAX_FILE {
        return None;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
    file.by_ref().take(MAX_FILE).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The code of `cwasm` when it matches its `stamp` (a sha256 in hex), both
/// read through [`read_own`].
fn trusted_file(dir: &File, cwasm: &str, stamp: &str) -> Option<Vec<u8>> {
    use sha2::{Digest, Sha256};
    let code = read_own(dir, cwasm)?;
    let expected = read_own(dir, stamp)?;
    (hex::encode(Sha256::digest(&code)).as_bytes() == expected.trim_ascii()).then_some(code)
}
