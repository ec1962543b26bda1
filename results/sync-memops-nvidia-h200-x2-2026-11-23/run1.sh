#!/bin/bash
# SYNC_MEMOPS before/after on the CUDA shm provider: GPU test, read staleness, parity vs fabtests.
set -u
R=$(pwd); S=$R/.dev/s1
export LF_PREFIX=$R/.dev/lf-cuda MACHINE=nvidia-h200-x2 RUN_TIMEOUT=60
export EFABENCH_LIBFABRIC=$LF_PREFIX/lib/libfabric.so.1
exec > >(tee -a $OUT/log.txt) 2>&1
date -u; nvidia-smi -L; $S/efabench --version; $S/efabench-old --version
echo "#### gpu tests"; $S/gpu-test --test-threads=1 2>&1 | tail -14
summ() { python3 - "$1" <<'PY'
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l)
    print(" ", r['size_bytes'], "bw", round(r.get('bw_GBps',0),3), "errors", r.get('errors',0))
PY
}
echo "#### read staleness: read --mem cuda, both ranks on GPU 0, new then old binary, twice"
for r in 1 2; do for b in efabench efabench-old; do
  t=read-$b-r$r
  timeout 60 $S/$b launch -n 2 -- read -p shm --mem cuda --gpu 0 -b 8 -e 64K -f 4 -o $OUT/$t.jsonl >$OUT/$t.log 2>&1
  echo "## $t rc=$? t=${SECONDS}s"; [ -s $OUT/$t.jsonl ] && summ $OUT/$t.jsonl
done; done
echo "#### parity, new binary, 1 GPU (t=${SECONDS}s)"
EFABENCH=$S/efabench OUTDIR=$OUT TAG=parity-syncmemops-1gpu MEMS=cuda BENCHES="write read lat" \
  SIZES="4096 65536 1048576 16777216" REPEATS=3 EFA_OPTS="--footprint 4K" bash scripts/compare-fabtests.sh 2>&1 | grep -v '^+ ' | tail -25
echo "#### parity, old binary (before), 1 GPU (t=${SECONDS}s)"
EFABENCH=$S/efabench-old OUTDIR=$OUT TAG=parity-before-1gpu MEMS=cuda BENCHES="write read" \
  SIZES="4096 65536 1048576 16777216" REPEATS=1 EFA_OPTS="--footprint 4K" bash scripts/compare-fabtests.sh 2>&1 | grep -v '^+ ' | tail -15
echo "#### parity, new binary, 2 GPUs (t=${SECONDS}s)"
EFABENCH=$S/efabench OUTDIR=$OUT TAG=parity-syncmemops-2gpu MEMS=cuda BENCHES="write lat" GPU=0 PEER_GPU=1 \
  SIZES="4096 65536 1048576 16777216" REPEATS=3 EFA_OPTS="--footprint 4K" bash scripts/compare-fabtests.sh 2>&1 | grep -v '^+ ' | tail -15
echo "#### done t=${SECONDS}s"
