#!/usr/bin/env python3
"""Medians of `efabench proxy` records: nbi/cpu and blocking/cpu per configuration and size, and
the per-put latency breakdown (p50, µs) of the small puts.

    scripts/proxy_summary.py results/proxy-run/*.jsonl

A configuration is a file name without its round suffix (`cuda-2gpu-r2.jsonl` -> `cuda-2gpu`);
each round is one run of every mode, so a ratio is taken within a run (cpu, blocking and nbi of
the same size measured minutes apart at most) and the median is over the rounds."""
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


def main(paths):
    # config -> size -> mode -> [bw per round]; config -> size -> mode -> [records]
    bw = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    ratios = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    recs = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    errors = defaultdict(int)
    for p in paths:
        stem = os.path.basename(p).rsplit(".", 1)[0]
        cfg = re.sub(r"-r\d+$", "", stem)
        run = defaultdict(dict)
        for line in open(p):
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if r.get("bench") != "proxy":
                continue
            errors[cfg] += r["errors"]
            run[r["size_bytes"]][r["variant"]] = r
            bw[cfg][r["size_bytes"]][r["variant"]].append(r["bw_gbps"])
            recs[cfg][r["size_bytes"]][r["variant"]].append(r)
        for size, modes in run.items():
            cpu = modes.get("cpu", {}).get("bw_gbps")
            if not cpu:
                continue
            for m in ("nbi", "blocking"):
                if m in modes:
                    ratios[cfg][size][m].append(modes[m]["bw_gbps"] / cpu)
    med = statistics.median
    for cfg in sorted(bw):
        rounds = max(len(v) for s in bw[cfg].values() for v in s.values())
        print(f"## {cfg} ({rounds} round(s), {errors[cfg]} verification errors)")
        print()
        print("| size | cpu GB/s | blocking GB/s | nbi GB/s | nbi/cpu | blocking/cpu | nbi/cpu per round |")
        print("|---:|---:|---:|---:|---:|---:|---|")
        for size in sorted(bw[cfg]):
            b = bw[cfg][size]
            g = lambda m: f"{med(b[m]) / 8:.3g}" if b.get(m) else "-"
            q = lambda m: f"{med(ratios[cfg][size][m]):.3f}" if ratios[cfg][size].get(m) else "-"
            each = " ".join(f"{x:.2f}" for x in ratios[cfg][size].get("nbi", []))
            print(f"| {human(size)} | {g('cpu')} | {g('blocking')} | {g('nbi')} | {q('nbi')} | {q('blocking')} | {each} |")
        print()
        small = [s for s in sorted(recs[cfg]) if s <= 8192]
        if small:
            stages = ["push_to_pop", "pop_to_post", "post_to_completion", "completion_to_quiet",
                      "push_to_quiet", "post_to_arrival"]
            print("Per-put breakdown, p50 µs (median over rounds):")
            print()
            print("| mode | size | puts/s (M) | " + " | ".join(stages) + " |")
            print("|---|---:|---:|" + "---:|" * len(stages))
            for mode in ("blocking", "nbi", "cpu"):
                for size in small:
                    rs = recs[cfg][size].get(mode, [])
                    if not rs:
                        continue
                    cells = []
                    for st in stages:
                        v = [r.get("stages", {}).get(st) for r in rs]
                        v = [x["p50_us"] for x in v if isinstance(x, dict)]
                        cells.append(f"{med(v):.2f}" if v else "-")
                    rate = med([r["msg_rate_mops"] for r in rs])
                    print(f"| {mode} | {human(size)} | {rate:.3f} | " + " | ".join(cells) + " |")
            print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: scripts/proxy_summary.py RECORDS.jsonl ...")
    main(sys.argv[1:])
