//! The one way the tool reads a file it takes facts from (host facts, libvirt's QEMU capability
//! cache and cpu_map, cluster facts, the policy): regular files only, and never more than a limit.
//!
//! Such a path comes from a command line, a policy or a directory listing, and the hook reads it
//! while libvirt waits to start a guest. A FIFO would block the open (and the guest start) forever;
//! `/dev/zero` or `/dev/urandom` never end; a sparse file of hundreds of megabytes costs its size
//! in memory before any limit is checked. So the file is opened with `O_NONBLOCK` (a FIFO without
//! a writer opens at once), checked to be a regular file on the open descriptor (no race with a
//! rename), refused when its size is over the limit, and read through a `take` of the limit plus
//! one byte (a file that grows, or a `/proc` file whose size says 0, still stops there).
//!
//! This module imports nothing of the crate: everything that reads such a file can use it.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest host-facts file read, in bytes (16 MiB, the project's input limit: libvirt's
/// domcapabilities are about 100 KiB, its QEMU capability cache files a few hundred KiB).
pub const MAX_FACT_BYTES: usize = 16 * 1024 * 1024;

/// Why [`read_regular`] read nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be opened or read, or is not a regular file (the reason then says what
    /// it is: a FIFO, a directory, a device...).
    #[error("cannot read {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's reason, or what the file is instead of a regular file.
        source: std::io::Error,
    },
    /// The file is over the limit.
    #[error("{} is over the limit of {limit} bytes (at least {size} bytes)", .path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size as `fstat` gives it, or the bytes read when it grew past the limit.
        size: u64,
        /// The limit, in bytes.
        limit: usize,
    },
}

/// What a file that is not a regular file is, for a message.
pub(crate) fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// `path` opened for reading, with its metadata, when it is a regular file. The open never
/// blocks (see the module docs).
///
/// # Errors
/// [`ReadError::Io`] when it cannot be opened or is not a regular file (a FIFO, a directory, a
/// device).
pub fn open_regular(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_owned(),
        source,
    };
    // O_NONBLOCK: opening a FIFO for reading waits for a writer without it. O_NOCTTY: a terminal
    // named by mistake must not become the hook's controlling terminal.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        let what = kind(meta.file_type());
        return Err(io(std::io::Error::other(format!(
            "{what}, not a regular file"
        ))));
    }
    Ok((file, meta))
}

/// The bytes of `path`, a regular file of at most `limit` bytes.
///
/// # Errors
/// As [`open_regular`], and [`ReadError::Io`] for a failed read; [`ReadError::TooLarge`] when
/// it is over `limit` bytes.
pub fn read_regular(path: &Path, limit: usize) -> Result<Vec<u8>, ReadError> {
    let (file, meta) = open_regular(path)?;
    let too_large = |size| ReadError::TooLarge {
        path: path.to_owned(),
        size,
        limit,
    };
    // The size first: a sparse file of 300 MB costs nothing to refuse.
    if meta.len() > limit as u64 {
        return Err(too_large(meta.len()));
    }
    // Sized once: `take` hides the file's size from `read_to_end`, which would grow the buffer
    // by doubling (a 200 KiB QEMU capability cache file, read at every guest start, was seven
    // reallocations and their page faults).
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).map_or(0, |n| n + 1));
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| ReadError::Io {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// [`read_regular`], with a file that does not exist read as none: for a state file that the
/// first writer makes.
///
/// # Errors
/// As [`read_regular`], but for `NotFound`.
pub fn read_regular_if_present(path: &Path, limit: usize) -> Result<Option<Vec<u8>>, ReadError> {
    match read_regular(path, limit) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(ReadError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Every entry named `*.xml` directly in `dir`, whatever it is, sorted: for readers that must
/// say what they cannot read (a dangling link or a FIFO in a cluster's facts directory is a host
/// missing, not a file to skip).
///
/// # Errors
/// The operating system's error when `dir` cannot be listed.
pub fn xml_entries(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_name().as_encoded_bytes().ends_with(b".xml") {
            v.push(e.path());
        }
    }
    v.sort();
    Ok(v)
}

/// The regular `*.xml` files directly in `dir`, sorted; none when it cannot be read. (A FIFO or
/// a device would block the hook: only regular files.)
#[must_use]
pub fn xml_files(dir: &Path) -> Vec<PathBuf> {
    let mut v = xml_entries(dir).unwrap_or_default();
    v.retain(|p| p.is_file());
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("vcp-readfile-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_a_regular_file_up_to_the_limit() {
        let d = scratch("ok");
        let f = d.join("f.xml");
        std::fs::write(&f, "12345").unwrap();
        assert_eq!(read_regular(&f, 5).unwrap(), b"12345");
        let e = read_regular(&f, 4).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::TooLarge {
                    size: 5,
                    limit: 4,
                    ..
                }
            ),
            "{e}"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn refuses_what_is_not_a_regular_file_without_blocking() {
        let d = scratch("odd");
        let fifo = d.join("fifo.xml");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (p, what) in [
            (fifo.as_path(), "a FIFO"),
            (d.as_path(), "a directory"),
            (Path::new("/dev/zero"), "a character device"),
        ] {
            let e = read_regular(p, 1024).unwrap_err().to_string();
            assert!(
                e.contains(&p.display().to_string()) && e.contains(what),
                "{e}"
            );
        }
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_sparse_file_over_the_limit_is_refused_unread() {
        let d = scratch("sparse");
        let f = std::fs::File::create(d.join("big.xml")).unwrap();
        f.set_len(300 * 1024 * 1024).unwrap();
        let e = read_regular(&d.join("big.xml"), MAX_FACT_BYTES).unwrap_err();
        assert!(
            matches!(e, ReadError::TooLarge { size, .. } if size == 300 * 1024 * 1024),
            "{e}"
        );
        std::fs::remove_dir_all(&d).ok();
    }
}
