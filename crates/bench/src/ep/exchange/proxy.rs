//! The ring initiator: the command ring a producer (GPU kernel or CPU thread) feeds, the proxy's
//! merging of adjacent puts, the commands of a phase, and the host producer.

use super::*;

/// The ring a producer pushes commands into and the proxy (this thread) consumes.
pub struct RingFeed<'a> {
    pub ring: CommandRing<'a>,
    /// Next position the proxy consumes (persists across phases, as the producer's head does).
    pub next: &'a mut u64,
    /// Merge contiguous puts into one write up to this many bytes (`None`: one write per
    /// command).
    pub merge: Option<usize>,
    /// `[dst][channel]` (flattened): the writes the count block staged for `dst` announces.
    /// When the proxy's merging posted other counts, it rewrites that block before the signal.
    pub staged_writes: &'a [u32],
}

/// The proxy's merging of ring commands: a put extends the pending write when it goes to the
/// same destination and channel and its bytes follow the pending write's on both sides (what a
/// proxy batching adjacent commands, or posting with `FI_MORE`, sends as one write). The
/// producer's commands are unchanged; only what reaches the fabric differs.
#[derive(Debug, Default)]
pub(super) struct Merger {
    pub(super) pending: Option<(Put, u64)>,
    pub(super) limit: usize,
}

impl Merger {
    /// Offers `p` (not a signal); returns the write to post first when `p` does not extend the
    /// pending one, with the commands it covers.
    pub(super) fn offer(&mut self, p: Put) -> Option<(Put, u64)> {
        if let Some((w, n)) = &mut self.pending {
            if w.dst == p.dst
                && w.index == p.index
                && w.local_off + w.len == p.local_off
                && w.remote_off + w.len == p.remote_off
                && w.len + p.len <= self.limit
            {
                w.len += p.len;
                *n += 1;
                return None;
            }
        }
        self.pending.replace((p, 1))
    }

    /// The pending write, if any.
    pub(super) fn flush(&mut self) -> Option<(Put, u64)> {
        self.pending.take()
    }
}

/// The commands of a phase: one per message, then one signal per destination.
/// A signal is a command with the fence bit (it is posted after the quiet, so it orders after
/// every earlier put) whose `signal` field is the number of writes it announces.
pub fn commands(me: u32, world: u32, layout: &PhaseLayout) -> (Vec<Command>, Vec<Command>) {
    let cmd = |p: &Put| Command {
        dst: p.dst as u16,
        signal: p.index,
        len: p.len as u32,
        remote_off: p.remote_off as u64,
        local_off: p.local_off as u64,
        fence: p.signal,
    };
    let per_dst = writes_to(world, &layout.puts);
    let puts = layout.puts.iter().map(cmd).collect();
    let sigs = (1..world)
        .map(|k| {
            let dst = (me + k) % world;
            cmd(&layout.signal(me, dst, per_dst[dst as usize] as u16))
        })
        .collect();
    (puts, sigs)
}

/// A CPU thread in the kernel's place: pushes `puts`, then `signals` (receivers count the writes
/// a signal announces, so it needs no quiet before it), then waits in quiet. Returns (first push,
/// last put pushed) in `CLOCK_REALTIME` ns.
pub fn host_produce(
    ring: CommandRing<'_>,
    head: u64,
    puts: &[Command],
    signals: &[Command],
    stop: &AtomicBool,
) -> Result<(u64, u64), String> {
    let mut pos = head;
    let go_on = || !stop.load(Ordering::Acquire);
    let t0 = realtime_ns();
    for c in puts {
        if !ring.host_push(pos, c, go_on) {
            return Err("host producer: stopped while waiting for a credit".into());
        }
        pos += 1;
    }
    let t1 = realtime_ns();
    let quiet = |pos: u64| {
        let mut n = 0u64;
        while ring.done() < pos {
            n += 1;
            if n % 1024 == 0 {
                if !go_on() {
                    return Err("host producer: stopped in quiet".to_string());
                }
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
        Ok(())
    };
    for c in signals {
        if !ring.host_push(pos, c, go_on) {
            return Err("host producer: stopped while waiting for a credit".into());
        }
        pos += 1;
    }
    quiet(pos)?;
    Ok((t0, t1))
}

/// What the proxy sent in a phase.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Writes posted per `[dst][channel]` (what the count block must announce).
    pub(super) wrote: Vec<u32>,
    pub(super) channels: usize,
    /// The CQ data of a put of channel 0 (the channel is the low 16 bits).
    pub(super) data: u64,
    pub(super) local_cmds: u64,
    pub(super) remote_cmds: u64,
    pub(super) remote_writes: u64,
    /// Most commands one write stood for.
    pub(super) widest: u64,
    /// This rank's messages to itself copied.
    pub(super) own_got: u64,
}

impl Tally {
    /// A put (possibly merged, standing for `n` commands) goes out: a local copy or a write.
    pub(super) fn send(
        &mut self,
        ex: &mut Exchange<'_>,
        clock: &mut Clock,
        times: &mut PhaseTimes,
        (w, n): (Put, u64),
    ) -> Result<(), BenchError> {
        times.merged += n - 1;
        self.widest = self.widest.max(n);
        if w.dst == ex.me {
            ex.copy_local(&w, clock)?;
            self.own_got += n;
            self.local_cmds += n;
        } else {
            ex.post(&w, self.data | w.index as u64, clock, times)?;
            self.wrote[w.dst as usize * self.channels + w.index as usize] += 1;
            self.remote_cmds += n;
            self.remote_writes += 1;
        }
        Ok(())
    }
}
