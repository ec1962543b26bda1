#!/usr/bin/env bash
# Runs that need two GPUs, in one device call of under 9 minutes, from the repository root:
#   (a) ipc: nvbandwidth's device-to-device set (--nvbw all) on every GPU pair, the kernel
#       variants with the copy-engine baseline and the pair matrix, and the one-GPU paths
#       (device_local_copy, latency against the GPU's own memory) with a single rank;
#   (b) proxy --mem cuda across two GPUs with --ring pinned and --ring managed (cpu, blocking,
#       nbi), 1 MiB to 8 MiB, over libfabric's CUDA-enabled shm;
#   (c) alltoall --mem cuda over the same shm against nccl-tests alltoall_perf -g 2 (one process,
#       two GPUs), 1 MiB to 256 MiB, alternating, ROUNDS rounds; scripts/two_gpu_summary.py
#       prints the median busbw ratio per size.
#
#   OUT=/some/dir scripts/two-gpu.sh
#
# Needs (carried in, ignored by git):
#   .dev/bin/efabench                     release binary (BIN=...)
#   .dev/lf-cuda/lib/libfabric.so.1       libfabric 2.5.1 built with CUDA (EFABENCH_LIBFABRIC=...)
#   .gpu-deps/nccl-tests-2.19.6.tar.bz2   nccl-tests source (NCCL_TESTS_TAR=...), built here
#                                         against the image's nvidia-nccl-cu13 Python package
#   optional: .dev/bin/gpu-*              the efabench-gpu test binary, run when present
# Environment: OUT (default results/two-gpu-run), ROUNDS (3), LIMIT (seconds for the whole
# script, default 530: every step's timeout is cut to what is left, and a step that would not
# fit is skipped and says so), IPC_SIZES (size options of ipc --nvbw).
#
# What comes back under $OUT (at most 8 files): two-gpu.log (this console), ipc.jsonl,
# proxy.jsonl, alltoall.jsonl (efabench, with "round"), nccl-alltoall.jsonl (nccl-tests rows,
# parsed), summary.txt, logs.tar.gz (every step's own log and the nccl-tests build log).
set -uo pipefail
cd "$(dirname "$0")/.."
R=$PWD
OUT=${OUT:-results/two-gpu-run}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BIN=${BIN:-.dev/bin/efabench}
[ "${BIN#/}" = "$BIN" ] && BIN=$R/$BIN
export EFABENCH_LIBFABRIC=${EFABENCH_LIBFABRIC:-$R/.dev/lf-cuda/lib/libfabric.so.1}
NCCL_TESTS_TAR=${NCCL_TESTS_TAR:-$R/.gpu-deps/nccl-tests-2.19.6.tar.bz2}
ROUNDS=${ROUNDS:-3}
LIMIT=${LIMIT:-530}
# No NVLink multicast (NVLS) on these machines, for nccl-tests and anything else NCCL.
export NCCL_NVLS_ENABLE=0
WORK=$(mktemp -d /tmp/two-gpu.XXXXXX)
exec > >(tee -a "$OUT/two-gpu.log") 2>&1
tee_pid=$!

fail=0
# step NAME SECONDS CMD...: runs CMD with its output in $WORK/NAME.log, under a timeout cut to
# the script's remaining budget; prints the status and the time.
step() {
  local name=$1 t=$2
  shift 2
  local left=$((LIMIT - SECONDS - 20))
  if [ "$left" -lt 10 ]; then
    echo "## $name SKIPPED: the ${LIMIT}s budget is spent (t=${SECONDS}s)"
    fail=1
    return 124
  fi
  [ "$t" -gt "$left" ] && t=$left
  echo "######## $name (t=${SECONDS}s, timeout ${t}s): $*"
  timeout -k 5 "$t" "$@" >"$WORK/$name.log" 2>&1
  local rc=$?
  echo "## $name rc=$rc t=${SECONDS}s"
  [ $rc = 0 ] || fail=1
  return $rc
}
# show NAME [LINES]: the end of a step's log without the legend lines above every table.
show() {
  grep -vE '^# (provider|mem |rank 0 measures|latency:|bw:|bw =|util:|rails:)' "$WORK/$1.log" |
    tail -n "${2:-80}"
}

date -u
nvidia-smi -L
nvidia-smi topo -m 2>/dev/null || true
nproc
"$BIN" --version || { echo "no efabench at $BIN: carry .dev/bin/efabench"; exit 2; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "GPUs: $ngpu; libfabric: $EFABENCH_LIBFABRIC; work dir $WORK"

. scripts/lib/nvrtc.sh

# nccl-tests, built in the background (nice, 12 jobs) while ipc runs, which is timed on the GPU
# with CUDA events; proxy and alltoall wait for it, so no build shares the CPUs with them.
NCCL_DIR=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
NT=$WORK/nccl-tests-2.19.6
build_pid=
if [ "$ngpu" -ge 2 ] && [ -n "$NCCL_DIR" ] && [ -f "$NCCL_TESTS_TAR" ]; then
  # nccl-tests links -lnccl: the wheel has only libnccl.so.2, so give it a folder with both.
  mkdir -p "$WORK/nccl/lib"
  ln -s "$NCCL_DIR/include" "$WORK/nccl/include"
  for f in "$NCCL_DIR"/lib/libnccl.so*; do ln -s "$f" "$WORK/nccl/lib/"; done
  [ -e "$WORK/nccl/lib/libnccl.so" ] || ln -s "$NCCL_DIR/lib/libnccl.so.2" "$WORK/nccl/lib/libnccl.so"
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
  echo "nccl-tests: NCCL from $NCCL_DIR, building for sm_$cc in the background"
  (
    cd "$WORK" && tar xjf "$NCCL_TESTS_TAR" && cd "$NT" &&
      nice -n 19 timeout -k 5 300 make -j12 CUDA_HOME=/usr/local/cuda NCCL_HOME="$WORK/nccl" \
        NVCC_GENCODE="-gencode=arch=compute_${cc},code=sm_${cc}" src.build
  ) >"$WORK/build-nccl-tests.log" 2>&1 &
  build_pid=$!
else
  echo "nccl-tests not built: needs 2 GPUs, the nvidia-nccl-cu13 package (found: '${NCCL_DIR}') and $NCCL_TESTS_TAR"
fi

# (a) ipc. One GPU: the local copy and the latency against the GPU's own memory (one rank).
step ipc-1gpu 60 "$BIN" ipc --gpu 0 --nvbw device_local_copy,device_to_device_latency_sm \
  -b 64M -e 512M -f 8 -o "$OUT/ipc.jsonl"
show ipc-1gpu 40
if [ "$ngpu" -ge 2 ]; then
  # nvbandwidth's set on every ordered pair; the matrices print at 512 MiB, nvbandwidth's size.
  # Two GPUs: 1M, 8M, 64M, 512M; more: 512 MiB only (the cells grow as N x (N - 1)).
  IPC_SIZES=${IPC_SIZES:-$([ "$ngpu" -eq 2 ] && echo "-b 1M -e 512M -f 8" || echo "-b 512M -e 512M")}
  # shellcheck disable=SC2086
  step ipc-nvbw 150 "$BIN" launch -n "$ngpu" -- ipc --nvbw all $IPC_SIZES -o "$OUT/ipc.jsonl"
  show ipc-nvbw 200
  # The kernel variants beside the copy engine, GPU 0 -> GPU 1, and the pair matrix.
  step ipc-variants 120 "$BIN" launch -n "$ngpu" -- ipc --matrix -b 4K -e 1G -f 4 -o "$OUT/ipc.jsonl"
  show ipc-variants 60
else
  echo "## ipc on GPU pairs, proxy across GPUs and alltoall need 2 GPUs (found $ngpu): skipped"
fi
if ls .dev/bin/gpu-* >/dev/null 2>&1; then
  for t in .dev/bin/gpu-*; do
    step "gpu-tests-$(basename "$t")" 90 "$t" --nocapture --test-threads=1
    grep -E '^test |test result|skipped|panicked|chase of' "$WORK/gpu-tests-$(basename "$t").log" | tail -n 40
  done
fi

if [ "$ngpu" -ge 2 ]; then
  if [ -n "$build_pid" ]; then
    echo "## waiting for the nccl-tests build (t=${SECONDS}s)"
    wait "$build_pid"
    echo "## nccl-tests build rc=$? t=${SECONDS}s"
    tail -n 5 "$WORK/build-nccl-tests.log"
  fi
  # (b) proxy across two GPUs, both ring placements, every mode.
  for ring in pinned managed; do
    step "proxy-ring-$ring" 75 "$BIN" launch -n 2 -- proxy -p shm --mem cuda --gpu auto --ring "$ring" \
      -b 1M -e 8M -f 2 -n 100 -w 10 -o "$WORK/proxy-ring-$ring.jsonl"
    show "proxy-ring-$ring" 40
  done
  cat "$WORK"/proxy-ring-*.jsonl >"$OUT/proxy.jsonl" 2>/dev/null
  python3 scripts/proxy_summary.py "$WORK"/proxy-ring-*.jsonl 2>&1 | tee "$WORK/proxy-summary.txt"

  # (c) alltoall: efabench and nccl-tests on the same two GPUs and sizes, alternating.
  AT_SIZES="-b 1M -e 256M -f 2"
  for r in $(seq 1 "$ROUNDS"); do
    # shellcheck disable=SC2086
    step "alltoall-efabench-r$r" 60 "$BIN" launch -n 2 -- alltoall -p shm --mem cuda --gpu auto \
      $AT_SIZES -n 20 -w 5 -o "$WORK/alltoall-efabench-r$r.jsonl"
    show "alltoall-efabench-r$r" 16
    if [ -x "$NT/build/alltoall_perf" ]; then
      # shellcheck disable=SC2086
      LD_LIBRARY_PATH="$WORK/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        step "alltoall-nccl-r$r" 45 "$NT/build/alltoall_perf" -g 2 $AT_SIZES -n 20 -w 5 -c 1
      show "alltoall-nccl-r$r" 16
    else
      echo "## alltoall-nccl-r$r skipped: no alltoall_perf (see build-nccl-tests.log)"
    fi
  done
  for f in "$WORK"/alltoall-efabench-r*.jsonl; do
    [ -f "$f" ] || continue
    r=$(basename "$f" .jsonl)
    r=${r##*-r}
    python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if l.strip():
        d = json.loads(l); d["round"] = int(sys.argv[2]); print(json.dumps(d))' "$f" "$r" >>"$OUT/alltoall.jsonl"
  done
fi

{
  python3 scripts/two_gpu_summary.py "$WORK" --nccl-jsonl "$OUT/nccl-alltoall.jsonl" --ipc "$OUT/ipc.jsonl"
  [ -f "$WORK/proxy-summary.txt" ] && { echo; cat "$WORK/proxy-summary.txt"; }
} 2>&1 | tee "$OUT/summary.txt"
tar czf "$OUT/logs.tar.gz" -C "$WORK" $(cd "$WORK" && ls ./*.log ./*.jsonl ./*.txt 2>/dev/null) 2>/dev/null
echo "done t=${SECONDS}s fail=$fail; files: $(ls "$OUT" | tr '\n' ' ')"
# Let tee write the last lines before the machine collects $OUT.
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
exit $fail
