#!/bin/bash
# 8-B latency A/B (clock reads out of the wait loop) against fi_rdm_pingpong, host memory, shm;
# the shared-GPU note with and without MPS.
set -u
R=$(pwd); S=$R/.dev/s1; W=/tmp/o5; mkdir -p $W
LF=$R/.dev/lf-cuda
export EFABENCH_LIBFABRIC=$LF/lib/libfabric.so.1
exec > >(tee -a $OUT/log.txt) 2>&1
date -u; nvidia-smi -L; $S/efabench --version; $S/efabench-new --version
eff() { $1 launch -n 2 -- sendrecv -p shm -b 8 -e 8 -n 20000 --variant pingpong --format json ${2:-} 2>/dev/null | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["lat_us"]["mean"])'; }
ft() { local port=$((30000 + RANDOM % 20000))
  ( export LD_LIBRARY_PATH=$LF/lib:/usr/local/cuda/lib64 FI_PROVIDER_PATH=$LF/lib/libfabric
    $LF/bin/fi_rdm_pingpong -p shm -e rdm -S 8 -I 20000 -m -E=$port >/dev/null 2>&1 &
    sleep 0.4
    $LF/bin/fi_rdm_pingpong -p shm -e rdm -S 8 -I 20000 -m -E=$port 127.0.0.1 2>/dev/null | python3 -c '
import re,sys
for l in sys.stdin:
    if l.startswith("- {"):
        print(dict(re.findall(r"([\w/]+): ([-\d.e+]+)", l))["usec/xfer"])'
    wait ) ; }
for i in 1 2 3 4 5 6 7 8 9; do
  echo "old-nocheck $(eff $S/efabench --no-check)"
  echo "new-nocheck $(eff $S/efabench-new --no-check)"
  echo "fabtests $(ft)"
  echo "old-check $(eff $S/efabench)"
  echo "new-check $(eff $S/efabench-new)"
done | tee $W/lat-ab.txt
exit 0
echo "#### shared-GPU note (t=${SECONDS}s)"
note() { timeout 60 $S/efabench-new launch -n 2 -- proxy -p shm --mem cuda --gpu $1 -b 64K -e 64K -n 3 -w 1 --modes cpu,nbi 2>&1 | grep -E "^# note|nbi/cpu|error" ; echo "rc=$?"; }
echo "-- one GPU, no MPS"; note 0
echo "-- two GPUs"; note auto
export CUDA_MPS_PIPE_DIRECTORY=/tmp/efabench-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/efabench-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && { echo "-- one GPU, MPS"; note 0; echo quit | nvidia-cuda-mps-control; }
echo "#### done t=${SECONDS}s"
