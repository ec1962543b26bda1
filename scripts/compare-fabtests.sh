#!/usr/bin/env bash
# efabench next to libfabric's own fabtests, like for like: same libfabric build, same host, same
# provider, same GPU(s), same sizes, same memory kind; runs alternate (efabench, then fabtests,
# REPEATS times) and the tables show medians.
#
#   bench     efabench                                  fabtests
#   write     write --variant stream (window 64)        fi_rma_bw -o writedata (window 64)
#   read      read --variant stream (window 64)         fi_rma_bw -o read (window 64)
#   sendrecv  sendrecv --variant stream (window 64)     fi_rdm_bw (window 64)
#   lat       sendrecv --variant pingpong, one-way      fi_rdm_pingpong usec/xfer (one-way)
#
# What is NOT the same, and cannot be made so from the command line:
# - footprint, per test (fabtests 2.5.1 source, common/shared.c and benchmarks/benchmark_shared.c):
#   * fi_rma_bw allocates window x size and advances the offset per message (bandwidth_rma:
#     `offset += opts.transfer_size`), so a window touches 64 x size distinct bytes: for write
#     and read this script passes --footprint 64 x the largest size.
#   * fi_rdm_bw (message tests) posts every send and every receive of a window on ONE buffer:
#     ft_alloc_ctx_array sets `context->buf = default_buf + mr_size * i` with mr_size 0 unless
#     FT_OPT_ALLOC_MULT_MR (only fi_flood sets it), so all 64 contexts point at tx_buf / rx_buf.
#     Its footprint is one message per side, cache-resident up to the last-level cache size.
#     For sendrecv this script passes --footprint 1 (one slot: every message of a window on the
#     same bytes). An earlier version gave sendrecv 64 x size as well and compared efabench
#     streaming 64-1024 MiB through DRAM with fabtests re-copying one cached buffer (0.27-0.57x
#     at 1-16 MiB on an H100 host).
#   EFA_OPTS naming --footprint overrides both.
# - read: fi_rma_bw -o read has BOTH processes read from each other at once (the server posts
#   reads too), and prints one side; efabench's read has one reader. The read rows are therefore
#   not like for like, and on shm, where the peer process makes every copy, fabtests' read is
#   slower for that reason.
# - pinned memory: fabtests has no pinned (cuMemHostAlloc) kind; efabench's pinned column is
#   compared with fabtests' host memory.
# - verification: efabench checks every payload by default (outside the timed interval, but the
#   sender rewrites its buffer every window, so the first copies of a window pull freshly written
#   lines from the sender's cache); fabtests checks only with -v, and then fills the buffer per
#   message inside its timed loop. Set EFA_OPTS=--no-check for the like-for-like pair (both
#   tools re-send an untouched buffer), FT_OPTS=-v to compare verified with verified.
# - iterations: by default each tool's own (both scale down with size, fabtests' size_to_count:
#   20000 messages below 64 KiB, 2000 from 64 KiB, 200 from 1 MiB; efabench the same messages /
#   window, at least 10 windows) and fabtests' 10 warm-up messages against efabench's tenth of the
#   windows. ITERS and WARMUP (messages) give both tools the same counts: fabtests -I ITERS
#   -w WARMUP, efabench -n ITERS/WINDOW -w WARMUP/WINDOW windows for the stream benches; use them
#   for like-for-like tables.
# - per-window sync: fi_rma_bw (and fi_rdm_bw) end every window with a sync message sent from and
#   received into the test's own buffers, device memory with -D cuda: a cudaMemcpy each way per
#   window, in two processes' CUDA contexts. Two processes on one GPU without MPS time-slice, so
#   fabtests' figure then depends on the window (same-GPU 1 MiB writes on an H200: 33 GB/s at
#   window 16, 49 at 64, 61-65 at 256-1024; efabench 78-87 at every window, its control messages
#   in host memory; results/nvidia-h200/p2p/2026-12-02-write-parity). Compare GPU runs at several
#   WINDOW values, or under MPS.
#
# Usage: scripts/compare-fabtests.sh
# Environment:
#   LF_PREFIX   libfabric + fabtests install (default .dev/lf-cuda, see scripts/gpu-libfabric.sh)
#   EFABENCH    efabench binary (default target/release/efabench)
#   MEMS        memory kinds (default "host pinned cuda")
#   BENCHES     (default "write read lat")
#   SIZES       bandwidth sizes in bytes, a geometric series (default "4096 65536 1048576 16777216")
#   LAT_SIZE    latency size (8), LAT_ITERS (2000), REPEATS (3)
#   WINDOW      messages in flight of the bandwidth tests, both tools (default 64: --window, -W)
#   ITERS       messages per bandwidth run for both tools (default: each tool's own count)
#   WARMUP      warm-up messages for both tools (default: each tool's own; needs ITERS)
#   GPU         GPU of both sides (0); PEER_GPU (default GPU) puts the second process on another
#               GPU: fabtests' client gets -i PEER_GPU, efabench gets --gpu auto (rank r -> GPU r),
#               which needs GPU=0 PEER_GPU=1
#   MR          efabench --mr value (auto|dmabuf|va), passed only when this efabench has --mr
#   EFA_ENV     extra environment for efabench only (e.g. "FI_LOG_LEVEL=warn")
#   EFA_OPTS    extra efabench options (e.g. "--no-check"); FT_OPTS extra fabtests options (-R, -v)
#   RUN_TIMEOUT seconds before one run is killed (120)
#   MACHINE     machine name for the file names (default from nvidia-smi, else hostname)
#   TAG         file name prefix (default "parity"); OUTDIR (default results)
# Writes OUTDIR/TAG-MACHINE-DATE.tsv (bench mem size efabench_GBps fabtests_GBps ratio),
# OUTDIR/TAG-MACHINE-DATE-lat.tsv (bench mem size efabench_us fabtests_us ratio), and the raw
# outputs next to them (.jsonl for efabench's records, -raw.log for everything printed).
set -uo pipefail
cd "$(dirname "$0")/.."
LF_PREFIX=${LF_PREFIX:-.dev/lf-cuda}
EFABENCH=${EFABENCH:-target/release/efabench}
MEMS=${MEMS:-"host pinned cuda"}
BENCHES=${BENCHES:-"write read lat"}
SIZES=${SIZES:-"4096 65536 1048576 16777216"}
LAT_SIZE=${LAT_SIZE:-8}
LAT_ITERS=${LAT_ITERS:-2000}
REPEATS=${REPEATS:-3}
GPU=${GPU:-0}
PEER_GPU=${PEER_GPU:-$GPU}
OUTDIR=${OUTDIR:-results}
TAG=${TAG:-parity}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
MACHINE=${MACHINE:-$( [ "${ngpu:-0}" -gt 0 ] \
  && echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-' | tr 'A-Z' 'a-z')-x$ngpu" \
  || hostname)}
DATE=$(date -u +%F)

die() { echo "compare-fabtests.sh: $*" >&2; exit 2; }
LF_PREFIX=$(cd "$LF_PREFIX" 2>/dev/null && pwd) || die "no libfabric install at LF_PREFIX: run scripts/gpu-libfabric.sh"
[ -f "$LF_PREFIX/lib/libfabric.so.1" ] || die "$LF_PREFIX/lib/libfabric.so.1 missing: run scripts/gpu-libfabric.sh"
for t in fi_rma_bw fi_rdm_pingpong fi_rdm_bw; do
  [ -x "$LF_PREFIX/bin/$t" ] || die "$LF_PREFIX/bin/$t missing: run scripts/gpu-libfabric.sh"
done
[ -x "$EFABENCH" ] || die "no efabench at $EFABENCH: cargo build --release -p efabench, or set EFABENCH"
if [ "$PEER_GPU" != "$GPU" ] && { [ "$GPU" != 0 ] || [ "$PEER_GPU" != 1 ]; }; then
  die "PEER_GPU other than GPU works as GPU=0 PEER_GPU=1 (efabench's --gpu auto puts rank r on GPU r)"
fi

# Same library for both tools; fabtests and libfabric dlopen libcuda.so.1 and libcudart.so.
cudalib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcudart.so" ] && { cudalib=$d; break; }
done
export LD_LIBRARY_PATH="$LF_PREFIX/lib${cudalib:+:$cudalib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export EFABENCH_LIBFABRIC="$LF_PREFIX/lib/libfabric.so.1"
export FI_PROVIDER_PATH="$LF_PREFIX/lib/libfabric"

mkdir -p "$OUTDIR"
base="$OUTDIR/$TAG-$MACHINE-$DATE"
tsv="$base.tsv"; lat="$base-lat.tsv"; raw="$base-raw.log"; jsonl="$base.jsonl"
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mr_opt=()
if [ -n "${MR:-}" ]; then
  if "$EFABENCH" write --help 2>/dev/null | grep -q -- '--mr'; then mr_opt=(--mr "$MR");
  else echo "# this efabench has no --mr option: MR=$MR ignored" | tee -a "$raw"; fi
fi
sizes=($SIZES)
min=${sizes[0]}; max=${sizes[${#sizes[@]}-1]}
factor=2; [ ${#sizes[@]} -gt 1 ] && factor=$(( sizes[1] / sizes[0] ))
list=$(IFS=,; echo "${sizes[*]}")
# Same message counts for both tools when asked (see the header).
WINDOW=${WINDOW:-64}
[ "$WINDOW" -ge 1 ] 2>/dev/null || die "WINDOW must be a number of messages, 1 or more"
efa_iters=(--window "$WINDOW"); ft_iters=(-W "$WINDOW")
if [ -n "${ITERS:-}" ]; then
  [ "$ITERS" -ge "$WINDOW" ] 2>/dev/null || die "ITERS must be a message count of at least one window ($WINDOW)"
  efa_iters+=(-n $((ITERS / WINDOW))); ft_iters+=(-I $((ITERS / WINDOW * WINDOW)))
  if [ -n "${WARMUP:-}" ]; then
    [ "$WARMUP" -ge "$WINDOW" ] 2>/dev/null || die "WARMUP must be a message count of at least one window ($WINDOW)"
    efa_iters+=(-w $((WARMUP / WINDOW))); ft_iters+=(-w $((WARMUP / WINDOW * WINDOW)))
  fi
fi
# The footprint fabtests really uses (see the header): rma tests WINDOW x size, message tests one buffer.
fp_rma=(); fp_msg=()
case " ${EFA_OPTS:-} " in *" --footprint"*) ;; *) fp_rma=(--footprint $((WINDOW * max))); fp_msg=(--footprint 1) ;; esac
port=$((20000 + RANDOM % 20000))

log() { echo "$*" | tee -a "$raw"; }
lfver=$("$LF_PREFIX/bin/fi_info" --version 2>/dev/null | sed -n 's/^libfabric: //p')
log "# $(date -u +%FT%TZ) $MACHINE, libfabric ${lfver:-?} at $LF_PREFIX"
log "# efabench $("$EFABENCH" --version 2>/dev/null); GPU=$GPU PEER_GPU=$PEER_GPU MR=${MR:-} EFA_ENV='${EFA_ENV:-}' EFA_OPTS='${EFA_OPTS:-}' FT_OPTS='${FT_OPTS:-}' REPEATS=$REPEATS"

# efabench: one launch per (bench, mem, repeat) over all sizes; prints "size value" lines.
run_efabench() { # bench mem
  local b=$1 m=$2 out="$work/efa.jsonl" args=()
  rm -f "$out"
  case $b in
    write|read) args=("$b" --variant stream -b "$min" -e "$max" -f "$factor" "${fp_rma[@]}" "${efa_iters[@]}") ;;
    sendrecv) args=("$b" --variant stream -b "$min" -e "$max" -f "$factor" "${fp_msg[@]}" "${efa_iters[@]}") ;;
    lat) args=(sendrecv --variant pingpong -b "$LAT_SIZE" -e "$LAT_SIZE" -n "$LAT_ITERS") ;;
  esac
  args+=(-p shm --mem "$m" -o "$out" --format json)
  if [ "$m" != host ]; then
    if [ "$PEER_GPU" != "$GPU" ]; then args+=(--gpu auto); else args+=(--gpu "$GPU"); fi
  fi
  # shellcheck disable=SC2086
  echo "+ ${EFA_ENV:-} efabench launch -n 2 -- ${args[*]} ${mr_opt[*]} ${EFA_OPTS:-}" >>"$raw"
  # shellcheck disable=SC2086
  env ${EFA_ENV:-} timeout "${RUN_TIMEOUT:-120}" "$EFABENCH" launch -n 2 -- "${args[@]}" "${mr_opt[@]}" ${EFA_OPTS:-} \
    >>"$raw" 2>&1 || echo "# efabench $b $m failed (exit $?)" | tee -a "$raw" >&2
  [ -s "$out" ] || return 0
  python3 - "$out" "$b" <<'EOF' 2>>"$raw"
import json, sys
path, bench = sys.argv[1:]
for line in open(path):
    r = json.loads(line)
    if bench == "lat":
        print(r["size_bytes"], r["lat_us"]["mean"], r.get("errors", 0))
    else:
        print(r["size_bytes"], r["bw_GBps"], r.get("errors", 0))
EOF
  # keep every record, tagged with what produced it
  python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); r["parity_env"] = sys.argv[2]; r["parity_opts"] = sys.argv[3]; r["parity_gpus"] = sys.argv[4]
    print(json.dumps(r))' "$out" "${EFA_ENV:-}" "${EFA_OPTS:-} ${mr_opt[*]}" "$GPU,$PEER_GPU" >>"$jsonl"
}

# fabtests: server and client on this host; the client's machine-readable lines give the numbers.
run_fabtests() { # bench mem
  local b=$1 m=$2 t opts=() dev_s=() dev_c=() col
  case $b in
    write) t=fi_rma_bw; opts=(-o writedata -S "l:$list" "${ft_iters[@]}") ;;
    read) t=fi_rma_bw; opts=(-o read -S "l:$list" "${ft_iters[@]}") ;;
    sendrecv) t=fi_rdm_bw; opts=(-S "l:$list" "${ft_iters[@]}") ;;
    lat) t=fi_rdm_pingpong; opts=(-S "$LAT_SIZE" -I "$LAT_ITERS") ;;
  esac
  if [ "$m" != host ] && [ "$m" != pinned ]; then
    dev_s=(-D cuda -i "$GPU"); dev_c=(-D cuda -i "$PEER_GPU")
  fi
  port=$((port + 1))
  # shellcheck disable=SC2086
  echo "+ $t -p shm -e rdm ${opts[*]} ${dev_s[*]} -m -E=$port ${FT_OPTS:-} (server; client with ${dev_c[*]} 127.0.0.1)" >>"$raw"
  # shellcheck disable=SC2086
  timeout "${RUN_TIMEOUT:-120}" "$LF_PREFIX/bin/$t" -p shm -e rdm "${opts[@]}" "${dev_s[@]}" -m -E="$port" ${FT_OPTS:-} \
    >"$work/ft-server" 2>&1 &
  local server=$!
  sleep 0.5
  # shellcheck disable=SC2086
  timeout "${RUN_TIMEOUT:-120}" "$LF_PREFIX/bin/$t" -p shm -e rdm "${opts[@]}" "${dev_c[@]}" -m -E="$port" ${FT_OPTS:-} \
    127.0.0.1 >"$work/ft-client" 2>&1 || echo "# $t $m failed (exit $?)" | tee -a "$raw" >&2
  wait "$server" 2>/dev/null
  cat "$work/ft-client" >>"$raw"
  col='MB/sec'; [ "$b" = lat ] && col='usec/xfer'
  python3 - "$work/ft-client" "$col" <<'EOF' 2>>"$raw"
import re, sys
path, col = sys.argv[1:]
for line in open(path):
    if not line.startswith("- {"):
        continue
    kv = dict(re.findall(r"([\w/]+): ([-\d.e+]+)", line))
    v = float(kv[col])
    print(kv["xfer_size"], v / 1000.0 if col == "MB/sec" else v)
EOF
}

for b in $BENCHES; do
  for m in $MEMS; do
    : >"$work/efa-$b-$m"; : >"$work/ft-$b-$m"
    for r in $(seq "$REPEATS"); do
      run_efabench "$b" "$m" >>"$work/efa-$b-$m"
      # fabtests has no pinned memory: efabench's pinned is compared with fabtests' host.
      run_fabtests "$b" "$m" >>"$work/ft-$b-$m"
      log "# $b $m repeat $r: efabench $(tr '\n' ' ' <"$work/efa-$b-$m" | tail -c 300) | fabtests $(tr '\n' ' ' <"$work/ft-$b-$m" | tail -c 300)"
    done
  done
done

# Medians per (bench, mem, size); errors summed over the repeats.
python3 - "$work" "$tsv" "$lat" "$BENCHES" "$MEMS" <<'EOF' | tee -a "$raw"
import os, statistics, sys
work, tsv, lat, benches, mems = sys.argv[1:]
def load(path, cols):
    d = {}
    if os.path.exists(path):
        for line in open(path):
            p = line.split()
            if len(p) >= cols:
                d.setdefault(int(p[0]), []).append([float(x) for x in p[1:cols]])
    return d
bw_rows, lat_rows = [], []
for b in benches.split():
    for m in mems.split():
        e = load(f"{work}/efa-{b}-{m}", 3)
        f = load(f"{work}/ft-{b}-{m}", 2)
        for size in sorted(set(e) | set(f)):
            ev = statistics.median(x[0] for x in e[size]) if size in e else float("nan")
            errs = int(sum(x[1] for x in e[size])) if size in e else -1
            fv = statistics.median(x[0] for x in f[size]) if size in f else float("nan")
            ratio = ev / fv if fv == fv and fv > 0 and ev == ev else float("nan")
            row = (b if b != "lat" else "sendrecv-pingpong", m, size, ev, fv, ratio,
                   len(e.get(size, [])), len(f.get(size, [])), errs)
            (lat_rows if b == "lat" else bw_rows).append(row)
def write(path, rows, unit):
    with open(path, "w") as out:
        out.write(f"bench\tmem\tsize\tefabench_{unit}\tfabtests_{unit}\tratio\tn_efabench\tn_fabtests\tefabench_errors\n")
        for r in rows:
            out.write("%s\t%s\t%d\t%.4g\t%.4g\t%.3f\t%d\t%d\t%d\n" % r)
    print(open(path).read())
if bw_rows:
    write(tsv, bw_rows, "GBps")
if lat_rows:
    write(lat, lat_rows, "us")
EOF
echo "# bandwidth: $tsv; latency: $lat; raw: $raw; efabench records: $jsonl"
