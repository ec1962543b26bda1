#!/usr/bin/env bash
# alternating: fi_pingpong, and efabench variants (each a quoted "BIN ARGS"), shm, 8 B; prints medians
P=${P:-shm}; N=${N:-9}; port=23000
declare -a V=("$@"); declare -A R
fab() { port=$((port+1)); fi_pingpong -p $P -e rdm -I 10000 -S 8 -B $port >/dev/null 2>&1 & s=$!; sleep 0.3; fi_pingpong -p $P -e rdm -I 10000 -S 8 -P $port 127.0.0.1 2>/dev/null | awk 'NR==2 {print $7}'; kill $s 2>/dev/null; wait $s 2>/dev/null; }
for r in $(seq $N); do
  R[fab]+=" $(fab)"
  for i in "${!V[@]}"; do
    set -- ${V[$i]}; b=$1; shift
    R[$i]+=" $($b launch -n 2 -- sendrecv -p $P -b 8 -e 8 -n 10000 --variant pingpong --format json -o /dev/null "$@" 2>/dev/null | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["lat_us"]["mean"])')"
  done
done
med() { python3 -c "import sys,statistics;v=[float(x) for x in sys.argv[1:]];print('%.3f'%statistics.median(v))" $1; }
f=$(med "${R[fab]}"); echo "fi_pingpong $f  (${R[fab]})"
for i in "${!V[@]}"; do m=$(med "${R[$i]}"); echo "${V[$i]}: $m ratio $(python3 -c "print('%.3f'%($m/$f))")  (${R[$i]})"; done
