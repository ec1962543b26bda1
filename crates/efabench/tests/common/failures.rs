//! The failures every benchmark's tests provoke the same way. A rank hit in the middle of a run,
//! killed (SIGKILL) or frozen (SIGSTOP) while the others measure: the others must end within a
//! bound, fail, and name it ([`the_others_name_the_hit_rank`]). A payload corrupted on rank 1
//! by the `test-hooks` build: rank 0 must fail verification ([`corrupted`]). Written once so
//! that every benchmark is held to the same guarantee with the same messages.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use super::{free_port, rank, recorded_env, text, Recorded};

/// How a rank is hit during a run.
pub struct Hit {
    /// The rank hit.
    pub victim: u32,
    /// `Signal::KILL` (it dies) or `Signal::STOP` (it freezes).
    pub signal: Signal,
    /// How long after the start: the job is measuring by then.
    pub after: Duration,
    /// How long the other ranks may take to end after the hit.
    pub within: Duration,
}

impl Hit {
    /// Rank `victim` killed `after` the start; the others end within `within`.
    pub fn kill(victim: u32, after: Duration, within: Duration) -> Hit {
        Hit {
            victim,
            signal: Signal::KILL,
            after,
            within,
        }
    }

    /// Rank `victim` frozen `after` the start; the others end within `within`.
    pub fn stop(victim: u32, after: Duration, within: Duration) -> Hit {
        Hit {
            signal: Signal::STOP,
            ..Hit::kill(victim, after, within)
        }
    }

    fn what(&self) -> String {
        if self.signal == Signal::KILL {
            "was killed".into()
        } else if self.signal == Signal::STOP {
            "froze".into()
        } else {
            format!("got {:?}", self.signal)
        }
    }
}

/// Starts `world` ranks of `args` by hand and hits one as `hit` says. Every other rank must end
/// within `hit.within`, fail, and name the hit rank (`rank V`) in its stderr; the hit rank is
/// killed once they have. Returns the other ranks' output, by rank.
pub fn the_others_name_the_hit_rank(world: u32, args: &[&str], hit: Hit) -> Vec<(u32, Output)> {
    let port = free_port();
    let mut kids: Vec<Child> = (0..world)
        .map(|r| rank(r, world, port, args, &[]))
        .collect();
    std::thread::sleep(hit.after);
    let victim = hit.victim as usize;
    if let Some(pid) = Pid::from_raw(kids[victim].id() as i32) {
        rustix::process::kill_process(pid, hit.signal).expect("signal the rank");
    }
    let t0 = Instant::now();
    for r in (0..kids.len()).filter(|&r| r != victim) {
        while kids[r].try_wait().unwrap().is_none() {
            if t0.elapsed() > hit.within {
                for k in &mut kids {
                    let _ = k.kill();
                    let _ = k.wait();
                }
                panic!(
                    "rank {r} still running {:?} after rank {} {}",
                    hit.within,
                    hit.victim,
                    hit.what()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let _ = kids[victim].kill();
    let mut others = Vec::new();
    for (r, k) in kids.into_iter().enumerate() {
        let pid = k.id();
        let o = k.wait_with_output().unwrap();
        if r == victim {
            // Killed, it could not remove its shm regions; nothing of a test stays behind.
            efabench_bootstrap::launcher::remove_shm_files_of(
                pid,
                std::path::Path::new("/dev/shm"),
            );
            continue;
        }
        assert!(!o.status.success(), "rank {r}");
        let err = text(&o.stderr);
        assert!(
            err.contains(&format!("rank {}", hit.victim)),
            "rank {r} must name rank {}, which {}: {err}",
            hit.victim,
            hit.what()
        );
        others.push((r as u32, o));
    }
    others
}

/// A job of `world` ranks writing records (see [`recorded_env`]), the fault hook `hook` set on
/// rank 1 (a payload it corrupts): rank 0 must exit 1 saying a payload failed verification.
pub fn corrupted(name: &str, world: u32, args: &[&str], hook: &str) -> Recorded {
    let run = recorded_env(name, world, args, &[], &[(hook, "1")]);
    let err = run.stderr(0);
    assert_eq!(
        run.outs[0].status.code(),
        Some(1),
        "rank 0 must fail: {err}"
    );
    assert!(err.contains("failed verification"), "{err}");
    run
}
