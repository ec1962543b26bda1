//! The exit status of the process, decided in one place.
//!
//! The library crates say what a run found in their own types (a benchmark's
//! [`Verdict`](efabench_bench::Verdict), the doctor's report, a comparison, how a cluster run
//! [`Ending`](efabench_cluster::verdict::Ending)) or fail with a typed error; the commands turn
//! those into an [`Exit`], and [`Exit::code`] is the only map from an outcome to the number the
//! shell sees. The numbers are part of the product (docs/architecture.md, "Errors and exit
//! codes"): scripts and schedulers act on them.

use crate::error::CliError;
use std::process::ExitStatus;

/// How the process ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Everything ran and nothing was found wrong: 0.
    Ok,
    /// A measured or checked failure: a regression, a failed check, payloads that did not
    /// verify, a node to isolate, a dead peer: 1.
    Failed,
    /// Bad input or a missing prerequisite: 2.
    Usage,
    /// `cluster`: the cluster fails as a whole, so draining nodes one by one would not fix it: 3.
    ClusterFailed,
    /// `counters -- CMD`: the command succeeded without a byte over EFA: 3.
    NoEfaTraffic,
    /// `counters -- CMD`: fewer NICs carried traffic than `--expect-nics` asks: 4.
    IdleNics,
    /// The status of a process this one ran and waited for (a rank under `launch`, the command
    /// `counters` ran), passed on as it is.
    Child(i32),
}

impl Exit {
    /// The process's exit status.
    pub fn code(self) -> i32 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            Exit::ClusterFailed | Exit::NoEfaTraffic => 3,
            Exit::IdleNics => 4,
            Exit::Child(code) => code,
        }
    }

    /// A child's status as a shell reports it: its exit code, or 128 + the signal that ended
    /// it ([`efabench_bootstrap::launcher::exit_code`], which `launch` uses for its ranks).
    pub fn of_child(status: ExitStatus) -> Exit {
        Exit::Child(efabench_bootstrap::launcher::exit_code(status))
    }

    /// [`Exit::Ok`] when `ok`, else [`Exit::Failed`].
    pub fn failed_unless(ok: bool) -> Exit {
        if ok {
            Exit::Ok
        } else {
            Exit::Failed
        }
    }

    /// Ends the process with this status.
    pub fn exit(self) -> ! {
        std::process::exit(self.code())
    }
}

impl From<&CliError> for Exit {
    /// Bad input or a missing prerequisite is [`Exit::Usage`]; any other error a failed run.
    fn from(e: &CliError) -> Exit {
        if e.is_usage() {
            Exit::Usage
        } else {
            Exit::Failed
        }
    }
}

impl From<efabench_bench::Verdict> for Exit {
    fn from(v: efabench_bench::Verdict) -> Exit {
        match v {
            efabench_bench::Verdict::Clean => Exit::Ok,
            efabench_bench::Verdict::Failed => Exit::Failed,
        }
    }
}

impl From<efabench_cluster::verdict::Ending> for Exit {
    fn from(e: efabench_cluster::verdict::Ending) -> Exit {
        use efabench_cluster::verdict::Ending;
        match e {
            Ending::Healthy => Exit::Ok,
            Ending::NodesFailed => Exit::Failed,
            Ending::ClusterFailed => Exit::ClusterFailed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use efabench_cluster::verdict::Ending;

    #[test]
    fn the_statuses_of_the_product() {
        let codes: Vec<i32> = [
            Exit::Ok,
            Exit::Failed,
            Exit::Usage,
            Exit::ClusterFailed,
            Exit::NoEfaTraffic,
            Exit::IdleNics,
            Exit::Child(137),
        ]
        .map(Exit::code)
        .to_vec();
        assert_eq!(codes, [0, 1, 2, 3, 3, 4, 137]);
        assert_eq!(Exit::from(efabench_bench::Verdict::Clean), Exit::Ok);
        assert_eq!(Exit::from(efabench_bench::Verdict::Failed), Exit::Failed);
        assert_eq!(Exit::failed_unless(false), Exit::Failed);
    }

    #[test]
    fn the_cluster_summary_records_the_status_the_process_exits_with() {
        for e in [Ending::Healthy, Ending::NodesFailed, Ending::ClusterFailed] {
            assert_eq!(
                Exit::from(e).code(),
                efabench_cluster::summary::exit_code(e),
                "{e:?}"
            );
        }
    }

    #[test]
    fn a_child_status_reads_as_a_shell_says_it() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(Exit::of_child(ExitStatus::from_raw(2 << 8)).code(), 2);
        assert_eq!(Exit::of_child(ExitStatus::from_raw(9)).code(), 137);
    }
}
