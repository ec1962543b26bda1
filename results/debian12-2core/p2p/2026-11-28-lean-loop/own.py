#!/usr/bin/env python3
"""own.py FILE.cg ITERATIONS: efabench's own instructions per iteration of the timed loop of the
rank callgrind ran (started with --toggle-collect='*time_loop*', so only the loop is counted).

own = everything collected - libfabric called from efabench's code - the EAGAIN retry loops
(PingPong::again, Rail::post_lowered: how often the provider answers EAGAIN depends on the peer's
timing under valgrind, not on the code). Printed with the CQ reads (the most-called libfabric
entry) so that two runs with different numbers of empty polls give the cost of one empty poll
and the per-iteration cost without them."""
import re, subprocess, sys
out = subprocess.run(["callgrind_annotate", "--tree=calling", "--inclusive=yes", sys.argv[1]],
                     capture_output=True, text=True).stdout
iters = int(sys.argv[2])
def n(s): return int(s.split()[0].replace(",", ""))
total = int(re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", out).group(1).replace(",", ""))
RETRY = ("PingPong::again", "post_lowered")
retry = lib = 0
cq = {}
for b in out.split("\n\n"):
    lines = [l for l in b.splitlines() if l.strip()]
    star = next((l for l in lines if re.match(r"^\s*[\d,]+ .*\*  ", l)), None)
    if not star or "libfabric.so" in star or "libc.so" in star:
        continue
    if any(r in star for r in RETRY):
        if "[" in star and "efabench]" in star:
            retry += n(star)
        continue
    for l in lines:
        m = re.search(r">\s+(\?\?\?:0x[0-9a-f]+) \(([\d,]+)x\) \[.*libfabric", l)
        if m:
            lib += n(l)
            cq[m.group(1)] = cq.get(m.group(1), 0) + int(m.group(2).replace(",", ""))
own = total - retry - lib
reads = max(cq.values()) if cq else 0
print(f"{sys.argv[1]}: collected {total}, retry loops {retry}, libfabric {lib}, own {own}; "
      f"iterations {iters}, CQ reads {reads} ({reads/iters:.2f} per iteration); "
      f"own per iteration {own/iters:.1f}")
