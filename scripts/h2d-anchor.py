#!/usr/bin/env python3
"""Host<->GPU copies timed with CUDA events by PyTorch, next to efabench h2d's figures.

    python3 scripts/h2d-anchor.py --records results/h2d-....jsonl [--tolerance 0.05]
    python3 scripts/h2d-anchor.py --sizes 4M,64M --gpus 0,1          (no comparison)

For every GPU and size of the records' copy-engine "each GPU, near placement" points (or of
--sizes/--gpus), it pins host memory with the process bound to the GPU's NUMA node, copies it
with tensor.copy_(non_blocking=True) on a stream (host->device, device->host, and both at once
on two streams), -n copies between two CUDA events after 2 untimed ones, 3 samples, median, and
prints GB/s (10^9 bytes/s) for each, then efabench's figure and the ratio. Exit 1 when a ratio
is off by more than --tolerance (default 5%).
"""
import argparse
import json
import os
import statistics
import sys

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(s):
    s = s.strip().upper()
    return int(s[:-1]) * UNITS[s[-1]] if s[-1] in UNITS else int(s)


def gpu_cpus(torch, gpu):
    """CPUs of the GPU's NUMA node (all CPUs when sysfs gives none)."""
    p = torch.cuda.get_device_properties(gpu)
    node = None
    try:
        bus = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
        with open(f"/sys/bus/pci/devices/{bus}/numa_node") as f:
            node = int(f.read())
    except (AttributeError, OSError, ValueError):
        node = None
    if node is None or node < 0:
        return None
    with open(f"/sys/devices/system/node/node{node}/cpulist") as f:
        cpus = set()
        for part in f.read().strip().split(","):
            a, _, b = part.partition("-")
            cpus.update(range(int(a), int(b or a) + 1))
        return cpus


def measure(torch, gpu, nbytes, iters, samples=3):
    torch.cuda.set_device(gpu)
    cpus = gpu_cpus(torch, gpu)
    saved = os.sched_getaffinity(0)
    if cpus:
        os.sched_setaffinity(0, cpus)
    try:
        host_src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        host_dst = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        host_src.fill_(0x5A)
        host_dst.fill_(0)
    finally:
        os.sched_setaffinity(0, saved)
    dev_in = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{gpu}")
    dev_out = torch.full((nbytes,), 0xA5, dtype=torch.uint8, device=f"cuda:{gpu}")
    up, down = torch.cuda.Stream(gpu), torch.cuda.Stream(gpu)

    def timed(which):
        res = {}
        streams = {"h2d": up, "d2h": down}
        todo = ["h2d", "d2h"] if which == "both" else [which]
        ev = {d: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for d in todo}
        for d in todo:
            with torch.cuda.stream(streams[d]):
                for _ in range(2):
                    (dev_in.copy_(host_src, non_blocking=True) if d == "h2d"
                     else host_dst.copy_(dev_out, non_blocking=True))
        for d in todo:
            ev[d][0].record(streams[d])
        for _ in range(iters):
            for d in todo:
                with torch.cuda.stream(streams[d]):
                    (dev_in.copy_(host_src, non_blocking=True) if d == "h2d"
                     else host_dst.copy_(dev_out, non_blocking=True))
        for d in todo:
            ev[d][1].record(streams[d])
        for d in todo:
            ev[d][1].synchronize()
            res[d] = nbytes * iters / (ev[d][0].elapsed_time(ev[d][1]) * 1e6)
        return res

    out = {}
    for which in ("h2d", "d2h", "both"):
        runs = [timed(which) for _ in range(samples)]
        out[which] = {d: statistics.median(r[d] for r in runs) for d in runs[0]}
    # The copies really moved the bytes.
    torch.cuda.synchronize()
    assert bool((dev_in == 0x5A).all()) and bool((host_dst == 0xA5).all()), "copy verification failed"
    return out


def efabench_figures(path):
    """(gpu, size, direction) -> GB/s of copy-engine, each-GPU, near-placement records."""
    fig, iters = {}, None
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("bench") != "h2d" or r.get("engine") != "copy-engine" or r.get("scope") != "each" \
                    or r.get("placement") != "near":
                continue
            g = r["per_gpu"][0]
            iters = r.get("iters", iters)
            d = r["direction"]
            if d == "both":
                fig[(g["gpu"], r["size_bytes"], "both")] = (g.get("h2d_GBps") or 0) + (g.get("d2h_GBps") or 0)
            else:
                fig[(g["gpu"], r["size_bytes"], d)] = g.get(f"{d}_GBps")
    return fig, iters


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", help="efabench h2d JSONL records to compare with")
    ap.add_argument("--sizes", default="4M,64M")
    ap.add_argument("--gpus", default=None, help="GPU indices (default: those of the records, else all)")
    ap.add_argument("-n", "--iters", type=int, default=None, help="copies per sample (default: the records', else 8)")
    ap.add_argument("--tolerance", type=float, default=0.05)
    a = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("h2d-anchor: torch sees no CUDA device", file=sys.stderr)
        return 2
    fig, rec_iters = efabench_figures(a.records) if a.records else ({}, None)
    iters = a.iters or rec_iters or 8
    if fig:
        cases = sorted({(g, s) for g, s, _ in fig})
    else:
        gpus = [int(x) for x in a.gpus.split(",")] if a.gpus else list(range(torch.cuda.device_count()))
        cases = [(g, size(s)) for g in gpus for s in a.sizes.split(",")]
    worst = 0.0
    print(f"{'gpu':>3} {'size':>10} {'dir':>5} {'torch GB/s':>11} {'efabench GB/s':>14} {'ratio':>6}")
    for g, s in cases:
        m = measure(torch, g, s, iters)
        for d in ("h2d", "d2h", "both"):
            t = sum(m[d].values())
            e = fig.get((g, s, d))
            ratio = e / t if e and t else None
            if ratio:
                worst = max(worst, abs(ratio - 1))
            shown = "-" if e is None else f"{e:.2f}"
            print(f"{g:>3} {s:>10} {d:>5} {t:>11.2f} {shown:>14} "
                  f"{'' if ratio is None else f'{ratio:.3f}':>6}")
    if fig:
        print(f"largest difference {worst * 100:.1f}% (tolerance {a.tolerance * 100:.0f}%)")
        return 1 if worst > a.tolerance else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
