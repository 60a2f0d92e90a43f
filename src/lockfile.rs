//! The one way the tool serialises writers of a state file: an exclusive `flock(2)` on a lock
//! file beside it (`NAME.lock`), held until the guard is dropped (or the process ends, so a
//! crashed writer never leaves the lock taken).
//!
//! The lock is on a file of its own, not on the state file: a state file may be replaced by a
//! rename ([`crate::writefile::write_atomic`]; the hook's shell fallback replaces the decision
//! counts so), and a lock on the replaced inode would not keep the next writer out. Users: the cluster CPU seen ([`crate::cluster::watch`]) and the hook's
//! decision counts ([`crate::hook_decisions`]), both shared by the qemu hook and the daemon,
//! both through [`update`] (lock, read, change, atomic write).

use crate::readfile::ReadError;
use rustix::fs::{FlockOperation, flock};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The longest a qemu hook waits for another process's lock on a state file before it goes on
/// without it (a warning; the guest start goes on): libvirt puts no timeout on a hook, and a
/// holder keeps the lock for one read and one small write.
pub const HOOK_WAIT: Duration = Duration::from_secs(2);

/// Holds a `flock(2)` (exclusive, or shared for a reader) on its lock file until dropped.
#[derive(Debug)]
pub struct Locked {
    _file: std::fs::File,
}

/// Opens (creating, never truncating) the lock file `path`, mode 0644 less the umask.
/// Non-blocking: a FIFO put where the lock file belongs would block `open(2)` for write until a
/// reader comes, and libvirt puts no timeout on a hook; anything but a regular file is refused.
///
/// # Errors
/// The operating system's error, or `InvalidInput` when `path` is not a regular file.
fn open(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.file_type().is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(f)
}

impl Locked {
    /// Takes the lock on `path`, waiting as long as another holder keeps it.
    ///
    /// # Errors
    /// The operating system's error opening or locking the file.
    pub fn exclusive(path: &Path) -> std::io::Result<Locked> {
        let f = open(path)?;
        flock(&f, FlockOperation::LockExclusive)?;
        Ok(Locked { _file: f })
    }

    /// Takes the lock on `path`, waiting at most `limit` (polled: `flock(2)` has no timeout), so
    /// a holder that hangs (a file system that stopped answering) never holds the caller up for
    /// longer.
    ///
    /// # Errors
    /// The operating system's error opening or locking the file; `TimedOut` when another holder
    /// kept the lock for `limit`.
    pub fn exclusive_within(path: &Path, limit: Duration) -> std::io::Result<Locked> {
        Locked::within(path, limit, FlockOperation::NonBlockingLockExclusive)
    }

    /// Takes the lock on `path` shared, as [`Locked::exclusive_within`] takes it exclusive: for a
    /// reader of a state file its writers change in place ([`crate::hook_decisions`]), which
    /// then never reads half a write.
    ///
    /// # Errors
    /// As [`Locked::exclusive_within`].
    pub fn shared_within(path: &Path, limit: Duration) -> std::io::Result<Locked> {
        Locked::within(path, limit, FlockOperation::NonBlockingLockShared)
    }

    /// The lock `op` (non-blocking) on `path`, polled for at most `limit`.
    fn within(path: &Path, limit: Duration, op: FlockOperation) -> std::io::Result<Locked> {
        let f = open(path)?;
        let deadline = Instant::now() + limit;
        let mut pause = Duration::from_micros(200);
        loop {
            match flock(&f, op) {
                Ok(()) => return Ok(Locked { _file: f }),
                Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
                Err(e) => return Err(e.into()),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{} stayed locked by another process for {} ms",
                        path.display(),
                        limit.as_millis()
                    ),
                ));
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }
}

/// The lock file of the state file `path`: `NAME.lock` beside it.
#[must_use]
pub fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Why [`update`] left a state file as it was: the directory, lock or state file, and the
/// operating system's error (`TimedOut` for a lock held past the wait).
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", .path.display())]
pub struct UpdateError {
    /// The state file's directory, its lock file, or the state file.
    pub path: PathBuf,
    /// The operating system's error, or the one the change returned.
    #[source]
    pub source: std::io::Error,
}

/// What [`update`] read of a state file: its bytes, None when it does not exist, or why it
/// could not be read (not a regular file, over the limit, the operating system's error).
pub type Old = Result<Option<Vec<u8>>, ReadError>;

/// Read, change and replace the small state file `path` under its lock ([`lock_path`]), so
/// that writers in other processes (qemu hooks started in parallel, the daemon) lose nothing:
///
/// 1. its directory is made when missing;
/// 2. the lock is taken, waiting at most `wait` ([`Locked::exclusive_within`]: libvirt puts no
///    timeout on a hook; a FIFO or directory in place of the lock is an error at once);
/// 3. the file is read, at most `limit` bytes, regular files only
///    ([`crate::readfile::read_regular_if_present`]: a FIFO in place of it never blocks), and
///    `change` is given what it holds: `Ok(None)` when it does not exist, the [`ReadError`]
///    when it cannot be read (the caller decides whether that is an error or a file to replace);
/// 4. `change` returns its answer and the new contents, or None to leave the file as it is;
/// 5. the new contents are written by `write` ([`crate::writefile::write_atomic`], or
///    [`crate::writefile::write_atomic_unsynced`] where a guest start waits), so a reader
///    without the lock sees the old file or the new one, never half of either.
///
/// # Errors
/// [`UpdateError`] naming the directory, the lock file or the state file when making,
/// locking or writing failed, or when `change` returned an error (named as the state file's);
/// the state file is then as it was.
pub fn update<T>(
    path: &Path,
    wait: Duration,
    limit: usize,
    write: fn(&Path, &[u8]) -> std::io::Result<()>,
    change: impl FnOnce(Old) -> std::io::Result<(T, Option<Vec<u8>>)>,
) -> Result<T, UpdateError> {
    let at = |path: &Path| {
        let path = path.to_path_buf();
        move |source| UpdateError { path, source }
    };
    let dir = path.parent().unwrap_or(Path::new(""));
    std::fs::create_dir_all(dir).map_err(at(dir))?;
    let lock = lock_path(path);
    let _held = Locked::exclusive_within(&lock, wait).map_err(at(&lock))?;
    let old = crate::readfile::read_regular_if_present(path, limit);
    let (answer, new) = change(old).map_err(at(path))?;
    if let Some(bytes) = new {
        write(path, &bytes).map_err(at(path))?;
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_waits_and_times_out() {
        let dir = std::env::temp_dir().join(format!("vcp-lockfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.lock");
        let held = Locked::exclusive(&path).unwrap();
        // flock(2) locks belong to the open file description: a second open in this process
        // contends as another process would.
        let start = Instant::now();
        let e = Locked::exclusive_within(&path, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
        assert!(start.elapsed() >= Duration::from_millis(50));
        drop(held);
        Locked::exclusive_within(&path, Duration::from_millis(50)).unwrap();
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A FIFO where the lock file belongs is refused at once (a blocking open for write would
    /// wait for a reader forever, and the hook with it).
    #[test]
    fn a_fifo_in_place_of_the_lock_is_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("vcp-lockfile-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.lock");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let start = Instant::now();
        let e = Locked::exclusive_within(&path, Duration::from_millis(50)).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(5), "{e}");
        assert!(
            e.to_string().contains("is not a regular file") || e.raw_os_error() == Some(6),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    /// [`update`] makes the directory, gives the change what the file holds (None at first),
    /// writes what it returns and nothing when it returns None; a change's error leaves the file
    /// as it was and names it; concurrent updates lose nothing.
    #[test]
    fn update_reads_changes_and_replaces_under_the_lock() {
        let dir = std::env::temp_dir().join(format!("vcp-lockfile-update-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("state/n");
        let bump = |old: Old| {
            let old = old.expect("readable");
            let n: u32 = old.map_or(0, |b| String::from_utf8(b).unwrap().parse().unwrap());
            std::io::Result::Ok((n, Some((n + 1).to_string().into_bytes())))
        };
        let write = crate::writefile::write_atomic_unsynced;
        assert_eq!(update(&path, HOOK_WAIT, 16, write, bump).unwrap(), 0);
        assert_eq!(update(&path, HOOK_WAIT, 16, write, bump).unwrap(), 1);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "2");
        // None: nothing written (the file keeps its inode).
        let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let before = ino(&path);
        update(&path, HOOK_WAIT, 16, write, |_| Ok(((), None))).unwrap();
        assert_eq!(
            (ino(&path), std::fs::read_to_string(&path).unwrap()),
            (before, "2".into())
        );
        // The change's error: named as the state file's, the file as it was.
        let e = update(&path, HOOK_WAIT, 16, write, |_| {
            Err::<((), _), _>(std::io::Error::other("no"))
        })
        .unwrap_err();
        assert_eq!(
            (e.path.as_path(), e.source.to_string()),
            (path.as_path(), "no".into())
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "2");
        // Over the limit: the change is told, and may replace the file.
        std::fs::write(&path, "x".repeat(17)).unwrap();
        update(&path, HOOK_WAIT, 16, write, |old| {
            assert!(matches!(old, Err(ReadError::TooLarge { .. })), "{old:?}");
            Ok(((), Some(b"0".to_vec())))
        })
        .unwrap();
        // Concurrent writers (each its own open file description, as another process's).
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        update(&path, HOOK_WAIT, 16, write, bump).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "80");
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A FIFO in place of the state file reaches the change as a read error at once; a FIFO or a
    /// directory in place of the lock, or a directory that cannot be made, is an error at once,
    /// naming what failed; the change is then not called.
    #[test]
    fn update_never_blocks_on_what_is_not_a_regular_file() {
        let dir = std::env::temp_dir().join(format!("vcp-lockfile-odd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = |p: &Path| {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                p,
                rustix::fs::FileType::Fifo,
                rustix::fs::Mode::from_raw_mode(0o644),
                0,
            )
            .unwrap();
        };
        let write = crate::writefile::write_atomic;
        let start = Instant::now();
        let path = dir.join("f");
        fifo(&path);
        let e = update(&path, HOOK_WAIT, 16, write, |old| match old {
            Err(ReadError::Io { source, .. }) => Err::<((), _), _>(source),
            other => panic!("{other:?}"),
        })
        .unwrap_err();
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
        // Refused before the change is called: the path named by the error.
        let refused = |path: &Path| {
            update(
                path,
                HOOK_WAIT,
                16,
                write,
                |_| -> std::io::Result<((), _)> {
                    panic!("{}: the change was called", path.display())
                },
            )
            .unwrap_err()
            .path
        };
        fifo(&dir.join("l.lock"));
        assert_eq!(refused(&dir.join("l")), dir.join("l.lock"));
        std::fs::create_dir_all(dir.join("d.lock")).unwrap();
        assert_eq!(refused(&dir.join("d")), dir.join("d.lock"));
        assert!(start.elapsed() < HOOK_WAIT, "{:?}", start.elapsed());
        std::fs::write(dir.join("file"), "x").unwrap();
        assert_eq!(refused(&dir.join("file/s")), dir.join("file"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
