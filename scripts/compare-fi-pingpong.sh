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
# With BASELINE set to another efabench binary (e.g. a build of the previous commit), every repeat
# also runs it, alternating with the others, and the table gets its two columns (before/after of
# a change, measured under the same load). A run that fails is retried once (a port taken by
# another job, or fi_pingpong's server not listening yet); a second failure stops the script with
# the error.
#
# With LOOPS set (e.g. "tracked lean"), efabench runs once per loop (`--loop L`, both with
# --no-check and verified, alternating with the rest), and the table gets two columns per loop
# instead of the two of the default loop. EXTRA is appended to every efabench run.
#
# Usage: scripts/compare-fi-pingpong.sh [providers...]        (default: shm tcp)
# Environment: ITERS (10000), REPEATS (5), SIZES ("8 64 512 4096 32768 65536"),
#              EFABENCH (target/release/efabench), OUT (results/fi_pingpong-compare.jsonl),
#              BASELINE (unset), BASELINE_OUT (OUT with -baseline before .jsonl),
#              LOOPS (unset: the default loop), EXTRA (unset)
set -euo pipefail
cd "$(dirname "$0")/.."
EFABENCH=${EFABENCH:-target/release/efabench}
ITERS=${ITERS:-10000}
REPEATS=${REPEATS:-5}
SIZES=${SIZES:-"8 64 512 4096 32768 65536"}
OUT=${OUT:-results/fi_pingpong-compare.jsonl}
BASELINE=${BASELINE:-}
BASELINE_OUT=${BASELINE_OUT:-${OUT%.jsonl}-baseline.jsonl}
LOOPS=${LOOPS:-}
EXTRA=${EXTRA:-}
command -v fi_pingpong >/dev/null || { echo "fi_pingpong not found: apt-get install libfabric-bin" >&2; exit 2; }
[ -x "$EFABENCH" ] || cargo build --release -q -p efabench
mkdir -p "$(dirname "$OUT")"
providers=("$@"); [ ${#providers[@]} -gt 0 ] || providers=(shm tcp)
port=$((20000 + RANDOM % 20000))
trap 'rm -f /tmp/compare-fi-pingpong.$$.err' EXIT

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "# libfabric $(fi_info --version | sed -n 's/^libfabric: //p'), $ITERS iterations, median of $REPEATS alternating runs, $(nproc) cores, $(date -u +%F)"
# One column pair per efabench configuration: a label and the arguments it adds.
labels=(); cargs=()
if [ -n "$LOOPS" ]; then
  for l in $LOOPS; do labels+=("$l --no-check" "$l verified"); cargs+=("--loop $l --no-check" "--loop $l"); done
else
  labels=("efa --no-check" "efa verified"); cargs=("--no-check" "")
fi
header=$(printf "%-5s %8s | %11s" provider "size(B)" "fi_pingpong")
for i in "${!labels[@]}"; do header+=$(printf " | %16s %6s" "${labels[$i]}" ratio); done
[ -z "$BASELINE" ] || header+=$(printf " | %16s %6s | %16s %6s" "base --no-check" ratio "base verified" ratio)
echo "$header"
run_once() { # BINARY OUT provider size extra: prints the mean one-way latency
  local json
  json=$("$1" launch -n 2 -- sendrecv -p "$3" -b "$4" -e "$4" -n "$ITERS" --variant pingpong \
      --format json -o "$2" $5 $EXTRA 2>/tmp/compare-fi-pingpong.$$.err) || return 1
  python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["lat_us"]["mean"])' <<<"$json"
}
run_fabtests() { # provider size: prints fi_pingpong's usec/xfer (fails when the client could not connect)
  port=$((port + 1))
  fi_pingpong -p "$1" -e rdm -I "$ITERS" -S "$2" -B "$port" >/dev/null 2>&1 &
  local server=$! out
  sleep 0.3
  out=$(fi_pingpong -p "$1" -e rdm -I "$ITERS" -S "$2" -P "$port" 127.0.0.1 2>/dev/null | awk 'NR==2 {print $7}') || true
  kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true
  [ -n "$out" ] && echo "$out"
}
run_efabench() { # BINARY OUT provider size extra
  run_once "$@" || run_once "$@" || { cat /tmp/compare-fi-pingpong.$$.err >&2; exit 1; }
}
for p in "${providers[@]}"; do
  for s in $SIZES; do
    refs=""; braw=""; bver=""; runs=()
    for i in "${!labels[@]}"; do runs[$i]=""; done
    for _ in $(seq "$REPEATS"); do
      refs+=" $(run_fabtests "$p" "$s" || run_fabtests "$p" "$s" || { echo "fi_pingpong failed twice" >&2; exit 1; })"
      for i in "${!labels[@]}"; do
        runs[$i]+=" $(run_efabench "$EFABENCH" "$OUT" "$p" "$s" "${cargs[$i]}")"
      done
      if [ -n "$BASELINE" ]; then
        braw+=" $(run_efabench "$BASELINE" "$BASELINE_OUT" "$p" "$s" --no-check)"
        bver+=" $(run_efabench "$BASELINE" "$BASELINE_OUT" "$p" "$s" "")"
      fi
    done
    ref=$(echo "$refs" | median)
    row=$(printf "%-5s %8s | %11.2f" "$p" "$s" "$ref")
    for i in "${!labels[@]}"; do
      m=$(echo "${runs[$i]}" | median)
      row+=$(printf " | %16.2f %6.2f" "$m" "$(python3 -c "print($m/$ref)")")
    done
    if [ -n "$BASELINE" ]; then
      br=$(echo "$braw" | median); bv=$(echo "$bver" | median)
      row+=$(printf " | %16.2f %6.2f | %16.2f %6.2f" "$br" "$(python3 -c "print($br/$ref)")" \
        "$bv" "$(python3 -c "print($bv/$ref)")")
    fi
    echo "$row"
  done
done
echo "# one-way latency in us (mean); ratio = efabench / fi_pingpong (below 1: efabench is faster); records appended to $OUT"
