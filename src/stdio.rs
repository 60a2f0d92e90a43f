//! The standard streams as the front ends use them: messages to stderr that can never end the
//! run, and whether stdout was open when the process started.
//!
//! `eprintln!` panics when stderr cannot be written (closed, a full disk, `2>/dev/full`, a pipe
//! whose reader left), and the release build aborts on a panic: a warning must never cost the
//! result it accompanies, so every message goes through [`message`] / [`message_line`], which drop
//! what cannot be written.
//!
//! A closed stdout (`>&-`) is invisible once Rust's runtime has started: it puts `/dev/null` on a
//! closed standard descriptor before `main`. The binary therefore calls [`note_stdout_at_start`]
//! from an ELF constructor, which runs before the runtime, and [`stdout_open`] reports what it saw
//! (or, when it was not called, whether descriptor 1 is open now).

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// [`STDOUT_AT_START`]: not recorded (the library used without the binary's constructor).
const UNKNOWN: u8 = 0;
/// [`STDOUT_AT_START`]: descriptor 1 was open.
const OPEN: u8 = 1;
/// [`STDOUT_AT_START`]: descriptor 1 was closed.
const CLOSED: u8 = 2;

/// What [`note_stdout_at_start`] saw.
static STDOUT_AT_START: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Write `text` to stderr as it is, ignoring a failed write.
pub fn message(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Write `line` and a newline to stderr, ignoring a failed write.
pub fn message_line(line: &str) {
    message(&format!("{line}\n"));
}

/// Whether the descriptor is open (`fcntl(F_GETFD)` answers for it; a closed one gives EBADF).
fn fd_open(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    rustix::io::fcntl_getfd(fd).is_ok()
}

/// Whether descriptor 1 is open now.
fn stdout_fd_open() -> bool {
    // Only fd 1's flags are asked for, never read or written: a closed descriptor 1 is what this
    // looks for, and the kernel answers EBADF for it.
    fd_open(rustix::stdio::stdout())
}

/// Record whether stdout (descriptor 1) is open. Meant to run before Rust's runtime starts (an
/// ELF constructor of the binary); it only asks the kernel and stores the answer.
pub fn note_stdout_at_start() {
    let seen = if stdout_fd_open() { OPEN } else { CLOSED };
    STDOUT_AT_START.store(seen, Ordering::Relaxed);
}

/// Whether results can go to stdout: it was open when the process started (when that was
/// recorded) and descriptor 1 is open now.
#[must_use]
pub fn stdout_open() -> bool {
    STDOUT_AT_START.load(Ordering::Relaxed) != CLOSED && stdout_fd_open()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_and_closed_descriptors() {
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(fd_open(std::os::fd::AsFd::as_fd(&f)));
        // SAFETY: a descriptor number far above anything a test process opens: the borrow only
        // asks the kernel for its flags (EBADF), never reads, writes or closes it.
        let closed = unsafe { std::os::fd::BorrowedFd::borrow_raw(1_000_000) };
        assert!(!fd_open(closed));
        assert!(stdout_fd_open(), "the test harness's stdout is open");
    }
}
