//! Which completion-queue model should multi-rail code use? Streams
//! `fi_writedata` of 64 KiB–1 MiB from rank 0 to rank 1 over 1, 2 and 4 rails, striped
//! (`split`) or whole messages in turn (`round_robin_rail`), with
//! * **one-thread**: one thread posts on every rail and polls every rail's CQ in turn, or
//! * **thread-per-rail**: one thread per rail owns that rail (post and CQ); the rails move into
//!   the threads ([`RailGroup::into_rails`]) and back ([`RailGroup::from_rails`]).
//!
//! The target uses the same model to count the remote CQ data of every stripe, then writes an
//! 8-byte acknowledgement back on rail 0; the sender's time runs from its first post to that
//! acknowledgement. [`SLOTS`] messages are in flight: message `i` goes to target slot
//! `i % SLOTS` from source slot `i % (SLOTS + 1)` (each source slot holds a pattern that depends
//! on the slot and the repetition), and a slot is reused only after its previous write completed.
//! After every run the target checks that each slot holds the source slot of the last message
//! written there, byte for byte, so the stripes of every rail are verified.
//!
//! Each configuration runs `reps` times (default 3), the two models alternating, and the table
//! gives the median. On loopback the rails are virtual (endpoints on one domain), so the figures
//! compare the software models, not links.
//!
//! `cargo run --release -p efabench-fabric --example multirail -- [shm|tcp] [reps] [MiB per run]`
//! (started alone, it launches its two ranks through bootstrap).

use std::sync::Arc;
use std::time::{Duration, Instant};

use efabench_bootstrap::{detect_from_process_env, launcher, Bootstrap, LaunchFlags};
use efabench_fabric::*;

/// Messages in flight (target slots).
const SLOTS: usize = 16;
const SRC_SLOTS: usize = SLOTS + 1;
const SIZES: [usize; 3] = [64 << 10, 256 << 10, 1 << 20];
const RAILS: [u32; 3] = [1, 2, 4];
const ACK_CTX: u64 = u64::MAX - 1;
const WAIT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Strategy {
    Split,
    RoundRobin,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Model {
    OneThread,
    ThreadPerRail,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Split => "split",
            Strategy::RoundRobin => "round-robin",
        }
    }
}

impl Model {
    fn name(self) -> &'static str {
        match self {
            Model::OneThread => "one-thread",
            Model::ThreadPerRail => "thread-per-rail",
        }
    }
}

fn pattern(src_slot: usize, rep: usize, j: usize) -> u8 {
    (src_slot * 31 + rep * 17 + j * 7 + j / 251) as u8
}

/// The stripes of every message, the same on both sides and in every thread.
fn schedule(msgs: usize, size: usize, rails: usize, strategy: Strategy) -> Arc<Vec<Vec<Stripe>>> {
    let mut first = 0;
    let v = (0..msgs)
        .map(|i| match strategy {
            Strategy::Split => {
                let s = split(size, rails, first);
                first = next_first_rail(&s, rails);
                s
            }
            Strategy::RoundRobin => vec![Stripe {
                rail: round_robin_rail(i as u64, rails),
                off: 0,
                len: size,
            }],
        })
        .collect();
    Arc::new(v)
}

/// What one rail needs to write to the peer (all `Copy`, so it can travel into a thread).
#[derive(Clone, Copy)]
struct RailTarget {
    peer: Peer,
    src: RegionId,
    dst: RemoteRegion,
}

/// Spins on `f` until it returns `Some`, yielding the CPU now and then (the machine is shared),
/// until `deadline`.
fn spin<T>(deadline: Instant, what: &str, mut f: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let mut empty = 0u32;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        empty = empty.wrapping_add(1);
        if empty % 64 == 0 {
            std::thread::yield_now();
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: what.into(),
                    secs: WAIT.as_secs_f64(),
                });
            }
        }
    }
}

/// Sends the stripes of `sched` that belong to `mine` (all rails, or one), keeping one busy flag
/// per (rail, slot). `rails[k]` is rail `mine[k]`. Returns whether rail 0 saw the ack.
fn send(
    rails: &[&Rail],
    mine: &[usize],
    targets: &[RailTarget],
    sched: &[Vec<Stripe>],
    size: usize,
    deadline: Instant,
) -> Result<bool> {
    let mut busy = vec![[false; SLOTS]; rails.len()];
    let mut comps = [Completion::default(); 16];
    let mut acked = false;
    let mut poll_all = |busy: &mut Vec<[bool; SLOTS]>| -> Result<bool> {
        let mut any = false;
        for (k, r) in rails.iter().enumerate() {
            let n = r.poll(&mut comps)?;
            for c in &comps[..n] {
                if c.context == Completion::REMOTE_CQ_DATA {
                    acked = true;
                } else {
                    busy[k][c.context as usize] = false;
                }
            }
            any |= n > 0;
        }
        Ok(any)
    };
    for (i, stripes) in sched.iter().enumerate() {
        let slot = i % SLOTS;
        let src_off = (i % SRC_SLOTS) * size;
        for st in stripes {
            let Some(k) = mine.iter().position(|&m| m == st.rail) else {
                continue;
            };
            if busy[k][slot] {
                spin(deadline, "a write completion", || {
                    poll_all(&mut busy)?;
                    Ok((!busy[k][slot]).then_some(()))
                })?;
            }
            let t = &targets[st.rail];
            let data = CqData {
                source: 0,
                tag: i as u16,
            }
            .to_u64();
            let dst_off = (slot * size + st.off) as u64;
            rails[k].post(Op::Write {
                peer: t.peer,
                local: t.src.range(src_off + st.off, st.len),
                remote: t.dst.at(dst_off),
                data: Some(data),
                flags: Flags::NONE,
                ctx: slot as u64,
            })?;
            busy[k][slot] = true;
        }
    }
    spin(deadline, "the last write completions", || {
        poll_all(&mut busy)?;
        Ok(busy.iter().all(|b| b.iter().all(|x| !x)).then_some(()))
    })?;
    Ok(acked)
}

/// Counts remote CQ data on `rails` until `expected[k]` arrived on each.
fn receive(rails: &[&Rail], expected: &[usize], deadline: Instant) -> Result<()> {
    let mut got = vec![0usize; rails.len()];
    let mut comps = [Completion::default(); 16];
    spin(deadline, "the writes' remote CQ data", || {
        for (k, r) in rails.iter().enumerate() {
            let n = r.poll(&mut comps)?;
            got[k] += comps[..n]
                .iter()
                .filter(|c| c.context == Completion::REMOTE_CQ_DATA)
                .count();
        }
        Ok((got.iter().zip(expected).all(|(g, e)| g >= e)).then_some(()))
    })
}

/// Runs `work(rails_of_this_thread, rail_indices)` once for all rails (one thread) or once per
/// rail on its own thread, and gives the group back with the results.
fn with_model<T: Send + 'static>(
    g: RailGroup,
    model: Model,
    work: impl Fn(&[&Rail], &[usize]) -> Result<T> + Send + Sync + 'static,
) -> Result<(RailGroup, Vec<T>)> {
    match model {
        Model::OneThread => {
            let all: Vec<usize> = (0..g.len()).collect();
            let rails: Vec<&Rail> = g.rails().iter().collect();
            let out = work(&rails, &all)?;
            Ok((g, vec![out]))
        }
        Model::ThreadPerRail => {
            let work = Arc::new(work);
            let handles: Vec<_> = g
                .into_rails()
                .into_iter()
                .enumerate()
                .map(|(k, rail)| {
                    let work = work.clone();
                    std::thread::spawn(move || {
                        let out = work(&[&rail], &[k]);
                        (rail, out)
                    })
                })
                .collect();
            let mut rails = Vec::new();
            let mut outs = Vec::new();
            let mut err = None;
            for h in handles {
                let (rail, out) = h
                    .join()
                    .map_err(|_| Error::Usage("a rail thread panicked".into()))?;
                rails.push(rail);
                match out {
                    Ok(v) => outs.push(v),
                    Err(e) => err = Some(e),
                }
            }
            let g = RailGroup::from_rails(rails)?;
            match err {
                Some(e) => Err(e),
                None => Ok((g, outs)),
            }
        }
    }
}

struct Run {
    rails: u32,
    strategy: Strategy,
    model: Model,
    size: usize,
    gbps: Vec<f64>,
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    b: &Bootstrap,
    mut g: RailGroup,
    targets: &[RailTarget],
    ack: (RegionId, RemoteRegion, Peer),
    src: &HostBuffer,
    dst: &HostBuffer,
    size: usize,
    msgs: usize,
    strategy: Strategy,
    model: Model,
    rep: usize,
) -> Result<(RailGroup, Option<f64>), String> {
    let e = |e: Error| e.to_string();
    let sched = schedule(msgs, size, g.len(), strategy);
    if b.rank() == 0 {
        for s in 0..SRC_SLOTS {
            let p: Vec<u8> = (0..size).map(|j| pattern(s, rep, j)).collect();
            src.write_at(s * size, &p).map_err(e)?;
        }
    }
    b.barrier().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + WAIT;
    let mut gbps = None;
    if b.rank() == 0 {
        let t0 = Instant::now();
        let targets = targets.to_vec();
        let s2 = sched.clone();
        let (g2, acks) = with_model(g, model, move |rails, mine| {
            send(rails, mine, &targets, &s2, size, deadline)
        })
        .map_err(e)?;
        g = g2;
        if !acks.iter().any(|&a| a) {
            let mut c = [Completion::default(); 4];
            spin(deadline, "the target's acknowledgement", || {
                let n = g.rail(0).poll(&mut c)?;
                Ok(c[..n]
                    .iter()
                    .any(|c| c.context == Completion::REMOTE_CQ_DATA)
                    .then_some(()))
            })
            .map_err(e)?;
        }
        let secs = t0.elapsed().as_secs_f64();
        gbps = Some((msgs * size) as f64 * 8.0 / secs / 1e9);
    } else {
        let mut expected = vec![0usize; g.len()];
        for st in sched.iter().flatten() {
            expected[st.rail] += 1;
        }
        let (g2, _) = with_model(g, model, move |rails, mine| {
            let exp: Vec<usize> = mine.iter().map(|&k| expected[k]).collect();
            receive(rails, &exp, deadline)
        })
        .map_err(e)?;
        g = g2;
        let (ack_src, ack_dst, peer) = ack;
        let r0 = g.rail(0);
        r0.post(Op::Write {
            peer,
            local: ack_src.range(0, 8),
            remote: ack_dst.at(0),
            data: Some(1),
            flags: Flags::NONE,
            ctx: ACK_CTX,
        })
        .map_err(e)?;
        let mut c = [Completion::default(); 4];
        spin(deadline, "the acknowledgement's completion", || {
            let n = r0.poll(&mut c)?;
            Ok(c[..n].iter().any(|c| c.context == ACK_CTX).then_some(()))
        })
        .map_err(e)?;
    }
    // The target checks the last message of every slot; both learn the verdict.
    let mut verdict = String::new();
    if b.rank() == 1 {
        for t in 0..SLOTS.min(msgs) {
            let i = t + (msgs - 1 - t) / SLOTS * SLOTS;
            let got = dst.to_vec(t * size, size).map_err(e)?;
            let s = i % SRC_SLOTS;
            if let Some(j) = (0..size).find(|&j| got[j] != pattern(s, rep, j)) {
                verdict = format!("slot {t} (message {i}) differs at byte {j}");
                break;
            }
        }
    }
    let all = b
        .all_gather(verdict.as_bytes())
        .map_err(|e| e.to_string())?;
    if !all[1].is_empty() {
        return Err(format!(
            "payload check failed ({} rails, {}, {}, {size} B): {}",
            g.len(),
            strategy.name(),
            model.name(),
            String::from_utf8_lossy(&all[1])
        ));
    }
    Ok((g, gbps))
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn rank_main(b: &Bootstrap, args: &[String]) -> Result<(), String> {
    if b.world() != 2 {
        return Err(format!("needs exactly 2 ranks, got {}", b.world()));
    }
    let e = |e: Error| e.to_string();
    let provider = args.first().map_or("shm", String::as_str);
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3).max(1);
    let mib: usize = args
        .get(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(64)
        .max(1);
    load_library(None).map_err(e)?;
    let mut offered = get_info(&Hints::provider(provider)).map_err(e)?;
    if provider == "tcp" {
        let lo = pick_domain(&offered, "lo").map_err(e)?;
        offered.retain(|i| i.domain == lo.domain && i.fabric == lo.fabric);
    }
    let max = *SIZES.iter().max().expect("sizes");
    let src = Arc::new(HostBuffer::new(SRC_SLOTS * max).map_err(e)?);
    let dst = Arc::new(HostBuffer::new(SLOTS * max).map_err(e)?);
    let ackbuf = Arc::new(HostBuffer::new(4096).map_err(e)?);
    let mut results: Vec<Run> = Vec::new();
    for &nr in &RAILS {
        let plan = resolve_rails(&offered, RailCount::Count(nr), &[]).map_err(e)?;
        let mut g = RailGroup::open_plan(&plan, &RailConfig::default()).map_err(e)?;
        let srcr = g.register(src.clone(), MrPath::Auto).map_err(e)?;
        let dstr = g.register(dst.clone(), MrPath::Auto).map_err(e)?;
        let ackr = g.register(ackbuf.clone(), MrPath::Auto).map_err(e)?;
        let gather = |blob: &[u8]| b.all_gather(blob).map_err(|e| e.to_string());
        let peers = connect_all(&g, gather, b.rank() as usize).map_err(e)?;
        let other = 1 - b.rank() as usize;
        let peer = peers[other].clone().ok_or("no peer")?;
        let mut blob = g.descriptor(&dstr).map_err(e)?.to_bytes();
        blob.extend(g.descriptor(&ackr).map_err(e)?.to_bytes());
        let theirs = gather(&blob)?;
        let half = theirs[other].len() / 2;
        let their_dst = RegionDescriptor::from_bytes(&theirs[other][..half]).map_err(e)?;
        let their_ack = RegionDescriptor::from_bytes(&theirs[other][half..]).map_err(e)?;
        let targets: Vec<RailTarget> = (0..g.len())
            .map(|k| RailTarget {
                peer: peer.rail(k),
                src: srcr.id(k),
                dst: *their_dst.rail(k),
            })
            .collect();
        let ack = (ackr.id(0), *their_ack.rail(0), peer.rail(0));
        for &size in &SIZES {
            let msgs = (mib << 20) / size;
            for strategy in [Strategy::Split, Strategy::RoundRobin] {
                let models = [Model::OneThread, Model::ThreadPerRail];
                let mut figs = [Vec::new(), Vec::new()];
                // One untimed warm-up per model, then alternate the models rep by rep.
                for rep in 0..=reps {
                    for (m, &model) in models.iter().enumerate() {
                        let (g2, gbps) = one_run(
                            b, g, &targets, ack, &src, &dst, size, msgs, strategy, model, rep,
                        )?;
                        g = g2;
                        if let (Some(x), true) = (gbps, rep > 0) {
                            figs[m].push(x);
                        }
                    }
                }
                for (m, &model) in models.iter().enumerate() {
                    results.push(Run {
                        rails: nr,
                        strategy,
                        model,
                        size,
                        gbps: std::mem::take(&mut figs[m]),
                    });
                }
            }
        }
        if b.rank() == 0 {
            eprintln!("{nr} rail(s) done ({})", plan.why);
        }
    }
    if b.rank() == 0 {
        println!("# multirail CQ models on {provider} (virtual rails on loopback), {mib} MiB per run, {SLOTS} messages in flight, median of {reps} alternating runs; Gbps");
        println!(
            "{:>5} {:>12} {:>16} {:>8} {:>8} {:>8} {:>8}",
            "rails", "strategy", "cq-model", "size", "median", "min", "max"
        );
        for r in &results {
            let min = r.gbps.iter().copied().fold(f64::INFINITY, f64::min);
            let max = r.gbps.iter().copied().fold(0.0, f64::max);
            println!(
                "{:>5} {:>12} {:>16} {:>7}K {:>8.2} {:>8.2} {:>8.2}",
                r.rails,
                r.strategy.name(),
                r.model.name(),
                r.size >> 10,
                median(&r.gbps),
                min,
                max
            );
        }
        let mut wins = [0usize; 2];
        for pair in results.chunks(2) {
            wins[usize::from(median(&pair[1].gbps) > median(&pair[0].gbps))] += 1;
        }
        println!(
            "# faster: one-thread in {} configurations, thread-per-rail in {}",
            wins[0], wins[1]
        );
        let ratios: Vec<String> = RAILS
            .iter()
            .map(|&nr| {
                let logs: Vec<f64> = results
                    .chunks(2)
                    .filter(|p| p[0].rails == nr)
                    .map(|p| (median(&p[1].gbps) / median(&p[0].gbps)).ln())
                    .collect();
                let gm = (logs.iter().sum::<f64>() / logs.len() as f64).exp();
                format!("{nr} rail(s) {gm:.2}")
            })
            .collect();
        println!(
            "# thread-per-rail / one-thread, geometric mean of the median ratios: {}",
            ratios.join(", ")
        );
    }
    b.barrier().map_err(|e| e.to_string())
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("multirail: {msg}");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flags = LaunchFlags {
        timeout: Duration::from_secs(120),
        ..LaunchFlags::default()
    };
    let info = detect_from_process_env(&flags).unwrap_or_else(|e| fail(e));
    if info.source == "none" {
        let opts = launcher::LaunchOptions {
            ranks: 2,
            program: std::env::current_exe().unwrap_or_else(|e| fail(e)),
            args: args.iter().map(Into::into).collect(),
            grace: Duration::from_secs(5),
            env: Vec::new(),
        };
        std::process::exit(launcher::launch(&opts).unwrap_or_else(|e| fail(e)));
    }
    let b = Bootstrap::connect(&info, flags.timeout).unwrap_or_else(|e| fail(e));
    if let Err(msg) = rank_main(&b, &args) {
        b.abort(&msg);
        eprintln!("rank {}: {msg}", b.rank());
        std::process::exit(1);
    }
}
