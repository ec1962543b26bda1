#!/usr/bin/env bash
# Is a run's latency the machine's state or efabench's? Alternates, RUNS times: the round trip of
# one cache line between CPUs 0 and 1 (scripts/core_pingpong.c), one `efabench sendrecv` 8 B
# point over shm (2 ranks), the same round trip again. A shared VM whose two vCPUs move between
# host cores shows it in both at once.
#
#   RUNS=40 EFABENCH=target/release/efabench scripts/machine-state.sh > OUT.txt
#
# Prints one line per run (core round trip before and after in ns, sendrecv p50 in us), then
# the runs grouped by whether both core round trips sat above SLOW_NS (default 300).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-40}
EFABENCH=${EFABENCH:-target/release/efabench}
SLOW_NS=${SLOW_NS:-300}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -pthread scripts/core_pingpong.c -o "$work/pp"
echo "# $(date -u +%FT%TZ) $(hostname) $(nproc) CPUs; $("$EFABENCH" --version 2>/dev/null | head -1)"
echo "# run  core_rt_before_ns  sendrecv_8B_p50_us  core_rt_after_ns"
for i in $(seq 1 "$RUNS"); do
  before=$("$work/pp")
  "$EFABENCH" launch -n 2 -- sendrecv -p shm -b 8 -e 8 -n 2000 -w 100 -o "$work/r.jsonl" >/dev/null 2>&1
  p50=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["lat_us"]["p50"])' "$work/r.jsonl")
  rm -f "$work/r.jsonl"
  after=$("$work/pp")
  echo "$i $before $p50 $after"
done | tee "$work/rows"
python3 - "$work/rows" "$SLOW_NS" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
slow = float(sys.argv[2])
groups = {"both core round trips slow": [], "both fast": [], "mixed": []}
for _, b, p, a in rows:
    b, p, a = float(b), float(p), float(a)
    k = "both core round trips slow" if b > slow and a > slow else "both fast" if b <= slow and a <= slow else "mixed"
    groups[k].append(p)
for k, v in groups.items():
    if v:
        print("# %-27s %2d runs: sendrecv 8 B p50 median %.3f us (%.3f-%.3f)" % (k, len(v), statistics.median(v), min(v), max(v)))
PY
