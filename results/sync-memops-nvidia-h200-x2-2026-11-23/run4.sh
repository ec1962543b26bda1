#!/bin/bash
# Host and pinned parity at fabtests' RMA footprint; alltoall with device memory (SYNC_MEMOPS).
set -u
R=$(pwd); S=$R/.dev/s1; W=/tmp/o4; mkdir -p $W
export LF_PREFIX=$R/.dev/lf-cuda MACHINE=nvidia-h200-x2 RUN_TIMEOUT=90
export EFABENCH_LIBFABRIC=$LF_PREFIX/lib/libfabric.so.1
exec > >(tee -a $OUT/log.txt) 2>&1
pack() { tar czf $OUT/run4.tgz -C $W . ; }
trap pack EXIT
date -u; nvidia-smi -L; $S/efabench --version
echo "#### alltoall cuda 2 ranks (t=${SECONDS}s)"
timeout 120 $S/efabench launch -n 2 -- alltoall -p shm --mem cuda --gpu auto -b 1M -e 64M -f 4 -n 50 -o $W/alltoall-cuda-2r.jsonl 2>&1 | tee $W/alltoall-cuda-2r.log | grep -v "^\[rank [1-9]" | grep -E "^ +[0-9]|Errors"
echo "#### alltoall cuda 4 ranks (t=${SECONDS}s)"
timeout 120 $S/efabench launch -n 4 -- alltoall -p shm --mem cuda --gpu auto -b 1M -e 64M -f 4 -n 20 -w 2 -o $W/alltoall-cuda-4r.jsonl 2>&1 | tee $W/alltoall-cuda-4r.log | grep -v "^\[rank [1-9]" | grep -E "^ +[0-9]|Errors"
pack
echo "#### parity host+pinned 1 GPU, --footprint 1G (t=${SECONDS}s)"
EFABENCH=$S/efabench OUTDIR=$W TAG=parity-fp1g-host MEMS="host pinned" BENCHES="write" \
  SIZES="65536 1048576 16777216" REPEATS=3 EFA_OPTS="--footprint 1G" timeout 300 bash scripts/compare-fabtests.sh 2>&1 | grep -v '^+ ' | grep -v '^# [a-z]* [a-z]* repeat' | tail -10
echo "#### done t=${SECONDS}s"
