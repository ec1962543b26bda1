//! `sendrecv --variant pingpong --loop lean`: fabtests' ping-pong loop. Per iteration the sender
//! posts its receive (untimed, as in the tracked loop), then, timed, injects and polls the one CQ
//! until the one receive completes; the responder polls for the message, posts its next receive
//! and injects the reply. Nothing else runs per message (see [`crate::mesh::LeanStep`] for what
//! the tracked loop adds and what this one keeps: health and `--timeout` every
//! [`crate::mesh::EMPTY_POLLS`] empty polls, error completions, verification of every payload
//! outside the timed body).
//!
//! It applies to one rail, messages that fit `fi_inject` and the ping-pong variant of `sendrecv`;
//! anything else is refused with a usage error before the fabric is opened ([`check`]), not run
//! on the tracked loop behind the user's back.

use super::{Step, Variant};
use crate::error::BenchError;
use crate::harness::{Ctx, FabricPlan, Measured, Rounds};
use crate::mesh::LeanStep;
use crate::mesh::Link;

/// Which loop runs `sendrecv`'s ping-pong (`--loop`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum PingLoop {
    /// `lean` for every step it applies to (a sendrecv ping-pong on one rail whose messages fit
    /// `fi_inject`), `tracked` for the rest; each record says which ran.
    #[default]
    Auto,
    /// Every message through the mesh's tracked operations: any rails and strategy, completions
    /// sorted by tag, per-rail statistics counted per post.
    Tracked,
    /// fabtests' loop: the posts resolved once per step, one CQ read per poll (one rail,
    /// messages up to the provider's inject size, pingpong only).
    Lean,
}

impl PingLoop {
    pub fn name(self) -> &'static str {
        match self {
            PingLoop::Auto => "auto",
            PingLoop::Tracked => "tracked",
            PingLoop::Lean => "lean",
        }
    }

    /// The loop one step runs: `auto` resolved with the largest message the lean loop takes
    /// in this run (`lean_up_to`, `None` where it applies to no step).
    pub(super) fn resolve(self, variant: Variant, size: u64, lean_up_to: Option<u64>) -> Self {
        match self {
            PingLoop::Auto => match lean_up_to {
                Some(max) if variant == Variant::Pingpong && size <= max => PingLoop::Lean,
                _ => PingLoop::Tracked,
            },
            chosen => chosen,
        }
    }
}

/// The largest message `--loop auto` runs on the lean loop in this run: the provider's inject
/// size for a sendrecv on one rail, `None` for anything else.
pub(super) fn lean_up_to(bench: &str, plan: &FabricPlan) -> Option<u64> {
    (bench == BENCH && plan.rails.len() == 1).then(|| plan.rails[0].inject_size)
}

/// The benchmark that has a lean loop.
const BENCH: &str = <super::SendRecv as super::rounds::Message>::NAME;

/// Refuses `--loop lean` where it does not apply: another benchmark than sendrecv, the stream
/// variant, more than one rail, or messages up to `max_size` that do not fit `fi_inject`.
pub(super) fn check(
    ping_loop: PingLoop,
    bench: &str,
    variants: &[Variant],
    plan: &FabricPlan,
    max_size: u64,
) -> Result<(), BenchError> {
    if ping_loop != PingLoop::Lean {
        return Ok(());
    }
    let refuse = |why: String| Err(BenchError::usage(format!("--loop lean {why}")));
    if bench != BENCH {
        return refuse(format!("is a {BENCH} loop; {bench} runs --loop tracked"));
    }
    if variants.contains(&Variant::Stream) {
        return refuse("runs the ping-pong only: add --variant pingpong".into());
    }
    if plan.rails.len() != 1 {
        return refuse(format!(
            "posts on one rail and --rails gave {}: use --rails 1",
            plan.rails.len()
        ));
    }
    let inject = plan.rails[0].inject_size;
    if max_size > inject {
        return refuse(format!(
            "sends by fi_inject, at most {inject} bytes on provider {}, and -e asks for {max_size}: \
             lower -e or use --loop tracked",
            plan.provider
        ));
    }
    Ok(())
}

/// The header line of a sendrecv run with a ping-pong: which loop runs it.
pub(super) fn header(
    ping_loop: PingLoop,
    bench: &str,
    variants: &[Variant],
    lean_up_to: Option<u64>,
) -> Option<String> {
    if bench != BENCH || !variants.contains(&Variant::Pingpong) {
        return None;
    }
    Some(match (ping_loop, lean_up_to) {
        (PingLoop::Lean, _) => "# loop: lean (fabtests' ping-pong loop, one rail)".to_string(),
        (PingLoop::Tracked, _) | (PingLoop::Auto, None) => {
            "# loop: tracked (every completion tracked, any number of rails)".to_string()
        }
        (PingLoop::Auto, Some(max)) => format!(
            "# loop: lean for the ping-pong up to {} (fabtests' loop), tracked above it and for \
             the stream (--loop auto)",
            crate::size::human(max)
        ),
    })
}

/// One step of the lean ping-pong on this rank: the sender times, the responder answers.
pub(super) fn measure(link: &mut Link, ctx: &Ctx, s: Step) -> Result<Measured, BenchError> {
    let sender = s.sends(ctx);
    let peer = if sender { s.responder } else { s.sender };
    let lane = link.mesh.lane(peer)?;
    let measured = {
        let mut step = link.mesh.lean_step(&lane, s.size)?;
        if s.verify {
            step.fill(0, s.seeds(sender, 0, 0).0)?;
        }
        if !sender {
            step.expect(0)?;
        }
        let last = s.warmup + s.iters;
        ctx.run_rounds(
            s.looped(sender),
            &mut Lean {
                step,
                s,
                sender,
                last,
            },
        )?
    };
    // One inject per iteration on each side.
    link.mesh.count_timed(0, s.iters, s.size);
    Ok(measured)
}

/// This rank's side of a lean step.
struct Lean<'m> {
    step: LeanStep<'m>,
    s: Step,
    sender: bool,
    /// Iterations in all (warm-up included): the responder posts no receive after the last.
    last: u64,
}

impl Rounds for Lean<'_> {
    fn prepare(&mut self, i: u64) -> Result<(), BenchError> {
        match self.sender {
            true => self.step.expect((i % 2) as usize),
            false => Ok(()),
        }
    }

    #[inline(always)]
    fn body(&mut self, i: u64) -> Result<(), BenchError> {
        let slot = (i % 2) as usize;
        if self.sender {
            self.step.inject(slot)?;
            return self.step.arrive(slot);
        }
        self.step.arrive(slot)?;
        // The next receive goes up before the reply, so the sender's next message never
        // arrives unexpected.
        if i + 1 < self.last {
            self.step.expect(1 - slot)?;
        }
        self.step.inject(slot)
    }

    fn check(&mut self, i: u64) -> Result<u64, BenchError> {
        let (slot, s) = ((i % 2) as usize, self.s);
        if !s.verify {
            return Ok(0);
        }
        let errors = self.step.check(slot, s.seeds(self.sender, i, slot).1);
        let next = 1 - slot;
        self.step.fill(next, s.seeds(self.sender, i + 1, next).0)?;
        Ok(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_only_for_a_sendrecv_pingpong() {
        let pp = [Variant::Pingpong];
        assert!(header(PingLoop::Tracked, BENCH, &pp, Some(4096))
            .unwrap()
            .starts_with("# loop: tracked"));
        assert!(header(PingLoop::Lean, BENCH, &pp, Some(4096))
            .unwrap()
            .starts_with("# loop: lean ("));
        let auto = header(PingLoop::Auto, BENCH, &pp, Some(4096)).unwrap();
        assert!(
            auto.contains("up to 4K") && auto.contains("tracked above"),
            "{auto}"
        );
        assert!(header(PingLoop::Auto, BENCH, &pp, None)
            .unwrap()
            .starts_with("# loop: tracked"));
        assert!(header(PingLoop::Tracked, "write", &pp, None).is_none());
        assert!(header(PingLoop::Tracked, BENCH, &[Variant::Stream], None).is_none());
    }

    #[test]
    fn auto_runs_lean_where_it_applies() {
        let (pp, st) = (Variant::Pingpong, Variant::Stream);
        assert_eq!(PingLoop::Auto.resolve(pp, 8, Some(4096)), PingLoop::Lean);
        assert_eq!(PingLoop::Auto.resolve(pp, 4096, Some(4096)), PingLoop::Lean);
        assert_eq!(
            PingLoop::Auto.resolve(pp, 4097, Some(4096)),
            PingLoop::Tracked
        );
        assert_eq!(PingLoop::Auto.resolve(st, 8, Some(4096)), PingLoop::Tracked);
        assert_eq!(PingLoop::Auto.resolve(pp, 8, None), PingLoop::Tracked);
        // An explicit choice stays (lean was checked against the run before).
        assert_eq!(
            PingLoop::Tracked.resolve(pp, 8, Some(4096)),
            PingLoop::Tracked
        );
        assert_eq!(PingLoop::Lean.resolve(pp, 8, None), PingLoop::Lean);
    }
}
