#!/bin/bash
# efabench proxy device sweep (issue 12), from the repo root, carrying .dev/proxy and .dev/lf-cuda.
set -u
R=$(pwd)
B=$R/.dev/proxy/efabench
export EFABENCH_LIBFABRIC=$R/.dev/lf-cuda/lib/libfabric.so.1
export EFABENCH_KERNEL_CACHE=0
exec > >(tee -a $OUT/log.txt) 2>&1
date -u; nvidia-smi -L; nproc; $B --version
run() { # tag, seconds, args...
  local tag=$1 t=$2; shift 2
  echo "######## $tag (t=${SECONDS}s): proxy -p shm $*"
  timeout $t $B launch -n 2 -- proxy -p shm "$@" -o $OUT/proxy-$tag.jsonl > $OUT/$tag.log 2>&1
  echo "## rc=$?"
  grep -v '^# [a-z]' $OUT/$tag.log | tail -n 90
}
run cuda 75 --mem cuda -b 8 -e 8M -f 2
run pinned 55 --mem pinned -b 8 -e 8M -f 4
run cuda-2rails 30 --mem cuda --rails 2 -b 1M -e 8M -f 2
cat $OUT/proxy-*.jsonl > $OUT/proxy.jsonl 2>/dev/null
echo "done t=${SECONDS}s"
