#!/usr/bin/env bash
# How often is `efabench cluster`'s verdict wrong on simulated nodes of this host?
#
# Builds the tests in release mode and runs the ignored test `study` of
# crates/efabench/tests/cluster_nodes.rs: N simulated nodes (network namespaces on a bridge,
# tcp, every link limited by `tc tbf` to 300 Mbit/s), HEALTHY healthy clusters, then FAULTY
# clusters with SLOW_NODES nodes (chosen by a seeded generator) limited to SLOW of the link,
# each run `efabench cluster` with the pairs stage alone (512 KiB, BUDGET s, default 6). Every run's verdicts and
# estimates go to OUT/runs.jsonl, the counts to OUT/counts.json.
#
# Usage: scripts/cluster-study.sh OUT [nodes=8] [healthy=20] [faulty=20] [slow=0.8]
#                                     [slow_nodes=1] [budget=6] [seed=1] [alltoall=0] [timeout=20]
# Needs root, ip and tc (scripts/setup.sh installs them). About 8 s per 8-node run on the
# 2-core VM.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
out=$(realpath -m "$1")
shift
for kv in "$@"; do
    [[ $kv =~ ^(nodes|healthy|faulty|slow|slow_nodes|budget|seed|alltoall|timeout)=[0-9.]+$ ]] ||
        { echo "cluster-study: '$kv' is not one of nodes=, healthy=, faulty=, slow=, slow_nodes=, budget=, seed= with a number" >&2; exit 2; }
done
mkdir -p "$out"
EFABENCH_STUDY="$*" EFABENCH_STUDY_OUT="$out" \
    cargo test --release -q -p efabench --features efabench/test-hooks --test cluster_nodes \
    -- --ignored --exact study --nocapture
