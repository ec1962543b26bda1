#!/usr/bin/env bash
# parity device run (issue 13): bash .dev/parity/run.sh, from the repo root, on nvidia-h200-x2,
# carrying .dev/parity and .dev/lf-cuda. Stages in priority order, each skipped past the budget.
set -u
R=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LF_PREFIX=$R/.dev/lf-cuda EFABENCH=$R/.dev/parity/efabench MACHINE=nvidia-h200-x2 RUN_TIMEOUT=45
T=/tmp/pr; mkdir -p $T
exec > >(tee -a $OUT/log.txt) 2>&1
BUDGET=${BUDGET:-470}
date -u; nvidia-smi -L; nvidia-smi topo -m
LD_LIBRARY_PATH=$LF_PREFIX/lib:/usr/local/cuda/lib64 $LF_PREFIX/bin/fi_info -p shm -c FI_HMEM 2>&1 | head -8
stage() { # tag, then env assignments for compare-fabtests.sh
  local tag=$1; shift
  if [ $SECONDS -gt $BUDGET ]; then echo "### skip $tag (t=${SECONDS}s)"; return; fi
  echo "### $tag: $* (t=${SECONDS}s)"
  mkdir -p $T/$tag; env "$@" OUTDIR=$T/$tag TAG=$tag bash $R/.dev/parity/scripts/compare-fabtests.sh 2>&1 | grep -v '^+ ' | tail -30
  for f in $T/$tag/$tag-*.tsv; do
    case $f in *-lat.tsv) dst=$OUT/exp-lat.tsv ;; *) dst=$OUT/exp.tsv ;; esac
    [ -s "$dst" ] || head -1 "$f" | sed 's/^/config\t/' >"$dst"
    tail -n +2 "$f" | sed "s/^/$tag\t/" >>"$dst"
  done
  cat $T/$tag/$tag-*.jsonl >>$OUT/records.jsonl 2>/dev/null
  { echo "######## $tag: $*"; cat $T/$tag/$tag-*-raw.log; } >>$OUT/raw.log 2>/dev/null
}
# 1. the cause: cuda, both ranks on GPU 0 (as fabtests), registration variants
stage cuda-default   MEMS=cuda BENCHES="write lat" SIZES="65536 1048576 16777216" REPEATS=1
stage cuda-devonly   MEMS=cuda BENCHES="write lat" SIZES="65536 1048576 16777216" REPEATS=1 EFA_ENV=PARITY_DEVICE_ONLY=1
stage cuda-devonly-va MEMS=cuda BENCHES="write lat" SIZES="65536 1048576 16777216" REPEATS=1 EFA_ENV="PARITY_DEVICE_ONLY=1 PARITY_NO_DMABUF=1"
stage cuda-va        MEMS=cuda BENCHES="write lat" SIZES="65536 1048576 16777216" REPEATS=1 EFA_ENV=PARITY_NO_DMABUF=1
# 2. the table as efabench is today, every memory kind, 3 alternating repeats
stage parity         MEMS="cuda host pinned" BENCHES="write read lat" SIZES="65536 1048576 16777216" REPEATS=3
cp $T/parity/parity-*.tsv $OUT/ 2>/dev/null
# 3. the table with the fix (FI_HMEM_DEVICE_ONLY on device-memory registrations)
stage parity-fixed   MEMS=cuda BENCHES="write read lat" SIZES="65536 1048576 16777216" REPEATS=3 EFA_ENV=PARITY_DEVICE_ONLY=1
# 4. two GPUs (rank r on GPU r), before and after
stage cuda-2gpu      MEMS=cuda BENCHES="write lat" SIZES="1048576 16777216" REPEATS=1 GPU=0 PEER_GPU=1
stage cuda-2gpu-devonly MEMS=cuda BENCHES="write lat" SIZES="1048576 16777216" REPEATS=1 GPU=0 PEER_GPU=1 EFA_ENV=PARITY_DEVICE_ONLY=1
# 5. efabench options: no verification; smaller window (footprint 8 x size)
stage cuda-nocheck   MEMS=cuda BENCHES="write lat" SIZES="1048576 16777216" REPEATS=1 EFA_OPTS=--no-check
stage cuda-window8   MEMS=cuda BENCHES=write SIZES="1048576 16777216" REPEATS=1 EFA_OPTS="--window 8"
# 6. fabtests registering with dmabuf (-R), and verifying (-v)
stage cuda-ft-dmabuf MEMS=cuda BENCHES=write SIZES="1048576 16777216" REPEATS=1 FT_OPTS=-R
# 7. which shm protocol: libfabric's debug log of one run each
if [ $SECONDS -lt $BUDGET ]; then
  for e in "" PARITY_DEVICE_ONLY=1; do
    echo "### shm log, EFA_ENV='$e'"
    env $e FI_LOG_LEVEL=debug FI_LOG_PROV=shm LD_LIBRARY_PATH=$LF_PREFIX/lib:/usr/local/cuda/lib64 EFABENCH_LIBFABRIC=$LF_PREFIX/lib/libfabric.so.1 \
      timeout 40 $EFABENCH launch -n 2 -- write -p shm --mem cuda --gpu 0 --variant stream -b 1M -e 1M -n 3 -w 1 2>&1 \
      | grep -iE 'ipc|sar|proto|cma|hmem|dmabuf|device' | sort | uniq -c | sort -rn | head -25
  done
fi
# 8. the gpu crate's tests on real GPUs (pinned/registered/managed buffers through the new copies)
if [ $SECONDS -lt $((BUDGET + 40)) ]; then
  nv=$(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cuda_nvrtc", "lib") for p in nvidia.__path__))' 2>/dev/null)
  for d in /usr/local/cuda/lib64 $nv; do ls $d/libnvrtc.so* >/dev/null 2>&1 && export LD_LIBRARY_PATH=$d:${LD_LIBRARY_PATH:-} && break; done
  for t in $R/.dev/parity/tests/*; do echo "=== $t"; EFABENCH_LIBFABRIC=$LF_PREFIX/lib/libfabric.so.1 timeout 60 $t --test-threads=1 2>&1 | tail -15; done >$OUT/gpu-tests.log 2>&1
  tail -5 $OUT/gpu-tests.log
fi
echo "### done t=${SECONDS}s"; ls -la $OUT
