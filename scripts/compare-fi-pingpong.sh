#!/usr/bin/env bash
# Side-by-side one-way latency: efabench sendrecv pingpong vs libfabric's own fi_pingpong
# (libfabric-bin): same library, same host, same provider, same sizes and iteration counts.
#
# fi_pingpong's usec/xfer is the round trip / 2 averaged over its iterations, so it is compared
# with efabench's mean one-way latency (its p50 is shown too). On a small shared VM one run of
# either tool varies by ±30%, so each tool runs REPEATS times, alternating, and the table shows
# the median of each tool's runs.
#
# Usage: scripts/compare-fi-pingpong.sh [providers...]        (default: shm tcp)
# Environment: ITERS (10000), REPEATS (5), SIZES ("8 64 512 4096 32768 65536"),
#              EFABENCH (target/release/efabench), OUT (results/fi_pingpong-compare.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
EFABENCH=${EFABENCH:-target/release/efabench}
ITERS=${ITERS:-10000}
REPEATS=${REPEATS:-5}
SIZES=${SIZES:-"8 64 512 4096 32768 65536"}
OUT=${OUT:-results/fi_pingpong-compare.jsonl}
command -v fi_pingpong >/dev/null || { echo "fi_pingpong not found: apt-get install libfabric-bin" >&2; exit 2; }
[ -x "$EFABENCH" ] || cargo build --release -q -p efabench
mkdir -p "$(dirname "$OUT")"
providers=("$@"); [ ${#providers[@]} -gt 0 ] || providers=(shm tcp)
port=$((20000 + RANDOM % 20000))

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "# libfabric $(fi_info --version | sed -n 's/^libfabric: //p'), $ITERS iterations, median of $REPEATS alternating runs, $(nproc) cores, $(date -u +%F)"
printf "%-5s %8s | %14s | %14s %13s | %6s\n" provider "size(B)" "fi_pingpong us" "efabench mean" "efabench p50" ratio
for p in "${providers[@]}"; do
  for s in $SIZES; do
    refs=""; means=""; p50s=""
    for _ in $(seq "$REPEATS"); do
      port=$((port + 1))
      fi_pingpong -p "$p" -e rdm -I "$ITERS" -S "$s" -B "$port" >/dev/null 2>&1 &
      server=$!
      sleep 0.3
      refs+=" $(fi_pingpong -p "$p" -e rdm -I "$ITERS" -S "$s" -P "$port" 127.0.0.1 2>/dev/null | awk 'NR==2 {print $7}')"
      wait "$server" || true
      r=$("$EFABENCH" launch -n 2 -- sendrecv -p "$p" -b "$s" -e "$s" -n "$ITERS" --variant pingpong \
            --format json -o "$OUT" 2>/dev/null \
          | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print(r["lat_us"]["mean"], r["lat_us"]["p50"])')
      means+=" ${r% *}"; p50s+=" ${r#* }"
    done
    ref=$(echo "$refs" | median); mean=$(echo "$means" | median); p50=$(echo "$p50s" | median)
    printf "%-5s %8s | %14.2f | %14.2f %13.2f | %6.2f\n" "$p" "$s" "$ref" "$mean" "$p50" \
      "$(python3 -c "print($mean/$ref)")"
  done
done
echo "# ratio = efabench mean one-way / fi_pingpong usec/xfer (below 1: efabench is faster); records appended to $OUT"
