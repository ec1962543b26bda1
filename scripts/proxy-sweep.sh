#!/usr/bin/env bash
# efabench proxy on a GPU machine: cpu / blocking / nbi in one run, over the CUDA-enabled
# shm provider (scripts/gpu-libfabric.sh) with device and pinned memory, both ranks on one GPU and
# (with 2+ GPUs) on two, per-rail and per-GPU proxy threads; the main configurations are repeated
# ROUNDS times, alternating, and scripts/proxy_summary.py prints medians of the ratios.
#
#   scripts/proxy-sweep.sh            (from the repository root)
# Environment:
#   EFABENCH   binary (default target/release/efabench)
#   LF_PREFIX  CUDA-enabled libfabric (default .dev/lf-cuda)
#   OUT        where records and logs go (default results/proxy-run)
#   ROUNDS     repeats of the main configurations (default 3)
#   SIZES      efabench size options (default "-b 16 -e 64M -f 4": 16 B ... 1 MiB ... 64 MiB)
#   ITERS      "-n 100 -w 10": timed and warm-up iterations per point (the payload is written
#              and checked on the GPU, so a point costs little more than its transfers)
#   T          seconds before one run is killed (default 240)
#   POLL       --quiet-poll-ns of the poll part (default 200)
#   ITERS1     iterations of the one-GPU runs (default "-n 5 -w 1"): with both ranks on one GPU and
#              no MPS, every blocking put waits one time slice (~2.4 ms on an H200) for the target's
#              synchronous copy while the producer kernel holds the GPU, so full counts take minutes
#   PARTS      which parts to run (default "rounds targets small poll pinned rails rails-small fence
#              mps rings"); mps repeats the one-GPU run under NVIDIA MPS (one shared context, so
#              the copy and the producer kernel run at once) when nvidia-cuda-mps-control is
#              installed; rings runs --ring pinned and managed, and gdr and hybrid where GDRCopy
#              is (/dev/gdrdrv and libgdrapi)
set -uo pipefail
cd "$(dirname "$0")/.."
B=${EFABENCH:-target/release/efabench}
LF=${LF_PREFIX:-.dev/lf-cuda}
OUT=${OUT:-results/proxy-run}
ROUNDS=${ROUNDS:-3}
SIZES=${SIZES:--b 16 -e 64M -f 4}
ITERS=${ITERS:--n 100 -w 10}
T=${T:-240}
POLL=${POLL:-200}
ITERS1=${ITERS1:--n 5 -w 1}
PARTS=${PARTS:-rounds targets small poll pinned rails rails-small fence mps rings}
mkdir -p "$OUT"
export EFABENCH_LIBFABRIC=${EFABENCH_LIBFABRIC:-$LF/lib/libfabric.so.1}
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
date -u; nvidia-smi -L; nproc; "$B" --version
fail=0
run() { # tag, then proxy options
  local tag=$1; shift
  echo "######## $tag (t=${SECONDS}s): proxy -p shm $*"
  timeout "$T" "$B" launch -n 2 -- proxy -p shm "$@" -o "$OUT/$tag.jsonl" >"$OUT/$tag.log" 2>&1
  local rc=$?
  echo "## rc=$rc t=${SECONDS}s"
  [ $rc = 0 ] || fail=1
  grep -E 'nbi/cpu|^\[rank' "$OUT/$tag.log" | tail -n 20
}
has() { [[ " $PARTS " == *" $1 "* ]]; }
G=$([ "$ngpu" -ge 2 ] && echo auto || echo 0)
# shellcheck disable=SC2086
if has rounds; then
  for r in $(seq 1 "$ROUNDS"); do
    run "cuda-1gpu-r$r" --mem cuda --gpu 0 $SIZES $ITERS1
    [ "$ngpu" -ge 2 ] && run "cuda-2gpu-r$r" --mem cuda --gpu auto $SIZES $ITERS
  done
fi
# Large puts (nbi from 1 MiB, blocking at 8 MiB), GPU to GPU when there are two.
# shellcheck disable=SC2086
if has targets; then
  for r in $(seq 1 "$ROUNDS"); do
    run "targets-r$r" --mem cuda --gpu "$G" -b 1M -e 8M -f 2 $ITERS
  done
fi
# Small puts, 8 B to 8 KiB in steps of 2, GPU to GPU when there are two.
# shellcheck disable=SC2086
if has small; then
  for r in $(seq 1 "$ROUNDS"); do
    run "small-r$r" --mem cuda --gpu "$G" -b 8 -e 8K -f 2 $ITERS
  done
fi
# The GPU pausing between reads of host memory while it waits (one round).
# shellcheck disable=SC2086
has poll && run "cuda-1gpu-poll$POLL" --mem cuda --gpu 0 --quiet-poll-ns "$POLL" $SIZES $ITERS1
# Pinned host memory moves at CPU-copy speed (CMA): fewer iterations, up to 16 MiB.
has pinned && run pinned --mem pinned --gpu "$G" -b 16 -e 16M -f 4 -n 40 -w 4
# Per-rail against per-GPU proxy threads.
# shellcheck disable=SC2086
if has rails; then
  for rails in 2 4; do
    for th in rail gpu; do
      run "cuda-rails$rails-$th" --mem cuda --gpu "$G" --rails $rails --proxy-threads $th \
        -b 64K -e 64M -f 4 $ITERS
    done
  done
fi
# The same for small puts, where one thread polling every rail's completion queue shows most.
# shellcheck disable=SC2086
if has rails-small; then
  for th in rail gpu; do
    run "small-rails4-$th" --mem cuda --gpu "$G" --rails 4 --proxy-threads $th -b 16 -e 4K -f 16 $ITERS
  done
fi
# Small puts with the kernel's system-scope fence before every put and once per iteration.
# shellcheck disable=SC2086
if has fence; then
  for mem in cuda pinned; do
    for f in per-put once; do
      run "small-$mem-fence-$f" --mem $mem --gpu "$G" --payload-fence $f --modes nbi,blocking,cpu \
        -b 16 -e 4K -f 16 $ITERS
    done
  done
fi
# Both ranks on one GPU under MPS: the ranks' work shares one context instead of time slices.
# shellcheck disable=SC2086
if has mps; then
  if command -v nvidia-cuda-mps-control >/dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/efabench-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/efabench-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d; then
      run cuda-1gpu-mps --mem cuda --gpu 0 $SIZES $ITERS
      echo quit | nvidia-cuda-mps-control
    else
      echo "## mps: nvidia-cuda-mps-control -d failed"
    fi
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  else
    echo "## mps: nvidia-cuda-mps-control not installed, part skipped"
  fi
fi
# Ring placements (--ring): small puts, where the GPU's polls of the proxy's counts matter, and
# 1 MiB. gdr and hybrid need GDRCopy (the gdrdrv module and libgdrapi).
# shellcheck disable=SC2086
if has rings; then
  rings="pinned managed"
  if [ -e /dev/gdrdrv ] && ldconfig -p 2>/dev/null | grep -q libgdrapi; then
    rings="$rings gdr hybrid"
  else
    echo "## rings: no GDRCopy (/dev/gdrdrv, libgdrapi): gdr and hybrid skipped"
  fi
  for ring in $rings; do
    run "ring-$ring" --mem cuda --gpu "$G" --ring "$ring" -b 8 -e 1M -f 8 $ITERS
  done
fi
python3 scripts/proxy_summary.py "$OUT"/*.jsonl | tee "$OUT/summary.txt"
echo "done t=${SECONDS}s fail=$fail"
exit $fail
