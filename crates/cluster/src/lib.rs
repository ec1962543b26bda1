//! `efabench cluster`: acceptance of a whole cluster in one job, one verdict per node.
//!
//! Started once per node (or per GPU) by `srun`, `mpirun`, a Kubernetes Job or `efabench
//! launch`, every rank runs the stages of [`run()`] on one bootstrap: node checks, consistency
//! across nodes, `pairs` with localization, `alltoall`. Rank 0 turns what they found into one
//! verdict per node ([`verdict`]: PASS, WARN or ISOLATE, each with reasons and evidence), prints
//! them, writes `--summary` ([`summary`], schema in `docs/cluster.md`), and the job exits 1 when
//! any node is ISOLATE, 3 when the cluster fails as a whole (a check failing on most nodes).
//!
//! * [`args`]: the options, and the word lists that configure the benchmark stages;
//! * [`baseline`]: this run against a baseline file saved from a healthy run;
//! * [`node`]: what a node reports (checks and compared facts);
//! * [`consistency`]: facts that differ from the majority;
//! * [`figures`]: per-node figures from a pair matrix;
//! * [`paths`]: why a file the run writes or reads was refused before any stage;
//! * [`expected`]: those figures against the link of the nodes' instance type;
//! * [`decide`]: the statistical decision on a pair matrix (nodes, directions, rails, links);
//! * [`synth`]: synthetic pair matrices for judging the decision (tests, `examples/oc.rs`);
//! * [`verdict`]: the verdicts;
//! * [`summary`]: the JSON document;
//! * [`table`]: the verdict table printed at the end;
//! * [`mod@run`]: the stages.

#![forbid(unsafe_code)]

pub mod args;
pub mod baseline;
pub mod consistency;
pub mod decide;
pub mod expected;
pub mod figures;
pub mod node;
pub mod paths;
pub mod run;
pub mod summary;
pub mod synth;
pub mod table;
pub mod verdict;

pub use args::ClusterArgs;
pub use run::{run, Outcome};
