//! A crash inside a provider call (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) made known before
//! the process dies.
//!
//! Some providers install their own handlers for these signals when they are loaded (Debian's
//! libfabric 1.17 writes `NAME.80s-PID,HOST.btr` backtrace files from one); a handler that
//! then blocks leaves the process alive with its other threads — the bootstrap's heartbeats
//! among them — still running, so the job would wait for a rank that will never move again.
//! [`install`] replaces those handlers with one that only does async-signal-safe things:
//! it writes the signal number as one byte on a pipe opened beforehand, waits (`poll`, at most
//! [`ACK_WAIT_MS`]) for a byte on a second pipe that says the news went out, then restores the
//! default action and re-raises the signal, so the process ends by that signal and whoever
//! started it sees which. A thread of the caller reads the first pipe ([`CrashWatch::wait`]),
//! tells the job, and acknowledges ([`CrashWatch::ack`]).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

use core::ffi::c_int;

/// Longest wait inside the handler for the news to leave the process.
pub const ACK_WAIT_MS: c_int = 1000;

/// The signals a crash inside a library call raises.
pub const CRASH_SIGNALS: [c_int; 5] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
];

static NEWS_FD: AtomicI32 = AtomicI32::new(-1);
static ACK_FD: AtomicI32 = AtomicI32::new(-1);

/// The caller's ends of the two pipes.
pub struct CrashWatch {
    news: File,
    ack: File,
}

impl CrashWatch {
    /// Blocks until a crash signal arrives (its number) or [`CrashStop::stop`] was called
    /// (`None`).
    pub fn wait(&mut self) -> Option<c_int> {
        let mut b = [0u8; 1];
        match self.news.read(&mut b) {
            Ok(1) if b[0] != 0 => Some(b[0] as c_int),
            _ => None,
        }
    }

    /// Lets the handler go on to end the process.
    pub fn ack(&mut self) {
        let _ = self.ack.write_all(&[1]);
    }
}

/// A handle that wakes [`CrashWatch::wait`] with `None` (the run ended normally).
pub struct CrashStop(File);

impl CrashStop {
    pub fn stop(mut self) {
        let _ = self.0.write_all(&[0]);
    }
}

fn pipe() -> std::io::Result<(File, File)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

extern "C" fn on_crash(sig: c_int) {
    let news = NEWS_FD.load(Ordering::Relaxed);
    let ack = ACK_FD.load(Ordering::Relaxed);
    // SAFETY: only async-signal-safe calls (write, poll, signal, raise) on descriptors that stay
    // open for the life of the process (they are leaked on purpose by `install`).
    unsafe {
        if news >= 0 {
            let b = sig as u8;
            libc::write(news, (&b as *const u8).cast(), 1);
            if ack >= 0 {
                let mut p = libc::pollfd {
                    fd: ack,
                    events: libc::POLLIN,
                    revents: 0,
                };
                libc::poll(&mut p, 1, ACK_WAIT_MS);
            }
        }
        libc::signal(sig, libc::SIG_DFL);
        // Blocked while this handler runs: delivered, with the default action, on return.
        libc::raise(sig);
    }
}

/// Installs the crash handler for [`CRASH_SIGNALS`] (replacing any a provider installed) and
/// returns the pipe ends to watch. Call it after the provider was loaded and the endpoints
/// opened. Installing twice replaces the first watch.
pub fn install() -> std::io::Result<(CrashWatch, CrashStop)> {
    let (news_r, news_w) = pipe()?;
    let (ack_r, ack_w) = pipe()?;
    // The handler's ends live as long as the process.
    let news_fd: RawFd = std::os::fd::IntoRawFd::into_raw_fd(news_w.try_clone()?);
    let ack_fd: RawFd = std::os::fd::IntoRawFd::into_raw_fd(ack_r);
    NEWS_FD.store(news_fd, Ordering::Relaxed);
    ACK_FD.store(ack_fd, Ordering::Relaxed);
    for sig in CRASH_SIGNALS {
        // SAFETY: a zeroed sigaction is a valid starting point; the handler is an
        // `extern "C" fn(c_int)` that only makes async-signal-safe calls.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_crash as extern "C" fn(c_int) as usize;
            sa.sa_flags = libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok((
        CrashWatch {
            news: news_r,
            ack: ack_w,
        },
        CrashStop(news_w),
    ))
}

/// Raises SIGSEGV in the calling thread, as a bad access inside a library call would (for
/// test hooks).
pub fn raise_segv() {
    // SAFETY: raise has no memory-safety preconditions.
    unsafe {
        libc::raise(libc::SIGSEGV);
    }
}
