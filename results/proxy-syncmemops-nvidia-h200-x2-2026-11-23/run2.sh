#!/bin/bash
# Parity at fabtests' real RMA footprint (window x size), 1 and 2 GPUs; then the proxy sweep, all
# with SYNC_MEMOPS set. Everything lands in one tarball (the device returns at most 8 files).
set -u
R=$(pwd); S=$R/.dev/s1; W=/tmp/o; mkdir -p $W/parity $W/proxy
export LF_PREFIX=$R/.dev/lf-cuda MACHINE=nvidia-h200-x2 RUN_TIMEOUT=90
export EFABENCH_LIBFABRIC=$LF_PREFIX/lib/libfabric.so.1
exec > >(tee -a $OUT/log.txt) 2>&1
pack() { tar czf $OUT/run2.tgz -C $W . ; }
trap pack EXIT
date -u; nvidia-smi -L; $S/efabench --version
echo "#### parity 1 GPU, --footprint 1G (t=${SECONDS}s)"
EFABENCH=$S/efabench OUTDIR=$W/parity TAG=parity-fp1g-1gpu MEMS=cuda BENCHES="write read" \
  SIZES="4096 65536 1048576 16777216" REPEATS=3 EFA_OPTS="--footprint 1G" bash scripts/compare-fabtests.sh 2>&1 | grep -v '^+ ' | grep -v '^# [a-z]* cuda repeat' | tail -14
echo "#### parity 2 GPUs, --footprint 1G (t=${SECONDS}s)"
EFABENCH=$S/efabench OUTDIR=$W/parity TAG=parity-fp1g-2gpu MEMS=cuda BENCHES="write lat" GPU=0 PEER_GPU=1 \
  SIZES="4096 65536 1048576 16777216" REPEATS=3 EFA_OPTS="--footprint 1G" bash scripts/compare-fabtests.sh 2>&1 | grep -v '^+ ' | grep -v '^# [a-z]* cuda repeat' | tail -14
pack
echo "#### proxy sweep (t=${SECONDS}s)"
OUT=$W/proxy EFABENCH=$S/efabench LF_PREFIX=$LF_PREFIX PARTS="rounds targets small rails" ROUNDS=3 T=100 \
  timeout 400 bash scripts/proxy-sweep.sh > $W/proxy/sweep.log 2>&1
echo "sweep rc=$?"; grep -E "########|rc=" $W/proxy/sweep.log | tail -40; tail -3 $W/proxy/sweep.log
echo "#### done t=${SECONDS}s"
