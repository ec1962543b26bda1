//! The calling thread's CPU affinity: which CPUs it may run on, and binding it to some of them.
//! Benchmarks place a rank's data-path thread with it (`alltoall --bind`, the queue's
//! consumers); it lives here because this crate is where the project's libc calls are fenced.

use std::io;

/// The CPUs the calling thread may run on now, ascending.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data, zeroed is a valid empty set; sched_getaffinity(0, ...)
    // writes at most size_of::<cpu_set_t>() bytes into it; CPU_ISSET reads inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// Lets the calling thread run only on `cpus` (other threads of the process keep theirs).
pub fn bind_current_thread(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no CPU to bind to",
        ));
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET writes inside it (the index is reduced below
    // CPU_SETSIZE); sched_setaffinity(0, ...) reads the set and changes only the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c % libc::CPU_SETSIZE as usize, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binds_the_calling_thread_and_restores_it() {
        let all = allowed_cpus().unwrap();
        assert!(!all.is_empty());
        // A thread of its own, so the test harness's thread keeps its mask whatever happens.
        std::thread::spawn(move || {
            let last = *all.last().unwrap();
            bind_current_thread(&[last]).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![last]);
            bind_current_thread(&all).unwrap();
            assert_eq!(allowed_cpus().unwrap(), all);
            assert!(bind_current_thread(&[]).is_err());
        })
        .join()
        .unwrap();
    }
}
