//! Posting: every operation a benchmark puts on the mesh's rails is one [`Request`] value
//! (what, with whom, from and to which bytes, over which stripes, and where its local completion
//! goes) handed to [`Mesh::submit`]. One call maps it to the fabric layer's
//! [`efabench_fabric::Op`] stripe by stripe, so the completion accounting and the per-rail
//! statistics have one place, whatever the benchmark.
//!
//! Callers build their requests themselves: a request names in one place what the old per-kind
//! helpers spread over their argument lists, and a whole striped message is one request rather
//! than a loop of per-stripe posts. The one shorthand left is [`Mesh::signal`], because a
//! control word's regions and offsets are the mesh's own layout (`ctrl`), not the caller's.
//! ([`super::Link::post`] and [`super::Link::inject`] are not shorthands of the mesh's: they
//! place a window position in its buffer slot and route it by message number, then submit.)
//!
//! # Where a completion goes
//! * [`Completion::Counted`]: one in [`Mesh::outstanding`] per stripe (the collectives drain it).
//! * [`Completion::Received`]: a receive that lands in [`Mesh::received`], numbered.
//! * [`Completion::Tracked`]: the stripes count towards one message, identified by its verb and
//!   index, which is done (into [`Mesh::next_op`] and the other waits) once every stripe has
//!   completed: the point-to-point protocols wait for single messages.
//! * [`Completion::Inject`]: by `fi_inject`, which completes nothing.
//!
//! # Inlining
//! `submit` is inlined into each call site, where the request is mostly constant: the matches on
//! its verb, peer and completion fold away (a run-time dispatch per post showed in the 8-byte
//! ping-pong), and a one-stripe route is a loop of one.

use efabench_fabric::{Flags, Op as FiOp, Stripe};

use super::track::tag;
use super::{Lane, LaneRail, Mesh, MeshResult, CTX_COUNTED, CTX_RECV, CTX_TRACK};
use crate::error::BenchError;

/// What a request does, and so between which registered regions it moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// Our `send` into the peer's `recv` (RDMA write).
    Write,
    /// The peer's `send` into our `recv` (RDMA read).
    Read,
    /// Our `send` to the peer's next posted receive.
    Send,
    /// A receive into our `recv`, matched by whatever arrives (receives name no source in this
    /// fabric layer).
    Recv,
    /// Our `ctrl` into the peer's `ctrl` (a control word: only its CQ data matters).
    Signal,
}

/// The peer of a request.
#[derive(Clone, Copy, Debug)]
pub enum Remote<'a> {
    /// A rank, looked up on the mesh on every stripe.
    Rank(u32),
    /// A peer resolved once for many requests ([`Mesh::lane`]).
    Lane(&'a Lane),
    /// No peer: only a receive takes it.
    Any,
}

/// Where the local completion of every stripe of a request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completion {
    /// Counted in [`Mesh::outstanding`].
    Counted,
    /// Into [`Mesh::received`] as receive number `index`.
    Received(usize),
    /// Towards tracked message (the request's verb, `index`), `index` below
    /// [`super::MAX_INDEX`].
    Tracked(usize),
    /// Posted by `fi_inject`: nothing completes, the buffer is reusable at once.
    Inject,
}

/// One operation to post: `route`'s stripes, each at its offset from `local` in this rank's
/// region of `op` and from `remote` in the peer's (sends and receives have no remote offset),
/// every stripe of a write, send or signal carrying `data` as remote CQ data.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub op: Verb,
    pub peer: Remote<'a>,
    pub local: usize,
    pub remote: usize,
    /// Which bytes go over which rail ([`on_rail`] for a single rail).
    pub route: &'a [Stripe],
    pub data: Option<u64>,
    pub completion: Completion,
}

impl Mesh {
    /// Posts every stripe of `req`, in route order, accounting each stripe's local completion as
    /// [`Request::completion`] says. Writes, reads and sends count towards their rail's bytes and
    /// operations; receives and signals do not (they move no payload).
    #[inline(always)]
    pub fn submit(&mut self, req: Request<'_>) -> MeshResult<()> {
        let (ctx, flags) = match req.completion {
            Completion::Counted => (CTX_COUNTED, Flags::NONE),
            Completion::Received(index) => (CTX_RECV | index as u64, Flags::NONE),
            Completion::Tracked(index) => {
                let tag = tag(req.op, index);
                self.track(tag, req.route.len());
                (CTX_TRACK | u64::from(tag), Flags::NONE)
            }
            Completion::Inject => (0, Flags::INJECT),
        };
        for &Stripe { rail, off, len } in req.route {
            let (local, remote) = (req.local + off, (req.remote + off) as u64);
            let post = match req.op {
                Verb::Write => {
                    let l = self.ends(req.peer, rail)?;
                    FiOp::Write {
                        peer: l.addr,
                        local: l.send.range(local, len),
                        remote: l.peer_recv.at(remote),
                        data: req.data,
                        flags,
                        ctx,
                    }
                }
                Verb::Read => {
                    let l = self.ends(req.peer, rail)?;
                    FiOp::Read {
                        peer: l.addr,
                        local: l.recv.range(local, len),
                        remote: l.peer_send.at(remote),
                        ctx,
                    }
                }
                Verb::Send => {
                    let l = self.ends(req.peer, rail)?;
                    FiOp::Send {
                        peer: l.addr,
                        local: l.send.range(local, len),
                        data: req.data,
                        flags,
                        ctx,
                    }
                }
                Verb::Recv => FiOp::Recv {
                    local: self.recv_reg.id(rail).range(local, len),
                    ctx,
                },
                Verb::Signal => {
                    let l = self.ends(req.peer, rail)?;
                    FiOp::Write {
                        peer: l.addr,
                        local: l.ctrl.range(local, len),
                        remote: l.peer_ctrl.at(remote),
                        data: req.data,
                        flags,
                        ctx,
                    }
                }
            };
            self.group.rail(rail).post(post)?;
            if req.completion == Completion::Counted {
                self.outstanding += 1;
            }
            if !matches!(req.op, Verb::Recv | Verb::Signal) {
                self.count(rail, len);
            }
        }
        Ok(())
    }

    /// Rail `rail` of `peer`: the lane's, or the rank's looked up now.
    #[inline(always)]
    fn ends(&self, peer: Remote<'_>, rail: usize) -> MeshResult<LaneRail> {
        match peer {
            Remote::Lane(lane) => lane.rail(rail).copied(),
            Remote::Rank(rank) => self.lane_rail(rank, rail),
            Remote::Any => Err(no_peer()),
        }
    }

    /// An 8-byte write into `peer`'s control region carrying `data` (ACK/READY), on rail 0,
    /// counted in [`Mesh::outstanding`].
    pub fn signal(&mut self, peer: u32, data: u64) -> MeshResult<()> {
        self.submit(Request {
            op: Verb::Signal,
            peer: Remote::Rank(peer),
            local: 0,
            remote: 8,
            route: &on_rail(0, 8),
            data: Some(data),
            completion: Completion::Counted,
        })
    }
}

/// The route of `len` bytes that all go over rail `rail`.
#[inline(always)]
pub fn on_rail(rail: usize, len: usize) -> [Stripe; 1] {
    [Stripe { rail, off: 0, len }]
}

#[cold]
fn no_peer() -> BenchError {
    BenchError::failed("a write, read, send or signal was posted without a peer")
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use efabench_bootstrap::{Bootstrap, RankInfo};
    use efabench_fabric::{
        get_info, load_library, resolve_rails, Hints, MrPath, RailConfig, RailCount, RailGroup,
    };
    use efabench_gpu::MemKind;

    use super::*;
    use crate::harness::Strategy;
    use crate::mesh::alloc;

    const LEN: usize = 4096;

    /// Ranks 0 and 1 of a two-rank mesh on two virtual shm rails, in this process.
    fn pair(bs: &Bootstrap) -> [Mesh; 2] {
        load_library(None).expect("libfabric must be loadable for this test");
        let infos = get_info(&Hints::provider("shm")).expect("shm is offered");
        let plan = resolve_rails(&infos, RailCount::Count(2), &[]).expect("two shm rails");
        let mesh = |me| {
            let group = RailGroup::open_plan(&plan, &RailConfig::default()).expect("open rails");
            let bufs = alloc(MemKind::Host, LEN, LEN, None).expect("buffers");
            let (timeout, health) = (Duration::from_secs(10), bs.health());
            Mesh::new(
                group,
                Strategy::Split,
                bufs,
                MrPath::Auto,
                me,
                2,
                timeout,
                health,
            )
            .expect("mesh")
        };
        let mut m = [mesh(0), mesh(1)];
        let blobs = [m[0].local_blob().unwrap(), m[1].local_blob().unwrap()];
        for x in &mut m {
            x.connect(&blobs).expect("connect");
        }
        m
    }

    /// Progresses `m` until `done` holds.
    fn until(m: &mut Mesh, done: impl Fn(&Mesh) -> bool) {
        let t0 = Instant::now();
        while !done(m) {
            m.progress().expect("progress");
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the fabric did not move"
            );
        }
    }

    /// Runs `f` while another thread progresses `peer` (on shm the peer's polls move the data).
    fn with_peer<T>(peer: &mut Mesh, f: impl FnOnce() -> T) -> T {
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    peer.progress().expect("the peer's progress");
                }
            });
            let _stop = Stop(&stop);
            f()
        })
    }

    const TWO_RAILS: [Stripe; 2] = [
        Stripe {
            rail: 0,
            off: 0,
            len: 96,
        },
        Stripe {
            rail: 1,
            off: 96,
            len: 32,
        },
    ];

    #[test]
    fn every_completion_goes_where_its_request_says() {
        let bs = Bootstrap::connect(&RankInfo::single(), Duration::from_secs(5)).unwrap();
        let [mut a, mut b] = pair(&bs);
        a.count_from_now(true);

        // Counted: one outstanding per stripe; each stripe lands at its offset with the data.
        a.fill_send(512, 128, 7).unwrap();
        let write = Request {
            op: Verb::Write,
            peer: Remote::Rank(1),
            local: 512,
            remote: 1024,
            route: &TWO_RAILS,
            data: Some(0x11),
            completion: Completion::Counted,
        };
        with_peer(&mut b, || {
            a.submit(write).unwrap();
            assert!(a.outstanding > 0);
            until(&mut a, |a| a.outstanding == 0);
        });
        until(&mut b, |b| b.arrivals.len() == 2);
        assert_eq!(Vec::from(std::mem::take(&mut b.arrivals)), [0x11, 0x11]);
        assert_eq!(b.check_recv(1024, 128, 7), 0);

        // Tracked through a lane: done once both stripes are.
        b.fill_send(0, 128, 9).unwrap();
        let lane = a.lane(1).unwrap();
        let read = Request {
            op: Verb::Read,
            peer: Remote::Lane(&lane),
            local: 2048,
            remote: 0,
            route: &TWO_RAILS,
            data: None,
            completion: Completion::Tracked(3),
        };
        with_peer(&mut b, || {
            a.submit(read).unwrap();
            until(&mut a, |a| !a.done.is_empty());
        });
        let done = a.take_done().unwrap();
        assert_eq!((done.op, done.index), (Verb::Read, 3));
        assert_eq!(a.check_recv(2048, 128, 9), 0);
        assert_eq!(a.outstanding, 0);

        // Received: a receive names no peer and lands, numbered, with the sender's data.
        let recv = Request {
            op: Verb::Recv,
            peer: Remote::Any,
            local: 3072,
            remote: 0,
            route: &on_rail(1, 64),
            data: None,
            completion: Completion::Received(5),
        };
        b.submit(recv).unwrap();
        let send = Request {
            op: Verb::Send,
            peer: Remote::Rank(1),
            local: 0,
            remote: 0,
            route: &on_rail(1, 64),
            data: Some(0x22),
            completion: Completion::Counted,
        };
        with_peer(&mut b, || {
            a.submit(send).unwrap();
            until(&mut a, |a| a.outstanding == 0);
        });
        until(&mut b, |b| !b.received.is_empty());
        let r = b.received.pop_front().unwrap();
        assert_eq!((r.index, r.data, r.len), (5, 0x22, 64));

        // A signal carries its word and counts towards no rail's payload.
        with_peer(&mut b, || {
            a.signal(1, 0x33).unwrap();
            until(&mut a, |a| a.outstanding == 0);
        });
        until(&mut b, |b| !b.arrivals.is_empty());
        assert_eq!(b.arrivals.pop_front(), Some(0x33));

        // A write without a peer is refused before anything is posted.
        let lost = Request {
            peer: Remote::Any,
            ..write
        };
        assert!(a.submit(lost).is_err());
        assert_eq!(a.outstanding, 0);

        let loads: Vec<_> = a.rail_loads().iter().map(|l| (l.bytes, l.ops)).collect();
        assert_eq!(loads, [(96 + 96, 2), (32 + 32 + 64, 3)]);
    }
}
