#!/usr/bin/env bash
# parity device run (issue 13): bash .dev/parity/run.sh, from the repo root, on nvidia-h200-x2,
# carrying .dev/parity and .dev/lf-cuda. Stages in priority order, each skipped past the budget.
set -u
R=$(pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LF_PREFIX=$R/.dev/lf-cuda EFABENCH=$R/.dev/parity/efabench MACHINE=nvidia-h200-x2 RUN_TIMEOUT=45
T=/tmp/pr; mkdir -p $T
exec > >(tee -a $OUT/log.txt) 2>&1
BUDGET=${BUDGET:-100}
date -u; nvidia-smi -L
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
# second run: write_at synchronises (gpu crate fix) and PARITY_SETTLE syncs the GPU before the clock stops
stage s-2gpu-devonly-settle MEMS=cuda BENCHES="write lat" SIZES="1048576 16777216" REPEATS=1 GPU=0 PEER_GPU=1 EFA_ENV="PARITY_DEVICE_ONLY=1 PARITY_SETTLE=1"
stage s-1gpu-devonly-settle MEMS=cuda BENCHES="write lat" SIZES="1048576 16777216" REPEATS=1 EFA_ENV="PARITY_DEVICE_ONLY=1 PARITY_SETTLE=1"
stage s-1gpu-devonly-va-settle MEMS=cuda BENCHES="write" SIZES="1048576 16777216" REPEATS=1 EFA_ENV="PARITY_DEVICE_ONLY=1 PARITY_NO_DMABUF=1 PARITY_SETTLE=1"
stage s-2gpu-default-settle MEMS=cuda BENCHES="lat" REPEATS=1 GPU=0 PEER_GPU=1 EFA_ENV="PARITY_SETTLE=1"
echo "### done t=${SECONDS}s"; ls -la $OUT
