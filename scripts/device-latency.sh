#!/usr/bin/env bash
# Before/after parity check against fabtests on one host, in alternating rounds:
#
#   latency   fi_rdm_pingpong -S 8 (usec/xfer: round trip / 2, mean)  vs  efabench sendrecv
#             --variant pingpong -b 8 -e 8 (lat_us.mean, one-way), over shm and tcp, each efabench
#             binary with --no-check (fi_rdm_pingpong's work: one untouched buffer) and verified
#   bandwidth fi_rdm_bw -S 1M,4M,16M (window 64)  vs  efabench sendrecv --variant stream -b 1M
#             -e 16M -f 4 --footprint 1 (window 64), over shm, host memory, each binary with
#             --no-check and verified
#
# Like for like: same libfabric (LF_PREFIX/lib for both tools), same provider, same host, same
# iterations for the latency pair; fi_rdm_bw posts every message of a window on one buffer per
# side (fabtests' ft_alloc_ctx_array with mr_size 0), which is what --footprint 1 does. What still
# differs: fi_rdm_pingpong reads the clock once per run, efabench twice per iteration (its
# percentiles); efabench's verified runs write and check fresh data every iteration/window
# (outside the timed interval), fabtests never does without -v.
#
# Each round runs, in this order: fabtests, base --no-check, new --no-check, base verified, new
# verified (latency per provider, then bandwidth). The summary prints medians over the rounds and
# ratio = efabench / fabtests for latency (below 1: efabench faster) and efabench / fabtests for
# bandwidth (above 1: efabench faster). About 3 minutes at the defaults on a 16-core host.
#
# Usage: scripts/device-latency.sh
# The two binaries, stripped (about 6 MB each instead of 48):
#   git worktree add /tmp/base <base commit> && (cd /tmp/base && cargo build --release -p efabench)
#   strip -o .dev/bin/efabench-base /tmp/base/target/release/efabench
#   cargo build --release -p efabench && strip -o .dev/bin/efabench target/release/efabench
# Environment:
#   LF_PREFIX  libfabric + fabtests install (default .dev/lf-cuda; needs bin/fi_rdm_pingpong,
#              bin/fi_rdm_bw, lib/libfabric.so.1)
#   BASE, NEW  efabench binaries (default .dev/bin/efabench-base and .dev/bin/efabench)
#   NEW_LAT_ARGS extra options for the new binary's latency runs (e.g. "--loop lean"; BASE=NEW
#              then compares one binary's two loops)
#   ROUNDS     alternating rounds (7), ITERS latency iterations per run (20000)
#   PROVIDERS  latency providers ("shm tcp"); BW_SIZES ("1048576 4194304 16777216")
#   RUN_TIMEOUT seconds before one run is killed (60)
#   OUT        output folder (default results/device-latency-DATE); writes at most 5 files:
#              summary.txt, lat.tsv, bw.tsv, efabench.jsonl, log.txt
set -uo pipefail
cd "$(dirname "$0")/.."
LF_PREFIX=${LF_PREFIX:-.dev/lf-cuda}
BASE=${BASE:-.dev/bin/efabench-base}
NEW=${NEW:-.dev/bin/efabench}
NEW_LAT_ARGS=${NEW_LAT_ARGS:-}
ROUNDS=${ROUNDS:-7}
ITERS=${ITERS:-20000}
PROVIDERS=${PROVIDERS:-"shm tcp"}
BW_SIZES=${BW_SIZES:-"1048576 4194304 16777216"}
RUN_TIMEOUT=${RUN_TIMEOUT:-60}
OUT=${OUT:-results/device-latency-$(date -u +%F)}

die() { echo "device-latency.sh: $*" >&2; exit 2; }
LF_PREFIX=$(cd "$LF_PREFIX" 2>/dev/null && pwd) || die "no libfabric install at LF_PREFIX ($LF_PREFIX): run scripts/gpu-libfabric.sh or set LF_PREFIX"
for t in bin/fi_rdm_pingpong bin/fi_rdm_bw lib/libfabric.so.1; do
  [ -e "$LF_PREFIX/$t" ] || die "$LF_PREFIX/$t missing: run scripts/gpu-libfabric.sh or set LF_PREFIX"
done
for b in "$BASE" "$NEW"; do
  [ -x "$b" ] || die "no efabench binary at $b: set BASE and NEW"
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS=$ROUNDS is not a positive integer"
[[ "$ITERS" =~ ^[1-9][0-9]*$ ]] || die "ITERS=$ITERS is not a positive integer"

# Same library for both tools (fabtests link it; efabench dlopens EFABENCH_LIBFABRIC).
cudalib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcudart.so" ] && { cudalib=$d; break; }
done
export LD_LIBRARY_PATH="$LF_PREFIX/lib${cudalib:+:$cudalib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EFABENCH_LIBFABRIC="$LF_PREFIX/lib/libfabric.so.1"
export FI_PROVIDER_PATH="$LF_PREFIX/lib/libfabric"

mkdir -p "$OUT" || die "cannot create $OUT"
summary="$OUT/summary.txt"; lat="$OUT/lat.tsv"; bw="$OUT/bw.tsv"
jsonl="$OUT/efabench.jsonl"; log="$OUT/log.txt"
: >"$log"; : >"$jsonl"
printf "round\tprovider\ttool\tcheck\tus\n" >"$lat"
printf "round\ttool\tcheck\tsize\tGBps\n" >"$bw"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))
bw_list=$(echo $BW_SIZES | tr " " ",")
bw_min=$(echo $BW_SIZES | tr ' ' '\n' | sort -n | head -1)
bw_max=$(echo $BW_SIZES | tr ' ' '\n' | sort -n | tail -1)
set -- $BW_SIZES; bw_factor=2; [ $# -gt 1 ] && bw_factor=$(( $2 / $1 ))

{
  echo "# $(date -u +%FT%TZ) $(hostname), $(nproc) cores, libfabric $("$LF_PREFIX/bin/fi_info" --version 2>/dev/null | sed -n 's/^libfabric: //p') at $LF_PREFIX"
  echo "# base: $BASE ($("$BASE" --version 2>/dev/null)); new: $NEW ($("$NEW" --version 2>/dev/null))"
  echo "# ROUNDS=$ROUNDS ITERS=$ITERS PROVIDERS='$PROVIDERS' BW_SIZES='$BW_SIZES' NEW_LAT_ARGS='$NEW_LAT_ARGS'"
  nvidia-smi -L 2>/dev/null | head -2 | sed 's/^/# /'
} | tee "$summary" >>"$log"

# fabtests: server in the background, client on 127.0.0.1; prints "size value" from -m lines.
fabtests() { # test provider col args...
  local t=$1 p=$2 col=$3; shift 3
  port=$((port + 1))
  echo "+ $t -p $p -e rdm $* -m -E=$port" >>"$log"
  timeout "$RUN_TIMEOUT" "$LF_PREFIX/bin/$t" -p "$p" -e rdm "$@" -m -E="$port" >"$work/srv" 2>&1 &
  local server=$!
  sleep 0.3
  timeout "$RUN_TIMEOUT" "$LF_PREFIX/bin/$t" -p "$p" -e rdm "$@" -m -E="$port" 127.0.0.1 >"$work/cli" 2>&1 \
    || echo "# $t -p $p failed (exit $?)" | tee -a "$log" >&2
  wait "$server" 2>/dev/null
  cat "$work/cli" >>"$log"
  python3 - "$work/cli" "$col" <<'EOF' 2>>"$log"
import re, sys
path, col = sys.argv[1:]
for line in open(path):
    if line.startswith("- {"):
        kv = dict(re.findall(r"([\w/]+): ([-\d.e+]+)", line))
        v = float(kv[col])
        print(kv["xfer_size"], v / 1000.0 if col == "MB/sec" else v)
EOF
}

# efabench: prints "size value" (lat_us.mean or bw_GBps) from its records.
efabench() { # binary field args...
  local bin=$1 field=$2; shift 2
  rm -f "$work/e.jsonl"
  echo "+ $bin launch -n 2 -- $*" >>"$log"
  timeout "$RUN_TIMEOUT" "$bin" launch -n 2 -- "$@" -o "$work/e.jsonl" >>"$log" 2>&1 \
    || echo "# $bin $* failed (exit $?)" | tee -a "$log" >&2
  [ -s "$work/e.jsonl" ] || return 0
  cat "$work/e.jsonl" >>"$jsonl"
  python3 - "$work/e.jsonl" "$field" <<'EOF' 2>>"$log"
import json, sys
path, field = sys.argv[1:]
for line in open(path):
    r = json.loads(line)
    v = r["lat_us"]["mean"] if field == "lat" else r["bw_GBps"]
    print(r["size_bytes"], v, r.get("errors", 0))
EOF
}

tools=("base:$BASE" "new:$NEW")
for r in $(seq "$ROUNDS"); do
  for p in $PROVIDERS; do
    fabtests fi_rdm_pingpong "$p" usec/xfer -S 8 -I "$ITERS" | while read -r s v; do
      printf "%s\t%s\tfabtests\t-\t%s\n" "$r" "$p" "$v"; done >>"$lat"
    for check in no yes; do
      opt=(); [ $check = no ] && opt=(--no-check)
      for t in "${tools[@]}"; do
        extra=(); [ "${t%%:*}" = new ] && extra=($NEW_LAT_ARGS)
        efabench "${t#*:}" lat sendrecv -p "$p" --variant pingpong -b 8 -e 8 -n "$ITERS" "${opt[@]}" "${extra[@]}" \
          | while read -r s v e; do printf "%s\t%s\t%s\t%s\t%s\n" "$r" "$p" "${t%%:*}" "$check" "$v"; done >>"$lat"
      done
    done
  done
  fabtests fi_rdm_bw shm MB/sec -S "l:$bw_list" | while read -r s v; do
    printf "%s\tfabtests\t-\t%s\t%s\n" "$r" "$s" "$v"; done >>"$bw"
  for check in no yes; do
    opt=(); [ $check = no ] && opt=(--no-check)
    for t in "${tools[@]}"; do
      efabench "${t#*:}" bw sendrecv -p shm --variant stream -b "$bw_min" -e "$bw_max" -f "$bw_factor" \
          --footprint 1 "${opt[@]}" \
        | while read -r s v e; do printf "%s\t%s\t%s\t%s\t%s\n" "$r" "${t%%:*}" "$check" "$s" "$v"; done >>"$bw"
    done
  done
  echo "# round $r of $ROUNDS done $(date -u +%T)" | tee -a "$log" >&2
done

python3 - "$lat" "$bw" <<'EOF' | tee -a "$summary"
import csv, statistics, sys
lat_path, bw_path = sys.argv[1:]
def rows(path):
    return list(csv.DictReader(open(path), delimiter="\t"))
def med(xs):
    return statistics.median(xs) if xs else float("nan")
lat = rows(lat_path)
print("\n8 B one-way latency, us (median of rounds; ratio = efabench / fi_rdm_pingpong, below 1: efabench faster)")
print("%-4s %10s | %-9s %10s %6s %4s" % ("prov", "fabtests", "efabench", "us", "ratio", "n"))
for p in dict.fromkeys(r["provider"] for r in lat):
    ft = med([float(r["us"]) for r in lat if r["provider"] == p and r["tool"] == "fabtests"])
    for check in ("no", "yes"):
        for tool in ("base", "new"):
            xs = [float(r["us"]) for r in lat if r["provider"] == p and r["tool"] == tool and r["check"] == check]
            v = med(xs)
            name = tool + (" nochk" if check == "no" else " chk")
            print("%-4s %10.3f | %-9s %10.3f %6.2f %4d" % (p, ft, name, v, v / ft if ft else float("nan"), len(xs)))
bw = rows(bw_path)
print("\nshm host-memory stream, GB/s (median of rounds; ratio = efabench / fi_rdm_bw, above 1: efabench faster)")
print("%-9s %10s | %-9s %10s %6s %4s" % ("size", "fabtests", "efabench", "GB/s", "ratio", "n"))
for size in sorted({int(r["size"]) for r in bw}):
    ft = med([float(r["GBps"]) for r in bw if int(r["size"]) == size and r["tool"] == "fabtests"])
    for check in ("no", "yes"):
        for tool in ("base", "new"):
            xs = [float(r["GBps"]) for r in bw if int(r["size"]) == size and r["tool"] == tool and r["check"] == check]
            v = med(xs)
            name = tool + (" nochk" if check == "no" else " chk")
            print("%-9d %10.3f | %-9s %10.3f %6.2f %4d" % (size, ft, name, v, v / ft if ft else float("nan"), len(xs)))
EOF
echo "# files: $summary $lat $bw $jsonl $log"
