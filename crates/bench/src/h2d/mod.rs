//! `efabench h2d`: host↔GPU copy bandwidth per GPU, nvbandwidth's host testcases on the shared
//! harness.
//!
//! Every point is one engine (copy engine or SM copy kernel), one direction (host→device,
//! device→host, or both at once on two streams), one scope (one GPU alone, or every GPU at
//! once from one thread each, started together) and one host placement (pinned memory on the
//! GPU's NUMA node, or on another node). A sample is `-w` untimed copies, a CUDA event, `-n`
//! copies back to back, an event; bandwidth = size × copies / the median sample. Before every
//! sample the sources get the project's pattern with a new seed and the destinations are
//! poisoned; after it every word is checked (`--no-check` skips that).
//!
//! The figure is put against the GPU's link ([`expect`]): its raw rate at the maximum
//! generation and width, times the fraction a healthy link delivers to a copy. The host pages'
//! real node is asked of the kernel after allocation; a "near" buffer that landed elsewhere is
//! reported as a wrong placement.
//!
//! One process drives every GPU (there is no peer to wait for), so the benchmark runs with one
//! rank; `args.rs` holds the options, `expect.rs` the link arithmetic, `report.rs` the records
//! and the summary.

pub mod args;
pub mod expect;
pub mod report;

use std::collections::BTreeMap;
use std::sync::{Arc, Barrier};

use efabench_gpu::h2d::{Dir, Engine, HostLane, Timing};
use efabench_gpu::Gpu;
use efabench_record::Record;
use efabench_topology::pcie::PcieLink;
use efabench_topology::Root;

use crate::error::BenchError;
use crate::harness::{
    Benchmark, BuildInfo, Clock, Ctx, DeviceRounds, Loop, Measured, Needs, Point, RunFacts, TimedBy,
};
use crate::pattern;
pub use args::{H2dArgs, Placement, Scope};
use expect::Expectation;
use report::{H2dFacts, Outcome};

/// Default sizes: 4 MiB to 256 MiB, ×4 (large copies: the link's rate, not launch overhead).
pub const H2D_DEFAULTS: [(&str, &str); 3] = [
    ("min_bytes", "4M"),
    ("max_bytes", "256M"),
    ("step_factor", "4"),
];
/// Copies per sample unless `-n` (nvbandwidth's loop count).
pub const LOOP_COUNT: u64 = 16;

/// One point.
#[derive(Clone, Debug, PartialEq)]
pub struct H2dSpec {
    pub engine: Engine,
    pub dir: Dir,
    pub scope: Scope,
    /// The GPU of an `each` point; `None` for `all`.
    pub gpu: Option<usize>,
    pub placement: Placement,
    pub size: u64,
    pub iters: u64,
    pub warmup: u64,
    /// Unique per point: seeds differ between points.
    pub index: u64,
}

impl H2dSpec {
    /// nvbandwidth's testcase name where it has one (`host_to_device_memcpy_ce`,
    /// `all_to_host_memcpy_sm`); both directions at once is `host_device_bidirectional_*` /
    /// `all_host_bidirectional_*` (nvbandwidth reports each part of it as its own testcase).
    pub fn variant(&self) -> String {
        let e = match self.engine {
            Engine::Ce => "ce",
            Engine::Sm => "sm",
        };
        let what = match (self.scope, self.dir) {
            (Scope::Each, Dir::H2d) => "host_to_device_memcpy",
            (Scope::Each, Dir::D2h) => "device_to_host_memcpy",
            (Scope::Each, Dir::Both) => "host_device_bidirectional_memcpy",
            (Scope::All, Dir::H2d) => "host_to_all_memcpy",
            (Scope::All, Dir::D2h) => "all_to_host_memcpy",
            (Scope::All, Dir::Both) => "all_host_bidirectional_memcpy",
        };
        format!("{what}_{e}")
    }
}

/// The points: engine, direction, scope (each GPU, then all), placement, size.
#[allow(clippy::too_many_arguments)]
pub fn specs(
    engines: &[Engine],
    dirs: &[Dir],
    scopes: &[Scope],
    placements: &[Placement],
    gpus: &[usize],
    sizes: &[u64],
    iters: u64,
    warmup: u64,
) -> Vec<H2dSpec> {
    let mut out = Vec::new();
    for &engine in engines {
        for &dir in dirs {
            for &scope in scopes {
                let targets: Vec<Option<usize>> = match scope {
                    Scope::Each => gpus.iter().map(|g| Some(*g)).collect(),
                    Scope::All => vec![None],
                };
                for gpu in targets {
                    for &placement in placements {
                        for &size in sizes {
                            out.push(H2dSpec {
                                engine,
                                dir,
                                scope,
                                gpu,
                                placement,
                                size,
                                iters,
                                warmup,
                                index: out.len() as u64 + 1,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// One GPU as the benchmark sees it.
pub(crate) struct GpuSide {
    pub gpu: Arc<Gpu>,
    pub numa: Option<u32>,
    pub expect: Option<Expectation>,
    /// The node each placement wants, when there is one.
    pub node: BTreeMap<Placement, u32>,
    pub lanes: BTreeMap<Placement, HostLane>,
}

/// The NUMA nodes of this machine and their CPUs.
fn numa_nodes(root: &Root) -> Vec<(u32, Vec<usize>)> {
    let mut out: Vec<(u32, Vec<usize>)> = root
        .list("/sys/devices/system/node")
        .into_iter()
        .filter_map(|n| {
            let id: u32 = n.strip_prefix("node")?.parse().ok()?;
            let cpus = root.read_trim(format!("/sys/devices/system/node/{n}/cpulist"))?;
            Some((id, crate::queue::measure::parse_cpulist(&cpus)))
        })
        .filter(|(_, c)| !c.is_empty())
        .collect();
    out.sort();
    out
}

/// The node a placement wants for a GPU on `gpu_node`: near = its own (node 0 when the machine
/// has one node and the GPU reports none), far = the first other node.
pub fn wanted_node(p: Placement, gpu_node: Option<u32>, nodes: &[u32]) -> Option<u32> {
    let near = gpu_node.or_else(|| (nodes.len() == 1).then(|| nodes[0]))?;
    match p {
        Placement::Near => Some(near),
        Placement::Far => nodes.iter().copied().find(|n| *n != near),
    }
}

pub struct H2d {
    args: H2dArgs,
    gpus: BTreeMap<usize, GpuSide>,
    last: Option<Outcome>,
    done: Vec<(H2dSpec, Outcome)>,
    skipped: Vec<Placement>,
}

impl H2d {
    pub fn new(args: &H2dArgs) -> Result<H2d, BenchError> {
        for s in args.sweep.sizes()? {
            if s % 16 != 0 {
                return Err(BenchError::usage(format!(
                    "h2d copies whole 16-byte words: size {s} is not a multiple of 16; use -b/-e of 16 bytes or more with -f 2 or 4"
                )));
            }
        }
        Ok(H2d {
            args: args.clone(),
            gpus: BTreeMap::new(),
            last: None,
            done: Vec::new(),
            skipped: Vec::new(),
        })
    }

    fn placements(&self) -> Vec<Placement> {
        let mut v: Vec<Placement> = self.args.placement.clone();
        v.dedup();
        v.retain(|p| !self.skipped.contains(p));
        v
    }
}

impl Benchmark for H2d {
    type Spec = H2dSpec;

    fn name(&self) -> &'static str {
        "h2d"
    }

    fn needs(&self) -> Needs {
        Needs::LOCAL
    }

    fn timed_by(&self) -> TimedBy {
        TimedBy::DeviceRounds
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        if ctx.world != 1 {
            return Err(BenchError::usage(
                "h2d drives every GPU from one process: run `efabench h2d` without launch/srun (--gpus picks the GPUs)",
            ));
        }
        let count = efabench_gpu::device_count()? as usize;
        let picked = self.args.gpus.resolve(count).map_err(BenchError::usage)?;
        let root = Root::system();
        let nodes = numa_nodes(&root);
        let ids: Vec<u32> = nodes.iter().map(|(n, _)| *n).collect();
        let max = self.args.sweep.sizes()?.into_iter().max().unwrap_or(16) as usize;
        let mut header = Vec::new();
        for g in picked {
            let gpu = Gpu::open(g as i32)?;
            let numa = efabench_gpu::nvml::sysfs_numa_node(&gpu.pci_bus_id);
            let link = PcieLink::read(&root, &format!("/sys/bus/pci/devices/{}", gpu.pci_bus_id));
            let expect = link.as_ref().and_then(Expectation::of);
            header.push(report::gpu_line(&gpu, numa, expect.as_ref()));
            let mut side = GpuSide {
                gpu,
                numa,
                expect,
                node: BTreeMap::new(),
                lanes: BTreeMap::new(),
            };
            for &p in &self.args.placement {
                let node = wanted_node(p, numa, &ids);
                if node.is_none() && p == Placement::Far {
                    if !self.skipped.contains(&p) {
                        self.skipped.push(p);
                        header.push(format!(
                            "# placement far skipped: {}",
                            if ids.len() <= 1 {
                                "this machine has one NUMA node"
                            } else {
                                "the GPU reports no NUMA node (sysfs numa_node -1), so no node is known to be far from it"
                            }
                        ));
                    }
                    continue;
                }
                let cpus = node
                    .and_then(|node| nodes.iter().find(|(n, _)| *n == node))
                    .map(|(_, c)| c.clone())
                    .unwrap_or_default();
                let lane = HostLane::new(&side.gpu, max, &cpus)?;
                if node.is_none() {
                    header.push(format!(
                        "# GPU {g} reports no NUMA node: its near host buffers are allocated unbound, on node {}",
                        lane.host_node
                            .map_or("unknown".to_string(), |n| n.to_string())
                    ));
                }
                if let (Some(node), Some(h)) = (node, lane.host_node) {
                    if h != node {
                        header.push(format!(
                            "# wrong placement: GPU {g}'s {} host buffer asked for node {node} landed on node {h} (memory policy or a full node)",
                            p.name()
                        ));
                    }
                }
                if let Some(node) = node {
                    side.node.insert(p, node);
                }
                side.lanes.insert(p, lane);
            }
            self.gpus.insert(g, side);
        }
        if self.placements().is_empty() {
            return Err(BenchError::usage(
                "no --placement can run here (far needs a second NUMA node and a GPU that reports its own): use --placement near",
            ));
        }
        let facts = H2dFacts {
            gpus: self.gpus.len(),
            numa_nodes: ids.len(),
            practical_efficiency: expect::PRACTICAL_EFFICIENCY,
            samples: self.args.samples,
        };
        Ok(RunFacts {
            provider: "none".into(),
            fabric: "none".into(),
            mem: "pinned".into(),
            header,
            ..RunFacts::default()
        }
        .detail(facts))
    }

    fn points(&self, _ctx: &Ctx) -> Result<Vec<H2dSpec>, BenchError> {
        let sizes = self.args.sweep.sizes()?;
        let iters = self.args.sweep.iters.unwrap_or(LOOP_COUNT);
        let warmup = self.args.sweep.warmup.unwrap_or(2);
        let gpus: Vec<usize> = self.gpus.keys().copied().collect();
        let mut scopes = self.args.scope.clone();
        if gpus.len() == 1 {
            // One GPU: "all" is the same measurement as "each".
            scopes.retain(|s| *s == Scope::Each);
            if scopes.is_empty() {
                scopes.push(Scope::Each);
            }
        }
        Ok(specs(
            &self.args.engine,
            &self.args.dir,
            &scopes,
            &self.placements(),
            &gpus,
            &sizes,
            iters,
            warmup,
        ))
    }

    fn label(&self, s: &H2dSpec) -> String {
        format!(
            "{} {} {}",
            s.variant(),
            s.gpu.map_or("all".into(), |g| format!("gpu{g}")),
            s.placement.name()
        )
    }

    fn measure(&mut self, ctx: &Ctx, s: &H2dSpec) -> Result<Measured, BenchError> {
        let ids: Vec<usize> = match s.gpu {
            Some(g) => vec![g],
            None => self.gpus.keys().copied().collect(),
        };
        // A sample is one time per GPU, which the loop has no place for: the lanes keep them,
        // and the loop keeps no samples of its own.
        let lp = Loop {
            warmup: 0,
            iters: self.args.samples,
            timed: false,
            clock: Clock::Iteration,
        };
        let mut sampling = Sampling {
            verify: !self.args.job.no_check,
            h2d: self,
            s,
            ids,
            len: s.size as usize,
            seed: 0,
            times: BTreeMap::new(),
        };
        let measured = ctx.run_device_rounds(lp, &mut sampling)?;
        let times = sampling.times;
        let o = report::outcome(s, &times, &self.gpus);
        self.done.push((s.clone(), o.clone()));
        self.last = Some(o);
        Ok(measured)
    }

    fn point(&self, _ctx: &Ctx, s: &H2dSpec, _all: &[Measured]) -> Point {
        match &self.last {
            Some(o) => report::point(s, o),
            None => Point::default(),
        }
    }

    fn fingerprint(&self) -> String {
        format!(
            "--samples {} --gpus {:?}",
            self.args.samples, self.args.gpus
        )
    }

    fn summary(&self, _records: &[Record]) -> Vec<String> {
        report::summary(&self.done)
    }
}

impl H2d {
    fn lane(&self, g: usize, p: Placement) -> Result<&HostLane, BenchError> {
        self.gpus
            .get(&g)
            .and_then(|s| s.lanes.get(&p))
            .ok_or_else(|| {
                BenchError::failed(format!("h2d: no host buffer for GPU {g} {}", p.name()))
            })
    }
    fn lane_mut(&mut self, g: usize, p: Placement) -> Result<&mut HostLane, BenchError> {
        self.gpus
            .get_mut(&g)
            .and_then(|s| s.lanes.get_mut(&p))
            .ok_or_else(|| {
                BenchError::failed(format!("h2d: no host buffer for GPU {g} {}", p.name()))
            })
    }
}

/// The samples of one point: before each, the sources get a new seed and the destinations are
/// poisoned; each runs every lane at once and is timed by CUDA events per GPU; after each, every
/// word is checked.
struct Sampling<'a> {
    h2d: &'a mut H2d,
    s: &'a H2dSpec,
    ids: Vec<usize>,
    len: usize,
    verify: bool,
    /// The seed of the sample in flight.
    seed: u64,
    times: BTreeMap<usize, Vec<Timing>>,
}

impl DeviceRounds for Sampling<'_> {
    fn prepare(&mut self, k: u64) -> Result<(), BenchError> {
        let s = self.s;
        self.seed = pattern::seed(s.index << 16 | k, 0, 1, 0);
        let poison = pattern::seed(s.index << 16 | k, 1, 0, 7);
        for g in &self.ids {
            let lane = self.h2d.lane_mut(*g, s.placement)?;
            lane.prepare(s.dir, self.len, self.seed, poison)?;
        }
        Ok(())
    }

    fn run(&mut self, _k: u64) -> Result<Option<u64>, BenchError> {
        let h2d = &*self.h2d;
        let lanes: Vec<(usize, &HostLane)> = self
            .ids
            .iter()
            .map(|g| h2d.lane(*g, self.s.placement).map(|l| (*g, l)))
            .collect::<Result<_, _>>()?;
        for (g, t) in run_together(&lanes, self.s, self.len)? {
            self.times.entry(g).or_default().push(t);
        }
        Ok(None)
    }

    fn check(&mut self, _k: u64) -> Result<u64, BenchError> {
        let mut errors = 0;
        if self.verify {
            for g in &self.ids {
                let lane = self.h2d.lane(*g, self.s.placement)?;
                errors += lane.verify(self.s.dir, self.len, self.seed)?;
            }
        }
        Ok(errors)
    }
}

/// One sample on every lane: one thread each, released together by a barrier.
fn run_together(
    lanes: &[(usize, &HostLane)],
    s: &H2dSpec,
    len: usize,
) -> Result<Vec<(usize, Timing)>, BenchError> {
    if let [(g, lane)] = lanes {
        return Ok(vec![(
            *g,
            lane.run(s.engine, s.dir, len, s.warmup, s.iters)?,
        )]);
    }
    let start = Barrier::new(lanes.len());
    std::thread::scope(|scope| {
        let handles: Vec<_> = lanes
            .iter()
            .map(|(g, lane)| {
                let start = &start;
                scope.spawn(move || {
                    start.wait();
                    lane.run(s.engine, s.dir, len, s.warmup, s.iters)
                        .map(|t| (*g, t))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| BenchError::failed("h2d: a copy thread panicked"))?
                    .map_err(BenchError::from)
            })
            .collect()
    })
}

pub fn run_h2d(args: &H2dArgs, build: &BuildInfo) -> Result<crate::Verdict, BenchError> {
    let mut b = H2d::new(args)?;
    crate::harness::run(&mut b, args, build)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_enumerate_each_gpu_then_all() {
        let v = specs(
            &[Engine::Ce],
            &[Dir::H2d, Dir::Both],
            &[Scope::Each, Scope::All],
            &[Placement::Near, Placement::Far],
            &[0, 1],
            &[1 << 20],
            16,
            2,
        );
        // per direction: 2 GPUs x 2 placements + all x 2 placements.
        assert_eq!(v.len(), 2 * (4 + 2));
        assert_eq!(v[0].variant(), "host_to_device_memcpy_ce");
        assert_eq!(v[0].gpu, Some(0));
        assert_eq!(v[4].variant(), "host_to_all_memcpy_ce");
        assert_eq!(v[4].gpu, None);
        assert_eq!(v[6].variant(), "host_device_bidirectional_memcpy_ce");
        assert_eq!(v[11].variant(), "all_host_bidirectional_memcpy_ce");
        let mut idx: Vec<u64> = v.iter().map(|s| s.index).collect();
        idx.dedup();
        assert_eq!(idx.len(), v.len());
    }

    #[test]
    fn placements_pick_the_gpus_node_and_another() {
        assert_eq!(wanted_node(Placement::Near, Some(1), &[0, 1]), Some(1));
        assert_eq!(wanted_node(Placement::Far, Some(1), &[0, 1]), Some(0));
        // One node: near is it, far does not exist.
        assert_eq!(wanted_node(Placement::Near, None, &[0]), Some(0));
        assert_eq!(wanted_node(Placement::Far, None, &[0]), None);
        // Two nodes and a GPU without one: no node (near is then allocated unbound, far skipped).
        assert_eq!(wanted_node(Placement::Near, None, &[0, 1]), None);
    }
}
