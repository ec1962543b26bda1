//! The stages of `efabench cluster`, one after the other on one bootstrap:
//!
//! 1. **checks**: the first rank of every host runs the node checks (the doctor's) and sends
//!    them, with the facts compared across nodes, to rank 0;
//! 2. **consistency**: rank 0 compares those facts (no communication);
//! 3. **pairs**: the `pairs` benchmark, every ordered pair (or the `--pairs` schedule), slow
//!    nodes localized;
//! 4. **alltoall**: the `alltoall` benchmark across every rank.
//!
//! Each stage prints a progress line on rank 0 when it starts and ends. After every stage rank
//! 0 rewrites `--summary`, so a run cut short (a node lost, rank 0 killed) keeps what was done.
//! A stage that fails because a rank died or froze names that rank's host; the stages after it
//! are skipped (the job is gone) and the verdicts are made from what was measured.

use std::path::Path;
use std::time::{Duration, Instant};

use efabench_bench::alltoall::Alltoall;
use efabench_bench::harness::{self, BuildInfo};
use efabench_bench::pairs::Pairs;
use efabench_bench::{BenchError, Verdict};
use efabench_bootstrap::{Bootstrap, BootstrapError};
use efabench_record::Record;

use crate::args::{ClusterArgs, Stage};
use crate::baseline::{self, Loaded};
use crate::consistency::{self, Consistency};
use crate::figures::Matrix;
use crate::node::NodeReport;
use crate::paths::PathError;
use crate::summary::{self, StageReport, StageStatus, Summary};
use crate::verdict::{self, Ending, Judgement, Lost, Thresholds};

/// How long a rank may stay alive after the job failed: long enough for rank 0 to name the
/// lost node and write the summary.
const WATCHDOG_GRACE: Duration = Duration::from_secs(10);

/// How long a failed stage waits for the bootstrap to name the rank behind it.
const FAILURE_WAIT: Duration = Duration::from_secs(3);

/// What the run ends with: how it ended (the same on every rank), and on rank 0 the summary.
pub struct Outcome {
    pub ending: Ending,
    pub summary: Option<Summary>,
}

/// The node checks of this host, given the counter interval in seconds.
pub type NodeCheck<'a> = &'a dyn Fn(f64) -> NodeReport;

fn progress(line: &str) {
    eprintln!("efabench cluster: {line}");
}

/// Rank 0's view of the run so far.
struct State<'a> {
    args: &'a ClusterArgs,
    build: &'a BuildInfo,
    started: String,
    world: u32,
    rank_host: Vec<String>,
    stages: Vec<StageReport>,
    reports: Vec<NodeReport>,
    consistency: Consistency,
    pairs: Option<Matrix>,
    alltoall: Option<Matrix>,
    lost: Vec<Lost>,
    thresholds: Thresholds,
    /// `--baseline`, read before the stages.
    baseline: Option<Loaded>,
    /// The records of the benchmark stages, for the baseline comparison and file.
    records: Vec<Record>,
}

impl State<'_> {
    fn stage(&mut self, name: &str) -> &mut StageReport {
        let i = self.stages.iter().position(|s| s.name == name).unwrap_or(0);
        &mut self.stages[i]
    }

    fn judge(&self) -> Judgement {
        verdict::judge(&verdict::Inputs {
            rank_host: &self.rank_host,
            reports: &self.reports,
            consistency: &self.consistency,
            pairs: self.pairs.as_ref(),
            alltoall: self.alltoall.as_ref(),
            lost: &self.lost,
            thresholds: &self.thresholds,
        })
    }

    fn summary(&self, complete: bool) -> Summary {
        let mut j = self.judge();
        let compared = match (&self.baseline, &self.pairs) {
            (Some(b), Some(_)) => Some(baseline::judge(
                &mut j,
                &self.rank_host,
                &self.records,
                b,
                &self.thresholds,
            )),
            _ => None,
        };
        let mut hosts: Vec<&String> = self.rank_host.iter().collect();
        hosts.sort();
        hosts.dedup();
        Summary {
            schema: summary::SCHEMA.into(),
            version: self.build.version.clone(),
            git: self.build.git.clone(),
            started: self.started.clone(),
            written: efabench_record::now_rfc3339(),
            world: self.world,
            hosts: j.nodes.len().max(hosts.len()),
            verdict: j.run_verdict(),
            exit_code: summary::exit_code(j.ending()),
            cluster_verdict: j.cluster_verdict(),
            cluster_failures: j.cluster_failures,
            complete,
            thresholds: self.thresholds.clone(),
            stages: self.stages.clone(),
            cluster: j.cluster,
            link_profile: j.link,
            nodes: j.nodes,
            baseline: compared,
        }
    }

    /// Rewrites `--summary` (between stages and at the end); a failure to write is reported,
    /// not fatal: the verdicts are still printed.
    fn save(&self, complete: bool) -> Summary {
        let s = self.summary(complete);
        if let Some(p) = &self.args.summary {
            if let Err(e) = summary::write(p, &s) {
                eprintln!(
                    "efabench cluster: cannot write --summary {}: {e}",
                    p.display()
                );
            }
        }
        s
    }
}

/// Paths rank 0 writes, and the baseline it reads, checked before anything runs.
fn preflight(args: &ClusterArgs) -> Result<Option<Loaded>, PathError> {
    if let Some(p) = &args.summary {
        summary::check_writable(p, "--summary")?;
    }
    if let Some(p) = &args.prometheus {
        if p != Path::new("-") {
            summary::check_writable(p, "--prometheus")?;
        }
    }
    if let Some(p) = &args.save_baseline {
        baseline::check_save_path(p)?;
    }
    args.baseline.as_deref().map(baseline::load).transpose()
}

/// Host of each rank as the launcher placed them (Slurm's node list and tasks per node, block
/// distribution), for naming ranks that never joined.
pub fn launcher_hosts(world: u32, env: &dyn Fn(&str) -> Option<String>) -> Option<Vec<String>> {
    let list = env("SLURM_STEP_NODELIST").or_else(|| env("SLURM_JOB_NODELIST"))?;
    let nodes = efabench_bootstrap::expand_hostlist(&list).ok()?;
    let tpn = env("SLURM_STEP_TASKS_PER_NODE").or_else(|| env("SLURM_TASKS_PER_NODE"))?;
    let mut counts = Vec::new();
    for part in tpn.split(',') {
        let (n, times) = match part.split_once("(x") {
            Some((n, t)) => (n, t.trim_end_matches(')')),
            None => (part, "1"),
        };
        let n: usize = n.trim().parse().ok()?;
        let times: usize = times.trim().parse().ok()?;
        counts.extend(std::iter::repeat_n(n, times));
    }
    let mut out = Vec::new();
    for (node, n) in nodes.iter().zip(counts) {
        out.extend(std::iter::repeat_n(node.clone(), n));
    }
    (out.len() == world as usize).then_some(out)
}

/// The host behind a failed job, when the bootstrap names one rank.
fn lost_of(bs: &Bootstrap, hosts: &[String], stage: &str, e: &BenchError) -> Vec<Lost> {
    let Some(f) = bs.failure_within(FAILURE_WAIT) else {
        return Vec::new();
    };
    let rank = match &f {
        // A rank that crashed says so in its own abort ("it died on signal 11 ..."); any other
        // abort is a rank saying why it gave up, which may be about another rank.
        BootstrapError::Aborted { rank, reason } if reason.starts_with("it died on signal") => {
            Some(*rank)
        }
        BootstrapError::Aborted { .. } => None,
        other => other.failed_rank(),
    };
    rank.and_then(|r| hosts.get(r as usize))
        .map(|h| Lost {
            host: h.clone(),
            stage: stage.into(),
            why: if f.to_string() == e.to_string() {
                f.to_string()
            } else {
                format!("{f} ({e})")
            },
        })
        .into_iter()
        .collect()
}

/// Runs every stage on this rank. Errors are bad input (exit 2) or, on ranks other than 0, the
/// job's failure; rank 0 turns a lost node into a verdict instead.
pub fn run(
    args: &ClusterArgs,
    build: &BuildInfo,
    node_check: NodeCheck,
) -> Result<Outcome, BenchError> {
    // Every option is checked before anything connects.
    args.pairs_args(2)?;
    args.alltoall_args()?;
    let flags = args.launch.flags(Duration::from_secs_f64(args.timeout));
    let info = efabench_bootstrap::detect_from_process_env(&flags).map_err(BenchError::from)?;
    // The job's size is known now: refuse what no stage of it could run, on every rank alike.
    args.validate(info.world)?;
    let (bad_path, loaded) = if info.rank == 0 {
        // The message travels to every rank as text.
        match preflight(args) {
            Ok(l) => (None, l),
            Err(e) => (Some(e.to_string()), None),
        }
    } else {
        (None, None)
    };
    if let (Some(e), 1) = (&bad_path, info.world) {
        return Err(BenchError::usage(e.clone()));
    }
    let started = efabench_record::now_rfc3339();
    let mut state = State {
        args,
        build,
        started,
        world: info.world,
        rank_host: Vec::new(),
        stages: [
            ("checks", Some(args.budget(Stage::Checks))),
            ("consistency", None),
            ("pairs", Some(args.budget(Stage::Pairs))),
            ("alltoall", Some(args.budget(Stage::Alltoall))),
        ]
        .iter()
        .map(|(n, b)| StageReport {
            name: n.to_string(),
            status: StageStatus::Pending,
            budget_s: *b,
            elapsed_s: 0.0,
            detail: String::new(),
        })
        .collect(),
        reports: Vec::new(),
        consistency: Consistency::default(),
        pairs: None,
        alltoall: None,
        lost: Vec::new(),
        thresholds: Thresholds {
            isolate_below: args.isolate_below / 100.0,
            warn_below: args.warn_below / 100.0,
            alpha: args.alpha,
            min_pair_gbps: args.min_pair_gbps,
            min_pair_from: args.min_pair_gbps.map(|_| "--min-pair-gbps".into()),
            min_link_fraction: args.min_link_fraction,
            ignore_checks: args.ignore_check.clone(),
        },
        baseline: loaded,
        records: Vec::new(),
    };
    let bs = match Bootstrap::connect(&info, Duration::from_secs_f64(args.timeout)) {
        Ok(bs) => bs,
        Err(e) => {
            if let Some(p) = bad_path {
                return Err(BenchError::usage(p));
            }
            let missing = match &e {
                BootstrapError::Timeout {
                    op, waiting_for, ..
                } if op == "connect" && info.rank == 0 => waiting_for.clone(),
                _ => return Err(BenchError::from(e)),
            };
            // Rank 0: name the hosts that never joined, from the launcher's placement.
            let placed = launcher_hosts(info.world, &|k| std::env::var(k).ok());
            // Only the missing nodes get a verdict: the others were never checked.
            state.rank_host = Vec::new();
            for r in &missing {
                let host = placed
                    .as_ref()
                    .and_then(|p| p.get(*r as usize).cloned())
                    .unwrap_or_else(|| format!("rank {r} (host unknown)"));
                state.lost.push(Lost {
                    host,
                    stage: "join".into(),
                    why: e.to_string(),
                });
            }
            for s in &mut state.stages {
                s.status = StageStatus::Skipped;
                s.detail = "not every rank joined".into();
            }
            let s = state.save(true);
            crate::table::print_verdicts(&s);
            return Ok(Outcome {
                ending: s.ending(),
                summary: Some(s),
            });
        }
    };
    bs.arm_watchdog(WATCHDOG_GRACE);
    let (rank, world) = (bs.rank(), bs.world());
    // Rank 0's path check decides for every rank: nothing runs with a summary it cannot write.
    let verdict = bs
        .broadcast(bad_path.unwrap_or_default().as_bytes())
        .map_err(BenchError::from)?;
    if !verdict.is_empty() {
        return Err(BenchError::usage(
            String::from_utf8_lossy(&verdict).into_owned(),
        ));
    }
    let me = efabench_record::hostname();
    state.rank_host = bs
        .all_gather(me.as_bytes())
        .map_err(BenchError::from)?
        .iter()
        .map(|h| String::from_utf8_lossy(h).into_owned())
        .collect();
    let mut distinct = state.rank_host.clone();
    distinct.sort();
    distinct.dedup();
    let lead = rank == 0;
    let echo = if args.verbose {
        harness::Echo::Tables
    } else {
        harness::Echo::Quiet
    };
    if lead {
        progress(&format!(
            "{world} ranks on {} host(s); stages: checks, consistency, pairs, alltoall",
            distinct.len()
        ));
    }

    let mut failed: Option<BenchError> = None;
    // 1. checks
    let t = Instant::now();
    if !args.runs(Stage::Checks) {
        skip(&mut state, &["checks", "consistency"], "--skip checks");
    } else {
        let budget = args.budget(Stage::Checks);
        if lead {
            progress(&format!(
                "[1/4] checks: the doctor's checks on {} host(s) (budget {budget} s)",
                distinct.len()
            ));
            state.stage("checks").status = StageStatus::Running;
            state.save(false);
        }
        let first_on_host = state.rank_host.iter().position(|h| *h == me) == Some(rank as usize);
        let mine = if first_on_host {
            node_check(args.interval.min(budget / 2.0)).encode()
        } else {
            Vec::new()
        };
        match bs.gather(&mine) {
            Ok(Some(all)) => {
                state.reports = all.iter().filter_map(|b| NodeReport::decode(b)).collect();
                let n = state.reports.len();
                let s = state.stage("checks");
                s.status = StageStatus::Ok;
                s.elapsed_s = secs(t);
                s.detail = format!("{n} host(s) reported");
                progress(&format!(
                    "[1/4] checks: {n} host(s) reported in {:.1} s",
                    secs(t)
                ));
                let t = Instant::now();
                state.consistency = consistency::compare(&state.reports);
                let c = &state.consistency;
                let detail = format!(
                    "{} node(s) differ from the majority, {} fact(s) without a majority",
                    c.deviations.len(),
                    c.splits.len()
                );
                progress(&format!("[2/4] consistency: {detail}"));
                let s = state.stage("consistency");
                s.status = StageStatus::Ok;
                s.elapsed_s = secs(t);
                s.detail = detail;
                state.save(false);
            }
            Ok(None) => {}
            Err(e) => {
                failed = Some(fail(
                    &bs,
                    &mut state,
                    lead,
                    "checks",
                    t,
                    BenchError::from(e),
                ))
            }
        }
    }

    // `--rails auto`: rank 0 decides from what the nodes reported (or its own node when the
    // checks were skipped), every rank takes its word.
    let resolved;
    let args = if failed.is_none() && args.rails == "auto" {
        let mine = if lead {
            let efa = if state.reports.is_empty() {
                !efabench_topology::Topology::discover(&efabench_topology::Root::system())
                    .nics
                    .is_empty()
            } else {
                state.reports.iter().all(|r| r.facts.efa_devices > 0)
            };
            args.resolve_rails(efa).into_bytes()
        } else {
            Vec::new()
        };
        let word = bs.broadcast(&mine).map_err(BenchError::from)?;
        resolved = ClusterArgs {
            rails: String::from_utf8_lossy(&word).into_owned(),
            ..args.clone()
        };
        &resolved
    } else {
        args
    };

    // 3. pairs
    if failed.is_none() {
        let t = Instant::now();
        if !args.runs(Stage::Pairs) {
            skip(&mut state, &["pairs"], "--skip pairs");
        } else if world < 2 {
            skip(&mut state, &["pairs"], "one rank: pairs needs two or more");
        } else {
            let mut pa = args.pairs_args(world)?;
            // Setup and connection come out of the stage's budget: the time per pair is what
            // they leave of it.
            pa.deadline = Some(t + Duration::from_secs_f64(args.budget(Stage::Pairs)));
            if lead {
                progress(&format!(
                    "[3/4] pairs: {} at {}, --rails {}, --max-time up to {:.3} s per pair, less if setup leaves less (budget {} s)",
                    pa.schedule,
                    args.pairs_size,
                    args.rails,
                    pa.max_time,
                    args.budget(Stage::Pairs)
                ));
                state.stage("pairs").status = StageStatus::Running;
                state.save(false);
            }
            let mut b = Pairs::new(&pa)?;
            match harness::run_on(&mut b, &pa, build, &bs, echo) {
                Ok((verdict, records)) => {
                    if lead {
                        state.pairs = Matrix::from_pairs(&records);
                        state.records.extend(records.iter().cloned());
                        done(&mut state, "pairs", t, verdict, &records);
                    }
                }
                Err(e) => {
                    // As `pairs` itself does: no fabric teardown with writes possibly posted.
                    std::mem::forget(b);
                    failed = Some(fail(&bs, &mut state, lead, "pairs", t, e));
                }
            }
        }
    }

    // 4. alltoall
    if failed.is_none() {
        let t = Instant::now();
        if !args.runs(Stage::Alltoall) {
            skip(&mut state, &["alltoall"], "--skip alltoall");
        } else if world < 2 {
            skip(
                &mut state,
                &["alltoall"],
                "one rank: alltoall needs two or more",
            );
        } else {
            let aa = args.alltoall_args()?;
            if lead {
                progress(&format!(
                    "[4/4] alltoall: {} per rank, --max-time {:.3} s (budget {} s)",
                    args.alltoall_size,
                    aa.max_time,
                    args.budget(Stage::Alltoall)
                ));
                state.stage("alltoall").status = StageStatus::Running;
                state.save(false);
            }
            let mut b = Alltoall::new(&aa)?;
            match harness::run_on(&mut b, &aa, build, &bs, echo) {
                Ok((verdict, records)) => {
                    if lead {
                        state.alltoall = Matrix::from_alltoall(&records);
                        state.records.extend(records.iter().cloned());
                        done(&mut state, "alltoall", t, verdict, &records);
                    }
                }
                Err(e) => {
                    std::mem::forget(b);
                    failed = Some(fail(&bs, &mut state, lead, "alltoall", t, e));
                }
            }
        }
    }

    if let Some(e) = failed {
        if !lead || e.is_usage() {
            return Err(e);
        }
        let s = state.save(true);
        crate::table::print_verdicts(&s);
        if let Some(p) = &args.save_baseline {
            progress(&format!(
                "--save-baseline {}: not written, a stage failed (a baseline is a whole run)",
                p.display()
            ));
        }
        return Ok(Outcome {
            ending: s.ending().max(Ending::NodesFailed),
            summary: Some(s),
        });
    }
    let summary = lead.then(|| {
        let s = state.save(true);
        crate::table::print_verdicts(&s);
        if let Some(p) = &args.save_baseline {
            save_baseline(p, &state, &s);
        }
        s
    });
    let ending = summary.as_ref().map_or(Ending::Healthy, Summary::ending);
    // Every rank ends as rank 0 does.
    let ending = bs
        .broadcast(&[ending.to_wire()])
        .map_err(BenchError::from)?
        .first()
        .copied()
        .map_or(Ending::NodesFailed, Ending::from_wire);
    bs.barrier().map_err(BenchError::from)?;
    Ok(Outcome { ending, summary })
}

/// Writes `--save-baseline` after a run; a failure to write is reported, not fatal (the
/// verdicts stand).
fn save_baseline(path: &Path, state: &State, s: &Summary) {
    let source = format!("efabench cluster {} ({} ranks)", state.started, state.world);
    let line = match baseline::save(path, &state.records, &source) {
        Ok(line) if s.verdict == crate::verdict::RunVerdict::Pass => line,
        Ok(line) => format!(
            "{line}; this run's verdict is {}: a baseline should come from a healthy run",
            s.verdict.as_str()
        ),
        Err(e) => efabench_record::chain(&e),
    };
    progress(&line);
}

fn secs(t: Instant) -> f64 {
    (t.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
}

fn skip(state: &mut State, names: &[&str], why: &str) {
    for n in names {
        let s = state.stage(n);
        s.status = StageStatus::Skipped;
        s.detail = why.into();
    }
}

/// A benchmark stage that ran to its end.
fn done(state: &mut State, name: &str, t: Instant, verdict: Verdict, records: &[Record]) {
    let errors: u64 = records.iter().map(|r| r.errors).sum();
    let over = secs(t) > state.stage(name).budget_s.unwrap_or(f64::MAX);
    let mut detail = format!("{} records", records.len());
    if verdict != Verdict::Clean || errors > 0 {
        detail.push_str(&format!(
            "; {errors} payload words failed verification (the records' errors field says where)"
        ));
    }
    if over {
        detail.push_str(if name == "pairs" {
            "; over its budget (every pair runs at least a warm-up and two timed windows, \
             which a slow link can make longer than its share)"
        } else {
            "; over its budget (setup and connection time are not bounded by it)"
        });
    }
    progress(&format!("{name}: done in {:.1} s ({detail})", secs(t)));
    let s = state.stage(name);
    s.status = if verdict == Verdict::Clean {
        StageStatus::Ok
    } else {
        StageStatus::Failed
    };
    s.elapsed_s = secs(t);
    s.detail = detail;
    state.save(false);
}

/// A stage that ended in an error: the lost node (when one rank is behind it) and the stages
/// that cannot run any more.
fn fail(
    bs: &Bootstrap,
    state: &mut State,
    lead: bool,
    name: &str,
    t: Instant,
    e: BenchError,
) -> BenchError {
    if !lead || e.is_usage() {
        return e;
    }
    let lost = lost_of(bs, &state.rank_host, name, &e);
    let hosts: Vec<String> = lost.iter().map(|l| l.host.clone()).collect();
    progress(&format!(
        "{name}: failed after {:.1} s{}: {e}",
        secs(t),
        if hosts.is_empty() {
            String::new()
        } else {
            format!(" (lost {})", hosts.join(", "))
        }
    ));
    state.lost.extend(lost);
    let s = state.stage(name);
    s.status = StageStatus::Failed;
    s.elapsed_s = secs(t);
    s.detail = e.to_string();
    for s in &mut state.stages {
        if s.status == StageStatus::Pending {
            s.status = StageStatus::Skipped;
            s.detail = format!("the {name} stage failed");
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn slurm_placement_names_each_rank_s_host() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let e = env(&[
            ("SLURM_STEP_NODELIST", "node[1-3]"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2),1"),
        ]);
        assert_eq!(
            launcher_hosts(5, &e).unwrap(),
            ["node1", "node1", "node2", "node2", "node3"]
        );
        // A world that does not match the placement is not guessed at.
        assert_eq!(launcher_hosts(4, &e), None);
        assert_eq!(launcher_hosts(4, &env(&[])), None);
    }
}
