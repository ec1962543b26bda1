#!/usr/bin/env python3
"""efabench alltoall against nccl-tests alltoall_perf on the same GPUs, and the ipc --nvbw cells.

    scripts/two_gpu_summary.py WORKDIR [--nccl-jsonl OUT.jsonl] [--ipc IPC.jsonl]

WORKDIR holds the rounds of scripts/two-gpu.sh: `alltoall-efabench-rN.jsonl` (efabench records)
and `alltoall-nccl-rN.log` (alltoall_perf's console output). For every size: the median busbw of
each tool over the rounds (GB/s = 10^9 B/s) and the median over rounds of the per-round ratio
efabench / nccl-tests (each round ran both, one after the other). nccl-tests' busbw is its
out-of-place column; efabench's is `busbw_gbps` / 8. Both define size as one rank's whole send
buffer and busbw = algbw x (n-1)/n.

--nccl-jsonl writes the parsed nccl-tests rows (one JSON object per round and size);
--ipc prints the `ipc --nvbw` cells at each test's largest size."""
import glob
import json
import os
import re
import statistics
import sys
from collections import defaultdict


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def round_of(path):
    m = re.search(r"-r(\d+)\.", os.path.basename(path))
    return int(m.group(1)) if m else 0


def parse_nccl(text):
    """Rows of an nccl-tests table: size, count, type, redop, root, then out-of-place time,
    algbw, busbw, #wrong (left-anchored: optional columns only follow)."""
    rows = []
    for line in text.splitlines():
        f = line.split()
        if len(f) < 9 or line.lstrip().startswith("#") or not f[0].isdigit():
            continue
        try:
            rows.append(
                {
                    "size_bytes": int(f[0]),
                    "time_us": float(f[5]),
                    "algbw_GBps": float(f[6]),
                    "busbw_GBps": float(f[7]),
                    "wrong": f[8],
                }
            )
        except ValueError:
            continue
    return rows


def efabench_rows(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if r.get("bench") != "alltoall" or r.get("busbw_gbps") is None:
            continue
        out[r["size_bytes"]] = (r["busbw_gbps"] / 8.0, r.get("errors", 0))
    return out


def alltoall(work, nccl_jsonl):
    efa = {round_of(p): efabench_rows(p) for p in glob.glob(os.path.join(work, "alltoall-efabench-r*.jsonl"))}
    nccl = {}
    dump = []
    for p in glob.glob(os.path.join(work, "alltoall-nccl-r*.log")):
        r = round_of(p)
        rows = parse_nccl(open(p, errors="replace").read())
        nccl[r] = {x["size_bytes"]: x for x in rows}
        for x in rows:
            dump.append(dict(x, tool="nccl-tests alltoall_perf -g 2", round=r))
    if nccl_jsonl:
        with open(nccl_jsonl, "w") as f:
            for x in sorted(dump, key=lambda x: (x["round"], x["size_bytes"])):
                f.write(json.dumps(x) + "\n")
    sizes = sorted({s for v in efa.values() for s in v} | {s for v in nccl.values() for s in v})
    print("# alltoall on 2 GPUs: efabench (-p shm --mem cuda, one rank per GPU) vs nccl-tests alltoall_perf -g 2")
    print(f"# rounds: efabench {sorted(efa)}, nccl-tests {sorted(nccl)}; busbw in GB/s (10^9 B/s), medians over rounds")
    print(f"{'size':>6} {'efabench':>9} {'nccl':>9} {'ratio':>7} {'rounds':>6} {'errors':>6}  per-round ratios")
    for s in sizes:
        e = [efa[r][s][0] for r in sorted(efa) if s in efa[r]]
        n = [nccl[r][s]["busbw_GBps"] for r in sorted(nccl) if s in nccl[r]]
        errs = sum(efa[r][s][1] for r in efa if s in efa[r])
        ratios = [
            efa[r][s][0] / nccl[r][s]["busbw_GBps"]
            for r in sorted(efa)
            if s in efa[r] and r in nccl and s in nccl[r] and nccl[r][s]["busbw_GBps"] > 0
        ]
        med = lambda v: f"{statistics.median(v):.2f}" if v else "-"
        ratio = f"{statistics.median(ratios):.3f}" if ratios else "-"
        per = " ".join(f"{x:.3f}" for x in ratios)
        print(f"{human(s):>6} {med(e):>9} {med(n):>9} {ratio:>7} {len(ratios):>6} {errs:>6}  {per}")


def ipc(path):
    recs = [json.loads(l) for l in open(path) if l.strip()]
    nv = [r for r in recs if r.get("suite") == "nvbandwidth"]
    if not nv:
        return
    print("# ipc --nvbw at each test's largest size: GB/s (latency: ns per load); errors")
    biggest = defaultdict(int)
    for r in nv:
        biggest[(r["variant"], r["world"])] = max(biggest[(r["variant"], r["world"])], r["size_bytes"])
    for r in nv:
        if r["size_bytes"] != biggest[(r["variant"], r["world"])]:
            continue
        v = f"{r['lat_ns']:.0f} ns" if "lat_ns" in r else f"{r['bw_GBps']:.1f} GB/s"
        parts = ""
        if "bw1_GBps" in r:
            parts = f" ({r['parts'][0]} {r['bw1_GBps']:.1f} + {r['parts'][1]} {r['bw2_GBps']:.1f})"
        print(f"{r['variant']:<48} world {r['world']} {r['row']}->{r['col']} {human(r['size_bytes']):>5}: {v}{parts}  errors {r['errors']}")


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    work = argv[0]
    nccl_jsonl = None
    ipc_path = None
    rest = argv[1:]
    while rest:
        opt = rest.pop(0)
        if opt == "--nccl-jsonl" and rest:
            nccl_jsonl = rest.pop(0)
        elif opt == "--ipc" and rest:
            ipc_path = rest.pop(0)
        else:
            print(f"unknown option {opt}", file=sys.stderr)
            return 2
    alltoall(work, nccl_jsonl)
    if ipc_path and os.path.exists(ipc_path):
        print()
        ipc(ipc_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
