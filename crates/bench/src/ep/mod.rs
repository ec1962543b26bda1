//! `efabench ep`: expert-parallel dispatch and combine, as DeepEP, UCCL-EP and pplx-garden move
//! MoE tokens, measured phase by phase and initiator by initiator.
//!
//! Every rank holds `--tokens` tokens of `--hidden` elements, routes each to `--topk` of
//! `--experts` experts spread evenly over the ranks ([`routing`]), then per iteration:
//!
//! 1. **dispatch**: each (token, expert) pair is written into the expert's receive buffer
//!    (`[local expert][source rank][slot]`, DeepEP's low-latency layout) or, with `--layout
//!    per-rank`, each token once per destination rank; arrival is counted per expert from remote
//!    CQ data and each source's count signal ([`exchange`]);
//! 2. every received message is checked against (source, token, iteration) and the experts run
//!    (untimed; [`dispatch`]);
//! 3. **combine**: each expert output goes back to the token's source, which reduces the slots
//!    with the routing weights (on the GPU for `--mem cuda`, on the CPU otherwise; timed), and the
//!    result is checked against the expected weighted sum ([`combine`]).
//!
//! Each phase starts after a bootstrap barrier, so a peer still checking the previous phase never
//! shows up in a phase's time. `--initiator` picks who posts the writes (`cpu`, `gpu`, or a list
//! measured in the same run); `gpu` runs a kernel with `--mem cuda` and a CPU thread in its place
//! otherwise (`--producer`). Records: one per initiator and part (`dispatch`, `combine`,
//! `dispatch+combine`) with the slowest rank per iteration, p50/p99, DeepEP's GB/s, tokens/s and
//! the stage breakdown ([`metrics`]).

pub mod args;
pub mod combine;
pub mod dispatch;
pub mod exchange;
pub mod layout;
pub mod metrics;
mod report;
mod rounds;
pub mod routing;
pub mod verify;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use efabench_gpu::ep::{EpCommands, EpProducer};
use efabench_gpu::proxy::{Command, RingMemory};
use efabench_gpu::queue::RingKind;
use efabench_gpu::{Gpu, MemKind};
use efabench_record::Record;

use crate::error::BenchError;
use crate::harness::{self, Benchmark, Ctx, Measured, Needs, Point, RunFacts, Strategy, TimedBy};
use crate::mesh::{self, connect_mesh, mesh_facts, Mesh, Payload};
use crate::pattern::Stream;
use crate::stats::Samples;

pub use args::EpArgs;
use args::Initiator;
use combine::Reducer;
use exchange::{commands, host_produce, Exchange, Phase, PhaseTimes, RingFeed, MAX_RANKS};
use layout::{coalesce, count_block, Plan, Put};
use metrics::{EpDetail, Part, RankLog};
use rounds::EpRounds;
use routing::{imbalance, Routing};

/// Slots of the command ring (2^12).
const RING_LOG2: u32 = 12;

/// One record: an initiator and a part. The harness measures one spec per initiator, the whole
/// iteration ([`Part::Total`]); [`Ep::points_of`] turns it into a record per part.
#[derive(Clone, Debug)]
pub struct EpSpec {
    initiator: Initiator,
    part: Part,
}

/// The ring and whoever pushes into it.
struct RingSide {
    mem: RingMemory,
    /// Next position the proxy consumes (= the producer's head between phases).
    next: u64,
    /// The GPU kernels' commands per phase, when a kernel produces.
    device: Option<(EpCommands, EpCommands)>,
}

/// Everything one rank sets up once.
struct State {
    mesh: Mesh,
    send: Payload,
    recv: Payload,
    plan: Plan,
    /// The CPU initiator's merged writes per phase.
    cpu_writes: (Vec<Put>, Vec<Put>),
    /// The ring commands per phase: (puts, signals).
    cmds: [(Vec<Command>, Vec<Command>); 2],
    /// The proxy's merging limit (bytes; `None`: `--no-merge`).
    merge: Option<usize>,
    /// Per phase, `[dst][channel]` writes the ring's staged count blocks announce.
    ring_writes: [Vec<u32>; 2],
    ring: Option<RingSide>,
    prod: Option<EpProducer>,
    reducer: Reducer,
    stream: Stream,
    corrupt_dispatch: bool,
    corrupt_combine: bool,
    combined: Vec<f32>,
    /// Per phase (dispatch, combine) of the last iteration: each source's arrival (ns after the
    /// phase started).
    arrival_ns: [Vec<u64>; 2],
}

/// `ep` on the shared harness.
pub struct Ep<'a> {
    args: &'a EpArgs,
    routing: Option<Routing>,
    state: Option<State>,
    /// Iterations run so far (every iteration's pattern differs, across initiators too).
    iter_no: u64,
    routing_hash: u64,
}

impl<'a> Ep<'a> {
    pub fn new(args: &'a EpArgs) -> Result<Self, BenchError> {
        if args.topk > args.experts {
            return Err(BenchError::usage(format!(
                "--topk {} is more than the {} experts: a token picks distinct experts; lower --topk or raise --experts",
                args.topk, args.experts
            )));
        }
        // The fabric group is shared with the other benchmarks; ep picks each put's rail itself.
        if let Some(s) = args.fabric.strategy {
            return Err(BenchError::usage(format!(
                "--strategy {} does not apply to ep: it sends whole puts over the rails in turn \
                 (round-robin by rank, destination and put); drop --strategy",
                s.name()
            )));
        }
        if args.fabric.per_rail {
            return Err(BenchError::usage(
                "--per-rail does not apply to ep: its records carry per_rail already; drop --per-rail",
            ));
        }
        if args.producer == args::Producer::Gpu && args.mem.mem != MemKind::Cuda {
            return Err(BenchError::usage(
                "--producer gpu runs a kernel over device memory: add --mem cuda, or use --producer host",
            ));
        }
        let routing_hash = match &args.routing {
            args::RoutingSpec::File(p) => std::fs::read(p)
                .map(|b| efabench_gpu::kernels::fnv1a(&b))
                .map_err(|e| {
                    BenchError::usage(format!(
                        "--routing file:{}: {e}; give a file every rank can read",
                        p.display()
                    ))
                })?,
            _ => 0,
        };
        Ok(Ep {
            args,
            routing: None,
            state: None,
            iter_no: 0,
            routing_hash,
        })
    }

    /// Forgets the fabric without closing it (a failed run, just before the process exits).
    fn leak_fabric(&mut self) {
        std::mem::forget(self.state.take());
    }

    fn producer_name(&self, i: Initiator) -> Option<&'static str> {
        (i == Initiator::Gpu).then(|| {
            if self.args.gpu_producer() {
                "gpu"
            } else {
                "host"
            }
        })
    }
}

/// Opens the rails, registers the two buffers and connects every rank (the buffers stay ours
/// too: the experts read and write them directly).
fn open(
    ctx: &Ctx,
    a: &EpArgs,
    send_len: usize,
    recv_len: usize,
) -> Result<(Mesh, Payload, Payload, RunFacts), BenchError> {
    let (send, recv) = mesh::alloc(a.mem.mem, send_len, recv_len, ctx.device)?;
    // Each put goes to the rail `exchange::rail_of` picks, whole messages in turn: round-robin.
    let m = connect_mesh(ctx, (send.clone(), recv.clone()), Strategy::RoundRobin)?;
    let facts = mesh_facts(ctx, &m)?;
    Ok((m, send, recv, facts))
}

impl State {
    /// One phase by one initiator; returns its times.
    fn phase(
        &mut self,
        ctx: &Ctx,
        initiator: Initiator,
        phase: Phase,
        iter: u64,
    ) -> Result<PhaseTimes, BenchError> {
        let health = || ctx.health();
        let (layout, writes, k) = match phase {
            Phase::Dispatch => (&self.plan.dispatch, &self.cpu_writes.0, 0),
            Phase::Combine => (&self.plan.combine, &self.cpu_writes.1, 1),
        };
        let mut ex = Exchange {
            mesh: &mut self.mesh,
            send: &self.send,
            recv: &self.recv,
            me: ctx.rank,
            world: ctx.world,
            timeout: ctx.opts.job.timeout(),
            health: &health,
            arrival_ns: Vec::new(),
        };
        let times = match initiator {
            Initiator::Cpu => ex.run_cpu(phase, iter, layout, writes),
            Initiator::Gpu => {
                let ring = self
                    .ring
                    .as_mut()
                    .ok_or_else(|| BenchError::failed("the command ring was not set up"))?;
                let (puts, sigs) = &self.cmds[k];
                let total = (puts.len() + sigs.len()) as u64;
                let head = ring.next;
                let cr = ring.mem.ring(0, RING_LOG2);
                let merge = self.merge;
                let staged_writes = self.ring_writes[k].as_slice();
                let started = std::time::Instant::now();
                match (&ring.device, &self.prod) {
                    (Some(dev), Some(prod)) => {
                        let cmds = if k == 0 { &dev.0 } else { &dev.1 };
                        let what = format!("{} kernels", phase.name());
                        prod.launch(&ring.mem, RING_LOG2, cmds, 0, ex.timeout)
                            .map_err(|e| BenchError::context(format!("launching the {what}"), e))?;
                        let mut feed = RingFeed {
                            ring: cr,
                            next: &mut ring.next,
                            merge,
                            staged_writes,
                        };
                        let r = ex.run_proxy(phase, iter, layout, &mut feed, total, started);
                        // A failed proxy stops the kernels' waits, so no CUDA call after this
                        // one (the error path's teardown included) waits on a spinning kernel.
                        let limit = if r.is_err() {
                            efabench_gpu::ep::abort(cr.ctl);
                            Duration::from_secs(5)
                        } else {
                            ex.timeout
                        };
                        let waited = prod.wait(limit);
                        let mut t = r?;
                        let span = waited
                            .map_err(|e| BenchError::context(format!("the {what}"), e))?
                            .map_err(|stall| {
                                BenchError::failed(format!(
                                    "rank {}: the {what}: {stall}",
                                    ctx.rank
                                ))
                            })?;
                        t.push_ns = span.last_push.saturating_sub(span.first_push);
                        Ok(t)
                    }
                    _ => {
                        let stop = AtomicBool::new(false);
                        std::thread::scope(|s| {
                            let h = s.spawn(|| host_produce(cr, head, puts, sigs, &stop));
                            let mut feed = RingFeed {
                                ring: cr,
                                next: &mut ring.next,
                                merge,
                                staged_writes,
                            };
                            let r = ex.run_proxy(phase, iter, layout, &mut feed, total, started);
                            if r.is_err() {
                                stop.store(true, std::sync::atomic::Ordering::Release);
                            }
                            let p = h
                                .join()
                                .map_err(|_| BenchError::failed("the host producer panicked"))?;
                            let mut t = r?;
                            let (a, b) = p.map_err(BenchError::failed)?;
                            t.push_ns = b.saturating_sub(a);
                            Ok(t)
                        })
                    }
                }
            }
        };
        self.arrival_ns[k] = std::mem::take(&mut ex.arrival_ns);
        times
    }

    /// The count blocks of a phase for an initiator (merged writes or one per message).
    fn stage_counts(&self, initiator: Initiator, phase: Phase) -> Result<(), BenchError> {
        let (layout, writes) = match phase {
            Phase::Dispatch => (&self.plan.dispatch, &self.cpu_writes.0),
            Phase::Combine => (&self.plan.combine, &self.cpu_writes.1),
        };
        // The proxy's merging posts what the cpu initiator does when it sees whole runs of
        // contiguous commands; it rewrites a block whose writes came out otherwise.
        let w = match initiator {
            Initiator::Gpu if self.merge.is_none() => layout.puts.as_slice(),
            _ => writes.as_slice(),
        };
        let b = count_block(self.plan.world, layout.channels, &layout.puts, w);
        dispatch::stage_counts(&self.send, layout.counts_stage, &b)
    }

    /// One whole iteration: (dispatch, combine, payload errors).
    fn iteration(
        &mut self,
        ctx: &Ctx,
        initiator: Initiator,
        iter: u64,
        verify: bool,
    ) -> Result<(PhaseTimes, PhaseTimes, u64), BenchError> {
        let bar = || ctx.bs.barrier().map_err(BenchError::from);
        dispatch::fill(&self.plan, &self.send, iter, &mut self.stream)?;
        self.stage_counts(initiator, Phase::Dispatch)?;
        bar()?;
        let d = self.phase(ctx, initiator, Phase::Dispatch, iter)?;
        let mut errors = d.errors;
        errors += dispatch::receive(
            &self.plan,
            &self.recv,
            &self.send,
            iter,
            verify,
            &mut self.corrupt_dispatch,
            &mut self.stream,
        )?;
        self.stage_counts(initiator, Phase::Combine)?;
        bar()?;
        let mut c = self.phase(ctx, initiator, Phase::Combine, iter)?;
        if self.corrupt_combine {
            self.corrupt_combine = false;
            combine::corrupt(&self.plan, &self.recv)?;
        }
        let t = std::time::Instant::now();
        self.reducer.reduce(
            &self.plan,
            &self.recv,
            self.prod.as_ref(),
            &mut self.combined,
        )?;
        c.reduce_ns = t.elapsed().as_nanos() as u64;
        c.total_ns += c.reduce_ns;
        errors += c.errors;
        if verify {
            self.reducer.result(&mut self.combined)?;
            errors += combine::check(&self.plan, &self.combined, iter, &mut self.stream);
        }
        Ok((d, c, errors))
    }
}

impl<'a> Benchmark for Ep<'a> {
    type Spec = EpSpec;

    fn name(&self) -> &'static str {
        "ep"
    }

    fn needs(&self) -> Needs {
        Needs::fabric(2)
    }

    fn timed_by(&self) -> TimedBy {
        TimedBy::DeviceRounds
    }

    fn fingerprint(&self) -> String {
        let a = self.args;
        format!(
            "-n {} -w {} --tokens {} --hidden {} --topk {} --experts {} --dtype {} --routing {} ({:016x}) --layout {} --initiator {} --producer {:?}{} --seed {}",
            a.iterations().0,
            a.iterations().1,
            a.tokens,
            a.hidden,
            a.topk,
            a.experts,
            a.dtype.name(),
            match &a.routing {
                args::RoutingSpec::File(_) => "file".to_string(),
                r => r.to_string(),
            },
            self.routing_hash,
            a.layout.name(),
            a.initiators().iter().map(|i| i.name()).collect::<Vec<_>>().join(","),
            a.producer,
            if a.no_merge { " --no-merge" } else { "" },
            a.seed
        )
    }

    fn setup(&mut self, ctx: &Ctx) -> Result<RunFacts, BenchError> {
        let a = self.args;
        if ctx.world > MAX_RANKS {
            return Err(BenchError::usage(format!(
                "ep carries the source rank in 10 bits of CQ data: at most {MAX_RANKS} ranks, not {}",
                ctx.world
            )));
        }
        if a.experts % ctx.world != 0 {
            let lo = a.experts / ctx.world * ctx.world;
            return Err(BenchError::usage(format!(
                "--experts {} does not spread evenly over {} ranks: use a multiple of {}, e.g. --experts {}",
                a.experts,
                ctx.world,
                ctx.world,
                lo.max(ctx.world)
            )));
        }
        let routing = Routing::build(&a.routing, ctx.world, a.tokens, a.topk, a.experts, a.seed)
            .map_err(BenchError::usage)?;
        let plan = Plan::new(&routing, ctx.rank, a.layout, a.dtype, a.hidden as usize);
        let (mut mesh, send, recv, mut facts) =
            open(ctx, a, plan.regions.send_len, plan.regions.recv_len)?;
        let cpu_writes = (coalesce(&plan.dispatch.puts), coalesce(&plan.combine.puts));
        let max_msg = mesh.group().rail(0).info().max_msg_size as usize;
        let longest = cpu_writes
            .0
            .iter()
            .chain(&cpu_writes.1)
            .map(|p| p.len)
            .max()
            .unwrap_or(0);
        if longest > max_msg {
            return Err(BenchError::usage(format!(
                "a merged write of {longest} bytes exceeds what provider {} sends in one message ({max_msg} bytes); lower --tokens or --hidden",
                facts.provider
            )));
        }
        // A count signal announces its writes in 16 bits of CQ data.
        let most = [&plan.dispatch.puts, &plan.combine.puts]
            .iter()
            .flat_map(|p| layout::writes_to(ctx.world, p))
            .max()
            .unwrap_or(0);
        if most > u16::MAX as u32 {
            return Err(BenchError::usage(format!(
                "rank {} would send {most} messages to one rank in one phase; a count signal announces at most {}: lower --tokens or --topk",
                ctx.rank,
                u16::MAX
            )));
        }
        let cmds = [
            commands(ctx.rank, ctx.world, &plan.dispatch),
            commands(ctx.rank, ctx.world, &plan.combine),
        ];
        let merge = (!a.no_merge).then_some(max_msg);
        let staged = |l: &layout::PhaseLayout, w: &[Put]| {
            let mut n = vec![0u32; ctx.world as usize * l.channels];
            for p in if merge.is_some() { w } else { &l.puts } {
                n[p.dst as usize * l.channels + p.index as usize] += 1;
            }
            n
        };
        let ring_writes = [
            staged(&plan.dispatch, &cpu_writes.0),
            staged(&plan.combine, &cpu_writes.1),
        ];
        let gpu: Option<Arc<Gpu>> = match (a.mem.mem, ctx.device) {
            (MemKind::Cuda, Some(d)) => {
                Some(Gpu::open(d).map_err(|e| BenchError::usage(format!("--mem cuda: {e}")))?)
            }
            _ => None,
        };
        let prod = match &gpu {
            Some(g) => Some(
                EpProducer::new(g)
                    .map_err(|e| BenchError::context("compiling the ep kernels", e))?,
            ),
            None => None,
        };
        let inits = a.initiators();
        let ring = if inits.contains(&Initiator::Gpu) {
            match (&gpu, &prod, a.gpu_producer()) {
                (Some(g), Some(p), true) => {
                    let mem = RingMemory::new(g, RingKind::Pinned, 1, RING_LOG2)
                        .map_err(|e| BenchError::context("allocating the command ring", e))?;
                    let up = |c: &(Vec<Command>, Vec<Command>)| {
                        p.upload(&c.0, &c.1)
                            .map_err(|e| BenchError::context("copying the commands to the GPU", e))
                    };
                    let device = Some((up(&cmds[0])?, up(&cmds[1])?));
                    Some(RingSide {
                        mem,
                        next: 0,
                        device,
                    })
                }
                (_, _, true) => {
                    return Err(BenchError::usage(
                        "--initiator gpu with a GPU producer needs --mem cuda on a GPU; use --producer host",
                    ))
                }
                _ => Some(RingSide {
                    mem: RingMemory::heap(1, RING_LOG2),
                    next: 0,
                    device: None,
                }),
            }
        } else {
            None
        };
        let reducer = match &prod {
            Some(p) => Reducer::gpu(p, &plan)?,
            None => Reducer::Cpu,
        };
        mesh.count_from_now(false);
        let hook = verify::corrupt_hook();
        facts.header.push(format!(
            "# ep: {} tokens x {} {} per rank, top-{} of {} experts ({} per rank), routing {}, layout {}; dispatch message {} B, combine message {} B",
            a.tokens,
            a.hidden,
            a.dtype.name(),
            a.topk,
            a.experts,
            routing.local_experts(),
            a.routing,
            a.layout.name(),
            plan.msg,
            plan.out
        ));
        facts.header.push(format!(
            "# time = the slowest rank per iteration (each phase starts after a barrier); GB/s as DeepEP counts it; combine includes the weighted sum ({})",
            reducer.name()
        ));
        let dest: Vec<u64> = routing.pairs_per_rank();
        facts.header.push(format!(
            "# routing imbalance (max/mean): ranks {:.2}, experts {:.2}",
            imbalance(&dest),
            imbalance(&routing.pairs_per_expert())
        ));
        self.state = Some(State {
            mesh,
            send,
            recv,
            plan,
            cpu_writes,
            cmds,
            merge,
            ring_writes,
            ring,
            prod,
            reducer,
            stream: Stream::default(),
            corrupt_dispatch: hook,
            corrupt_combine: hook,
            combined: Vec::new(),
            arrival_ns: [Vec::new(), Vec::new()],
        });
        self.routing = Some(routing);
        Ok(facts)
    }

    fn points(&self, _ctx: &Ctx) -> Result<Vec<EpSpec>, BenchError> {
        Ok(self
            .args
            .initiators()
            .into_iter()
            .map(|initiator| EpSpec {
                initiator,
                part: Part::Total,
            })
            .collect())
    }

    fn label(&self, spec: &EpSpec) -> String {
        format!("{} {}", spec.initiator.name(), spec.part.name())
    }

    fn measure(&mut self, ctx: &Ctx, spec: &EpSpec) -> Result<Measured, BenchError> {
        let (iters, warmup) = self.args.iterations();
        let verify = ctx.opts.job.verify();
        let st = self
            .state
            .as_mut()
            .ok_or_else(|| BenchError::failed("measure before setup"))?;
        let lp = harness::Loop {
            warmup,
            iters,
            timed: true,
            clock: harness::Clock::Iteration,
        };
        let mut rounds = EpRounds::new(st, ctx, spec.initiator, verify, &mut self.iter_no, iters);
        let measured = ctx.run_device_rounds(lp, &mut rounds)?;
        let mut log = rounds.log;
        let mut dest = vec![0u64; ctx.world as usize];
        for p in &st.plan.dispatch.puts {
            dest[p.dst as usize] += p.len as u64;
        }
        log.dest_bytes = dest;
        Ok(measured.detail(log))
    }

    /// One run of the loop, three records: dispatch, combine and the two together. The payload
    /// errors of the run are counted once, on the dispatch record.
    fn points_of(&self, ctx: &Ctx, spec: &EpSpec, all: &[Measured]) -> Vec<Point> {
        let errors: u64 = all.iter().map(|m| m.errors).sum();
        [Part::Dispatch, Part::Combine, Part::Total]
            .into_iter()
            .enumerate()
            .map(|(k, part)| Point {
                errors: if k == 0 { errors } else { 0 },
                ..self.point(ctx, &EpSpec { part, ..*spec }, all)
            })
            .collect()
    }

    fn point(&self, ctx: &Ctx, spec: &EpSpec, all: &[Measured]) -> Point {
        self.record_point(ctx, spec, all)
    }

    fn summary(&self, records: &[Record]) -> Vec<String> {
        self.summary_lines(records)
    }
}

/// Runs one rank of `efabench ep`.
pub fn run_ep(args: &EpArgs, build: &harness::BuildInfo) -> Result<crate::Verdict, BenchError> {
    let mut b = Ep::new(args)?;
    let run = harness::run(&mut b, args, build);
    if run.is_err() {
        // As in `alltoall`: no fabric teardown with operations possibly still posted.
        b.leak_fabric();
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_initiator_gets_three_parts() {
        let parts: Vec<Part> = [Part::Dispatch, Part::Combine, Part::Total].to_vec();
        assert_eq!(
            parts.iter().map(|p| p.name()).collect::<Vec<_>>(),
            ["dispatch", "combine", "dispatch+combine"]
        );
    }
}
