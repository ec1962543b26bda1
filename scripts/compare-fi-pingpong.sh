#!/usr/bin/env bash
# Side-by-side one-way latency: efabench sendrecv pingpong vs libfabric's own fi_pingpong
# (libfabric-bin): same library, same host, same provider, same sizes and iteration counts.
#
# fi_pingpong's usec/xfer is the round trip / 2 averaged over its iterations, so it is compared
# with efabench's mean one-way latency. fi_pingpong re-sends the same untouched buffer; efabench
# by default writes fresh, verified data every iteration, whose cache lines must then move to
# the receiving core. So efabench runs twice: with --no-check (the same work as fi_pingpong: the
# like-for-like ratio) and as by default (verified). On a small shared VM one run of either tool
# varies by ±30%, so each runs REPEATS times, alternating, and the table shows medians.
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
printf "%-5s %8s | %11s | %16s %6s | %16s %6s\n" provider "size(B)" "fi_pingpong" "efa --no-check" ratio "efa verified" ratio
run_efabench() { # prints the mean one-way latency
  "$EFABENCH" launch -n 2 -- sendrecv -p "$1" -b "$2" -e "$2" -n "$ITERS" --variant pingpong \
      --format json -o "$OUT" $3 2>/dev/null \
    | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["lat_us"]["mean"])'
}
for p in "${providers[@]}"; do
  for s in $SIZES; do
    refs=""; raw=""; ver=""
    for _ in $(seq "$REPEATS"); do
      port=$((port + 1))
      fi_pingpong -p "$p" -e rdm -I "$ITERS" -S "$s" -B "$port" >/dev/null 2>&1 &
      server=$!
      sleep 0.3
      refs+=" $(fi_pingpong -p "$p" -e rdm -I "$ITERS" -S "$s" -P "$port" 127.0.0.1 2>/dev/null | awk 'NR==2 {print $7}')"
      wait "$server" || true
      raw+=" $(run_efabench "$p" "$s" --no-check)"
      ver+=" $(run_efabench "$p" "$s" "")"
    done
    ref=$(echo "$refs" | median); r=$(echo "$raw" | median); v=$(echo "$ver" | median)
    printf "%-5s %8s | %11.2f | %16.2f %6.2f | %16.2f %6.2f\n" "$p" "$s" "$ref" "$r" \
      "$(python3 -c "print($r/$ref)")" "$v" "$(python3 -c "print($v/$ref)")"
  done
done
echo "# one-way latency in us (mean); ratio = efabench / fi_pingpong (below 1: efabench is faster); records appended to $OUT"
