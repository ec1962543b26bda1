#!/bin/bash
# cg.sh BIN LOOP RANK ITERS [PIN]: one rank under callgrind (only the timed loop collected),
# the other native; PIN=1 puts both on CPU 0 (many empty polls).
B=$1; L=$2; R=$3; N=$4; PIN=${5:-0}
port=$((30000 + RANDOM % 20000)); O=${CG_DIR:-/tmp}/lean-$L-r$R-$N-p$PIN
a="sendrecv -p shm -b 8 -e 8 -n $N -w 100 --variant pingpong --no-check --loop $L --timeout 300 --world 2 --rdzv 127.0.0.1:$port"
t=""; [ "$PIN" = 1 ] && t="taskset -c 0"
export EFABENCH_JOB_TOKEN=cg$port
for r in 0 1; do
  if [ $r = $R ]; then $t valgrind --tool=callgrind --toggle-collect='*Protocol for M>::measure*' --callgrind-out-file=$O.out $B $a --rank $r > $O.log 2>&1 &
  else $t $B $a --rank $r > /dev/null 2>&1 & fi
  sleep 0.5
done
wait
python3 "$(dirname "$0")"/own.py $O.out $((N + 100))
