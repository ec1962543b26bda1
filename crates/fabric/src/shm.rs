//! Stale shared-memory regions of the `shm` provider.
//!
//! libfabric's `shm` provider (1.17 and later) names an endpoint's region in `/dev/shm` after the
//! process id (`<pid>:<endpoint>:<...>`) and removes it when the endpoint closes. A process killed
//! by a signal never closes it, and when the kernel later hands the same pid to a new process, that
//! process's `fi_enable` finds the name taken and fails with `-FI_EBUSY`. A rank that was killed
//! (a fault test, an OOM kill, a `kill -9` of a hung job) can therefore make a later, unrelated
//! job fail at start.
//!
//! Before this process opens its first `shm` endpoint, no region can be its own: every entry named
//! after its pid belongs to a dead process that had the same pid, and is removed. Nothing else in
//! `/dev/shm` is touched.

use std::sync::Once;

static CLEARED: Once = Once::new();

/// Removes `/dev/shm/<this pid>:*` once per process, before the first `shm` endpoint opens.
pub(crate) fn clear_stale_regions() {
    CLEARED.call_once(|| {
        let _ = remove_named_after(std::path::Path::new("/dev/shm"), std::process::id());
    });
}

/// Removes the entries of `dir` whose name starts with `<pid>:`; returns how many went.
fn remove_named_after(dir: &std::path::Path, pid: u32) -> std::io::Result<usize> {
    let prefix = format!("{pid}:");
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(&prefix)
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_entries_named_after_the_pid_go() {
        let dir = std::env::temp_dir().join(format!("efabench-shm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for n in [
            "4242:0:0",
            "4242:1:0",
            "42420:0:0",
            "14242:0:0",
            "4242",
            "other",
        ] {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        assert_eq!(remove_named_after(&dir, 4242).unwrap(), 2);
        let mut left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["14242:0:0", "4242", "42420:0:0", "other"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
