//! Temporary driver of the queue engine until `efabench queue` exists: runs the sweep and prints
//! one line per point. Usage: queue_sweep [rings] [producers] [consumers] [modes] [commands]
//! e.g. `queue_sweep pinned,libefaxx 1x1,1x32 1,4 nbi,blocking 4194304`.

use efabench_gpu::queue::{
    measure, numa_cpus, unavailable, Mode, ProducerShape, QueueConfig, RingKind,
};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: &str| a.get(i).cloned().unwrap_or_else(|| d.to_string());
    let rings: Vec<RingKind> = arg(1, "pinned,managed,gdr,hybrid,libefaxx")
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let shapes = ProducerShape::parse_list(&arg(2, ProducerShape::DEFAULT_LIST)).unwrap();
    let consumers: Vec<u32> = arg(3, "1").split(',').map(|s| s.parse().unwrap()).collect();
    let modes: Vec<Mode> = arg(4, "nbi,blocking")
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let commands: u64 = arg(5, "4194304").parse().unwrap();
    let batch: u32 = std::env::var("BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let release = std::env::var("RELEASE").map(|v| v != "0").unwrap_or(true);
    let gpu = match efabench_gpu::driver().and_then(|_| efabench_gpu::Gpu::open(0)) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let cpus = numa_cpus(&gpu);
    println!(
        "# {} {} SMs, consumers on CPUs {:?}",
        gpu.name, gpu.sm_count, cpus
    );
    println!(
        "{:>9} {:>8} {:>2} {:>8} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>6} {:>5} tick",
        "ring",
        "prod",
        "c",
        "mode",
        "cmds",
        "Mops",
        "p50us",
        "p99us",
        "maxus",
        "meanus",
        "errs",
        "trunc"
    );
    let mut salt = 1u64;
    for ring in &rings {
        if let Some(why) = unavailable(&gpu, *ring) {
            println!("# {why}");
            continue;
        }
        for mode in &modes {
            for shape in &shapes {
                for c in &consumers {
                    let mut cfg = QueueConfig::new(*ring, *shape, *c, *mode);
                    cfg.commands = if *mode == Mode::Blocking {
                        commands / 32
                    } else {
                        commands
                    };
                    if *ring == RingKind::Libefaxx || *ring == RingKind::Managed {
                        cfg.commands = cfg.commands.min(1 << 16);
                        cfg.budget = std::time::Duration::from_millis(700);
                    }
                    cfg.batch = batch;
                    cfg.release = release;
                    if let Ok(p) = std::env::var("POLL") {
                        cfg.tail_poll = p.parse().unwrap();
                    }
                    cfg.poll_sleep_ns = std::env::var("SLEEP")
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    cfg.salt = salt;
                    salt += 1;
                    cfg.cpus = cpus
                        .iter()
                        .copied()
                        .skip(1)
                        .chain(cpus.iter().copied().take(1))
                        .collect();
                    let t = std::time::Instant::now();
                    match measure(&gpu, &cfg) {
                        Ok(m) => println!(
                            "{:>9} {:>8} {:>2} {:>8} {:>9} {:>10.3} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>6} {:>5} {:?} b={} {} wall={:.2}s per_consumer={:?} err={:?}",
                            ring.name(), shape.to_string(), c, mode.name(), m.received, m.msg_rate_mops,
                            m.latency.p50 / 1e3, m.latency.p99 / 1e3, m.latency.max / 1e3, m.latency.mean / 1e3,
                            m.errors.total(), m.truncated, m.timer_step_ns, m.batch, m.tail_poll, t.elapsed().as_secs_f64(), m.per_consumer, m.errors
                        ),
                        Err(e) => println!("{:>9} {:>8} {:>2} {:>8} error: {e}", ring.name(), shape.to_string(), c, mode.name()),
                    }
                }
            }
        }
    }
}
