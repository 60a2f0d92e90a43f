//! The one way the tool replaces a file: atomically, so a reader (libvirt, node_exporter, a
//! fleet's collector, the hook) sees the old file or the new one, never half of either.
//!
//! `rewrite --in-place`, the daemon's snapshot, its published host facts and its metrics file
//! all write through [`write_atomic`]: a temporary file beside the target (so the rename stays on
//! one file system), created exclusively, written, synced, given the replaced file's owner,
//! group and permissions, then renamed over the target. A failure at any step removes the
//! temporary file and leaves the target as it was.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Replaces `path` with `bytes` atomically (see the module docs), creating its directory when
/// missing.
///
/// # Errors
/// The operating system's error of the step that failed (the directory, the temporary file,
/// the write, the sync, the owner, the rename); the target is then untouched and no temporary
/// file is left.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, true)
}

/// [`write_atomic`] without the sync: a reader still sees the old file or the new one, never
/// half of either, but after a crash of the machine the file may be empty (on a file system that
/// does not flush a file renamed over another, as ext4's `auto_da_alloc` does). Only for a file
/// whose loss costs nothing but figures and whose writer is on a path someone waits on: the qemu
/// hook's decision counts ([`crate::hook_decisions`]), where the sync added 0.3 ms to 3 ms at
/// every guest start (benches/hook.rs).
///
/// # Errors
/// As [`write_atomic`].
pub fn write_atomic_unsynced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, false)
}

/// Writes `bytes` over the regular file `path` where it is (one `pwrite(2)` at offset 0, then
/// cut to their length), not synced; a file that does not exist is made by
/// [`write_atomic_unsynced`], and so is anything but a regular file there (a link, a FIFO: replaced,
/// as before this was written in place). Only for a small state file whose writers hold its lock exclusive
/// and whose readers hold it shared ([`crate::lockfile`]), so no reader sees half a write: the
/// qemu hook's decision counts ([`crate::hook_decisions`]). A replacement by rename there cost
/// every guest start a new inode, the old one's eviction and ext4's flush of a file renamed over
/// another (`auto_da_alloc`); a write in place is a copy into one page of the page cache. After a
/// crash of the machine the file holds the old counts or the new ones (a few hundred bytes: one
/// sector).
///
/// # Errors
/// The operating system's error opening, writing or cutting the file.
pub fn overwrite_unsynced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let file = match std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        // None there, a link (O_NOFOLLOW), a FIFO without a reader (O_NONBLOCK).
        Err(e)
            if e.kind() == std::io::ErrorKind::NotFound
                || matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENXIO)) =>
        {
            return write_atomic_unsynced(path, bytes);
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        drop(file);
        return write_atomic_unsynced(path, bytes);
    }
    file.write_all_at(bytes, 0)?;
    if meta.len() > bytes.len() as u64 {
        file.set_len(bytes.len() as u64)?;
    }
    Ok(())
}

/// [`write_atomic`], the temporary file synced when `sync`.
fn replace(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = temporary(dir, path);
    let result = fill(&tmp, path, bytes, sync).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// [`write_atomic`] unless `path` already holds exactly `bytes` (a reader such as a fleet's
/// collector sees a change only when there is one). Returns whether it wrote.
///
/// # Errors
/// As [`write_atomic`].
pub fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    let same = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == bytes.len() as u64)
        && std::fs::read(path).is_ok_and(|old| old == bytes);
    if same {
        return Ok(false);
    }
    write_atomic(path, bytes)?;
    Ok(true)
}

/// The temporary file for `path` in `dir`: hidden, named after the target and this process.
fn temporary(dir: &Path, path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    dir.join(format!(".{name}.virt-cpu-policy.{}", std::process::id()))
}

/// Writes `bytes` to the new temporary file `tmp`, with the owner, group and permissions of the
/// file it will replace (`target`), when there is one, and syncs it when `sync`.
fn fill(tmp: &Path, target: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let open = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)
    };
    // A temporary file of this name left by an earlier process of the same id (a crash) is
    // ours to replace.
    let mut f = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(tmp)?;
            open()?
        }
        other => other?,
    };
    if let Ok(old) = std::fs::metadata(target) {
        keep_owner(&f, &old)?;
        f.set_permissions(old.permissions())?;
    }
    f.write_all(bytes)?;
    if sync { f.sync_all() } else { Ok(()) }
}

/// Gives `f` the owner and group of the file it replaces (before its mode: a change of owner
/// clears set-id bits). Only root may give a file away: EPERM leaves it as created.
fn keep_owner(f: &std::fs::File, old: &std::fs::Metadata) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    match std::os::unix::fs::fchown(f, Some(old.uid()), Some(old.gid())) {
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) => Ok(()),
        r => r,
    }
}

/// `s` as a file name: ASCII letters, digits, `-`, `_` and `.` kept, anything else `_`, and no
/// leading `.` (a hidden file, `..`).
#[must_use]
pub fn safe_file_name(s: &str) -> String {
    let safe: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    match safe.strip_prefix('.') {
        Some(rest) => format!("_{rest}"),
        None if safe.is_empty() => "_".into(),
        None => safe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vcp-writefile-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// In place: the same inode, cut to the new length, no file left beside it; made when
    /// missing; a link there is replaced, never written through.
    #[test]
    fn an_overwrite_keeps_the_inode_and_replaces_a_link() {
        let d = scratch("overwrite");
        let f = d.join("counts");
        overwrite_unsynced(&f, b"long first text\n").unwrap();
        let ino = std::fs::metadata(&f).unwrap().ino();
        overwrite_unsynced(&f, b"short\n").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"short\n");
        assert_eq!(std::fs::metadata(&f).unwrap().ino(), ino);
        assert_eq!(names(&d), ["counts"]);
        let target = d.join("elsewhere");
        std::fs::write(&target, b"keep").unwrap();
        let link = d.join("linked");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        overwrite_unsynced(&link, b"new").unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
        assert_eq!(std::fs::read(&link).unwrap(), b"new");
        std::fs::remove_dir_all(&d).ok();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn replaces_keeping_the_mode_and_leaves_no_temporary_file() {
        let d = scratch("replace");
        let f = d.join("sub/a.xml");
        write_atomic(&f, b"one").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        let ino = std::fs::metadata(&f).unwrap().ino();
        write_atomic(&f, b"two").unwrap();
        let m = std::fs::metadata(&f).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"two");
        assert_eq!(m.permissions().mode() & 0o777, 0o640);
        assert_ne!(m.ino(), ino, "a new file renamed over the old one");
        assert_eq!(names(&d.join("sub")), ["a.xml"]);
        assert!(!write_if_changed(&f, b"two").unwrap());
        assert_eq!(std::fs::metadata(&f).unwrap().ino(), m.ino());
        assert!(write_if_changed(&f, b"three").unwrap());
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_failed_write_leaves_the_target_and_no_temporary_file() {
        let d = scratch("fail");
        let f = d.join("a.xml");
        std::fs::write(&f, "old").unwrap();
        // A directory where the target is: the rename fails after the temporary file is made.
        let target = d.join("dir.xml");
        std::fs::create_dir_all(target.join("x")).unwrap();
        assert!(write_atomic(&target, b"new").is_err());
        assert_eq!(names(&d), ["a.xml", "dir.xml"]);
        // A stale temporary file of this process is replaced, not an error.
        std::fs::write(temporary(&d, &f), "stale").unwrap();
        write_atomic(&f, b"new").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
        assert_eq!(names(&d), ["a.xml", "dir.xml"]);
        std::fs::remove_dir_all(&d).ok();
    }
}
