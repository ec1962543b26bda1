//! Ring all-gather over every rail of a [`RailGroup`], on the public API of efabench-fabric and
//! efabench-bootstrap only: each rank owns one chunk; in step s it writes the chunk it got in
//! step s-1 (its own at s=0) into its right neighbour's buffer, striped over the rails with
//! `split`, and waits for its left neighbour's stripes (counted by (source, step) in the remote
//! CQ data, so arrival order does not matter). Every rank verifies every chunk. Operations are
//! posted with `Rail::post` and collected with `Rail::poll` on every rail in turn.
//!
//! `cargo run -p efabench-fabric --example ring -- [tcp|shm] [ranks] [rails] [chunk bytes]`
//! (started alone, it launches `ranks` copies of itself on this host through bootstrap).

use std::{sync::Arc, time::Instant};

use efabench_bootstrap::{detect_from_process_env, launcher, Bootstrap, LaunchFlags};
use efabench_fabric::*;

fn pattern(rank: usize, i: usize) -> u8 {
    (rank * 131 + i * 7 + i / 4099) as u8
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn rank_main(b: &Bootstrap, args: &[String]) -> Result<String, String> {
    let (me, world) = (b.rank() as usize, b.world() as usize);
    let provider = args.first().map_or("shm", String::as_str);
    let rails: u32 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2);
    let chunk: usize = args
        .get(3)
        .and_then(|a| a.parse().ok())
        .unwrap_or((1 << 20) + 13);
    let e = |e: Error| e.to_string();
    load_library(None).map_err(e)?;
    let mut offered = get_info(&Hints::provider(provider)).map_err(e)?;
    if provider == "tcp" {
        let lo = pick_domain(&offered, "lo").map_err(e)?;
        offered.retain(|i| i.domain == lo.domain && i.fabric == lo.fabric);
    }
    let plan = resolve_rails(&offered, RailCount::Count(rails), &[]).map_err(e)?;
    let g = RailGroup::open_plan(&plan, &RailConfig::default()).map_err(e)?;
    let buf = Arc::new(HostBuffer::new(world * chunk).map_err(e)?);
    let own: Vec<u8> = (0..chunk).map(|i| pattern(me, i)).collect();
    buf.write_at(me * chunk, &own).map_err(e)?;
    let region = g.register(buf.clone(), MrPath::Auto).map_err(e)?;
    let gather = |blob: &[u8]| b.all_gather(blob).map_err(|e| e.to_string());
    let peers = connect_all(&g, gather, me).map_err(e)?;
    let descs = gather(&g.descriptor(&region).map_err(e)?.to_bytes())?;
    let (left, right) = ((me + world - 1) % world, (me + 1) % world);
    let (peer, desc) = (peers[right].clone().ok_or("no right peer")?, &descs[right]);
    let desc = RegionDescriptor::from_bytes(desc).map_err(e)?;
    let deadline = Instant::now() + b.timeout();
    // Notifications that arrived before this rank reached their step (the left neighbour may be
    // one step ahead): kept until their step comes.
    let mut early: Vec<CqData> = Vec::new();
    let mut out = [Completion::default(); 16];
    for step in 0..world - 1 {
        let (send, recv) = ((me + world - step) % world, (left + world - step) % world);
        let stripes = split(chunk, g.len(), step % g.len());
        let data = CqData {
            source: me as u16,
            tag: step as u16,
        };
        for s in &stripes {
            let off = send * chunk + s.off;
            g.rail(s.rail)
                .post(Op::Write {
                    peer: peer.rail(s.rail),
                    local: region.id(s.rail).range(off, s.len),
                    remote: desc.rail(s.rail).at(off as u64),
                    data: Some(data.to_u64()),
                    flags: Flags::NONE,
                    ctx: step as u64,
                })
                .map_err(e)?;
        }
        // Done when every stripe written has completed locally and every stripe of the left
        // neighbour's step has been announced, on whichever rail, in whatever order.
        let want = CqData {
            source: left as u16,
            tag: step as u16,
        };
        let mut arrived = early.iter().filter(|&&d| d == want).count();
        early.retain(|&d| d != want);
        let mut written = 0;
        let mut spins = 0u32;
        while written < stripes.len() || arrived < stripes.len() {
            for r in g.rails() {
                let n = r
                    .poll(&mut out)
                    .map_err(|x| format!("step {step}, chunk {recv} from rank {left}: {x}"))?;
                for c in &out[..n] {
                    match c.remote_data().map(CqData::from_u64) {
                        Some(d) if d == want => arrived += 1,
                        Some(d) => early.push(d),
                        None => written += 1,
                    }
                }
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                if Instant::now() > deadline {
                    return Err(format!(
                        "step {step}: timed out waiting for chunk {recv} from rank {left}"
                    ));
                }
                b.check().map_err(|x| x.to_string())?;
            }
        }
    }
    for r in 0..world {
        let got = buf.to_vec(r * chunk, chunk).map_err(e)?;
        if let Some(i) = (0..chunk).find(|&i| got[i] != pattern(r, i)) {
            return Err(format!("chunk of rank {r} differs at byte {i}"));
        }
    }
    b.barrier().map_err(|e| e.to_string())?;
    let virt = if g.is_virtual() { " (virtual)" } else { "" };
    let digest = fnv(&buf.to_vec(0, world * chunk).map_err(e)?);
    Ok(format!("ring all-gather OK: {world} ranks x {} rails{virt} on {provider}, {chunk} B per rank, digest {digest:016x}", g.len()))
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("ring: {msg}");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flags = LaunchFlags::default();
    let info = detect_from_process_env(&flags).unwrap_or_else(|e| fail(e));
    if info.source == "none" {
        let opts = launcher::LaunchOptions {
            ranks: args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3),
            program: std::env::current_exe().unwrap_or_else(|e| fail(e)),
            args: args.iter().map(Into::into).collect(),
            grace: std::time::Duration::from_secs(5),
            env: Vec::new(),
        };
        std::process::exit(launcher::launch(&opts).unwrap_or_else(|e| fail(e)));
    }
    let b = Bootstrap::connect(&info, flags.timeout).unwrap_or_else(|e| fail(e));
    match rank_main(&b, &args) {
        Ok(line) if b.rank() == 0 => println!("{line}"),
        Ok(_) => {}
        Err(msg) => {
            b.abort(&msg);
            eprintln!("rank {}: {msg}", b.rank());
            std::process::exit(1);
        }
    }
}
