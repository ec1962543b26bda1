#!/usr/bin/env python3
"""Markdown table of an `efabench ipc` JSONL file: GB/s per variant at a few sizes, each
variant's peak and the smallest size reaching 90% of it, and the best kernel / copy-engine ratio
at >= 64 MiB. Usage: scripts/ipc_table.py results/<machine>/ipc/<run>/ipc-<machine>-<date>.jsonl"""
import json, sys

recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
sweep = [r for r in recs if not r.get("matrix")]
cols = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
def human(b):
    for s, u in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if b >= s and b % s == 0:
            return f"{b // s}{u}"
    return str(b)
variants = []
for r in sweep:
    if r["variant"] not in variants:
        variants.append(r["variant"])
print("| variant | " + " | ".join(human(c) for c in cols) + " | peak GB/s | 90% of peak from | errors |")
print("|---|" + "---:|" * (len(cols) + 3))
for v in variants:
    pts = {r["size_bytes"]: r["bw_gbps"] / 8 for r in sweep if r["variant"] == v}
    errs = sum(r["errors"] for r in sweep if r["variant"] == v)
    peak = max(pts.values())
    s90 = min(s for s, b in pts.items() if b >= 0.9 * peak)
    cells = [f"{pts[c]:.1f}" if c in pts else "-" for c in cols]
    print(f"| {v} | " + " | ".join(cells) + f" | {peak:.1f} | {human(s90)} | {errs} |")
big = [r for r in sweep if r["size_bytes"] >= 64 << 20]
ce = max((r["bw_gbps"] / 8 for r in big if r["variant"] == "copy-engine"), default=0)
best = max((r for r in big if r["variant"] != "copy-engine"), key=lambda r: r["bw_gbps"], default=None)
if best and ce:
    print(f"\nBest kernel at >= 64 MiB: **{best['variant']}** {best['bw_gbps']/8:.1f} GB/s at "
          f"{human(best['size_bytes'])} = **{best['bw_gbps']/8/ce:.3f} x** copy-engine ({ce:.1f} GB/s).")
link = next((r["link_gbps"] for r in sweep if r.get("link_gbps")), None)
if link:
    print(f"link_gbps (NVML: links x speed x 8) = {link:.0f} Gbps = {link/8:.1f} GB/s per direction.")
