#!/bin/bash
# Proxy sweep, second half (SYNC_MEMOPS): targets, small puts, rails, one GPU with few iterations,
# one GPU under MPS. One tarball back.
set -u
R=$(pwd); S=$R/.dev/s1; W=/tmp/o3; mkdir -p $W
export LF_PREFIX=$R/.dev/lf-cuda
export EFABENCH_LIBFABRIC=$LF_PREFIX/lib/libfabric.so.1
exec > >(tee -a $OUT/log.txt) 2>&1
pack() { tar czf $OUT/run3.tgz -C $W . ; }
trap pack EXIT
date -u; nvidia-smi -L; $S/efabench --version
echo "#### one GPU, few iterations (t=${SECONDS}s)"
timeout 120 $S/efabench launch -n 2 -- proxy -p shm --mem cuda --gpu 0 -b 16 -e 64M -f 4 -n 5 -w 1 -o $W/cuda-1gpu-r1.jsonl >$W/cuda-1gpu-r1.log 2>&1
echo "rc=$? t=${SECONDS}s"; grep -E 'nbi/cpu' $W/cuda-1gpu-r1.log | tail -12
pack
echo "#### sweep parts (t=${SECONDS}s)"
OUT=$W EFABENCH=$S/efabench LF_PREFIX=$LF_PREFIX PARTS="targets small rails mps" ROUNDS=3 T=100 \
  timeout 420 bash scripts/proxy-sweep.sh > $W/sweep-3.log 2>&1
echo "sweep rc=$?"; grep -E "########|rc=|mps" $W/sweep-3.log | tail -40
echo "#### done t=${SECONDS}s"
