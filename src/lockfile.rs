//! The one way the tool serialises writers of a state file: an exclusive `flock(2)` on a lock
//! file beside it (`NAME.lock`), held until the guard is dropped (or the process ends, so a
//! crashed writer never leaves the lock taken).
//!
//! The lock is on a file of its own, not on the state file: the state file is replaced by a
//! rename ([`crate::writefile::write_atomic`]), and a lock on the replaced inode would not keep
//! the next writer out. Users: the cluster CPU seen ([`crate::cluster::watch`]) and the hook's
//! decision counts ([`crate::hook_decisions`]), both shared by the qemu hook and the daemon.

use rustix::fs::{FlockOperation, flock};
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest a qemu hook waits for another process's lock on a state file before it goes on
/// without it (a warning; the guest start goes on): libvirt puts no timeout on a hook, and a
/// holder keeps the lock for one read and one small write.
pub const HOOK_WAIT: Duration = Duration::from_secs(2);

/// Holds an exclusive `flock(2)` on its lock file until dropped.
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
        let f = open(path)?;
        let deadline = Instant::now() + limit;
        let mut pause = Duration::from_micros(200);
        loop {
            match flock(&f, FlockOperation::NonBlockingLockExclusive) {
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
}
