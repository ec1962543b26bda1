#!/usr/bin/env python3
"""How often does `efabench compare` cry wolf, and does it see a real slowdown?

Runs PAIRS pairs of identical sweeps back to back on this machine (run A, then run B, the same
binary and command), then counts, with the default tolerance and confidence:

  false regressions   `compare A B` exit 1 (nothing changed between A and B)
  detections          `compare A B'` exit 1, where B' is B with a planted 30% slowdown: every
                      latency figure (and block median) x 1.3, every bandwidth / 1.3

once with one run per side (A_i against B_i) and once with three runs per side (each three
pairs in turn: A_i..A_i+2 against B_i..B_i+2, `--baseline` three times), and writes summary.json,
summary.txt and the runs (a.jsonl, b.jsonl: the A and B runs appended in order) to OUT, again
after every pair.

Usage: scripts/compare-noise.py [--pairs 20] [--efabench target/release/efabench] OUT
       [-- BENCH ARGS...]   (default: sendrecv -b 8 -e 64K)
       scripts/compare-noise.py --rejudge [--group K] [--efabench ...] OUT
                            (judge the runs kept in OUT again, with this efabench's compare,
                            grouping K consecutive runs per side instead of three; the summary
                            goes to OUT/rejudge-K.txt and .json, the measured one is kept)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

BLOCKS = "lat_p50_blocks_us"


def run_sweep(efabench, bench_args, path):
    cmd = [efabench, "launch", "-n", "2", "--"] + bench_args + ["-o", path]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def slowed(src, dst, factor=1.3):
    with open(src) as f, open(dst, "w") as out:
        for line in f:
            r = json.loads(line)
            for k in r["lat_us"]:
                r["lat_us"][k] *= factor
            r["bw_gbps"] /= factor
            if isinstance(r.get(BLOCKS), list):
                r[BLOCKS] = [x * factor for x in r[BLOCKS]]
            out.write(json.dumps(r) + "\n")


def compare(efabench, base, cand):
    """(exit status, regressions, matched points, whole sweep judged slower)"""
    args = [efabench, "compare", "--format", "json"]
    for b in base:
        args += ["--baseline", b]
    p = subprocess.run(args + cand, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        sys.exit(f"compare failed ({p.returncode}): {p.stderr.strip()}")
    j = json.loads(p.stdout)
    return p.returncode, j["regressions"], len(j["rows"]), bool(j.get("shifted"))


def main():
    argv = sys.argv[1:]
    bench = ["sendrecv", "-b", "8", "-e", "64K"]
    if "--" in argv:
        i = argv.index("--")
        argv, bench = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--efabench", default="target/release/efabench")
    ap.add_argument("--rejudge", action="store_true")
    ap.add_argument("--group", type=int, default=3)
    ap.add_argument("out")
    a = ap.parse_args(argv)
    if a.rejudge:
        return rejudge(a)
    if a.pairs < 1:
        sys.exit("--pairs must be at least 1")
    os.makedirs(a.out, exist_ok=True)
    single, triple, runs = [], [], []

    def one(base, cand, slow):
        return judge(a.efabench, base, cand, slow)

    with tempfile.TemporaryDirectory(prefix="efabench-compare-noise-") as tmp:
        for i in range(a.pairs):
            pa, pb = os.path.join(tmp, f"a{i}.jsonl"), os.path.join(tmp, f"b{i}.jsonl")
            run_sweep(a.efabench, bench, pa)
            run_sweep(a.efabench, bench, pb)
            ps = os.path.join(tmp, f"b{i}-slow.jsonl")
            slowed(pb, ps)
            runs.append((pa, pb, ps))
            single.append(one([pa], [pb], [ps]))
            if len(runs) % 3 == 0:
                last = runs[-3:]
                triple.append(one([r[0] for r in last], [r[1] for r in last], [r[2] for r in last]))
            for side, idx in (("a.jsonl", 0), ("b.jsonl", 1)):
                with open(os.path.join(a.out, side), "w") as out:
                    for r in runs:
                        with open(r[idx]) as f:
                            out.write(f.read())
            write_summary(a.out, bench, len(runs), single, triple)
            print(f"pair {i + 1}/{a.pairs} measured", file=sys.stderr)
    print(open(os.path.join(a.out, "summary.txt")).read(), end="")


def rejudge(a):
    with open(os.path.join(a.out, "summary.json")) as f:
        old = json.load(f)
    pairs, bench = old["pairs"], old["bench"]
    with tempfile.TemporaryDirectory(prefix="efabench-compare-noise-") as tmp:
        split = {}
        for side in ("a", "b"):
            with open(os.path.join(a.out, f"{side}.jsonl")) as f:
                lines = f.readlines()
            if len(lines) % pairs:
                sys.exit(f"{side}.jsonl holds {len(lines)} records, not a multiple of {pairs} runs")
            n = len(lines) // pairs
            split[side] = []
            for i in range(pairs):
                path = os.path.join(tmp, f"{side}{i}.jsonl")
                with open(path, "w") as out:
                    out.writelines(lines[i * n:(i + 1) * n])
                split[side].append(path)
        runs = []
        for i in range(pairs):
            ps = os.path.join(tmp, f"b{i}-slow.jsonl")
            slowed(split["b"][i], ps)
            runs.append((split["a"][i], split["b"][i], ps))
        single = [judge(a.efabench, [r[0]], [r[1]], [r[2]]) for r in runs]
        k = a.group
        if k < 2:
            sys.exit("--group must be at least 2")
        grouped = [judge(a.efabench, [r[0] for r in runs[i:i + k]], [r[1] for r in runs[i:i + k]],
                         [r[2] for r in runs[i:i + k]]) for i in range(0, pairs - k + 1, k)]
        write_summary(a.out, bench, pairs, single, grouped, k, f"rejudge-{k}")
    print(open(os.path.join(a.out, f"rejudge-{k}.txt")).read(), end="")


def judge(efabench, base, cand, slow):
    rc, reg, rows, shift = compare(efabench, base, cand)
    rc_s, reg_s, _, shift_s = compare(efabench, base, slow)
    return {"points": rows, "same_exit": rc, "same_regressions": reg, "same_shifted": shift,
            "slowed_exit": rc_s, "slowed_regressions": reg_s, "slowed_shifted": shift_s}


def tally(rows):
    return {
        "comparisons": len(rows),
        "false_regressions": sum(r["same_exit"] == 1 for r in rows),
        "false_regression_points": sum(r["same_regressions"] for r in rows),
        "detected": sum(r["slowed_exit"] == 1 for r in rows),
        "detected_points": sum(r["slowed_regressions"] for r in rows),
        "false_shifts": sum(r.get("same_shifted", False) for r in rows),
        "detected_shifts": sum(r.get("slowed_shifted", False) for r in rows),
        "points_per_comparison": rows[0]["points"] if rows else 0,
        "each": rows,
    }


def write_summary(out_dir, bench, pairs, single, grouped, k=3, name="summary"):
    """Rewritten after every pair, so an interrupted run keeps what it measured."""
    many = "three_runs_per_side" if k == 3 else f"{k}_runs_per_side"
    summary = {"bench": bench, "pairs": pairs, "one_run_per_side": tally(single),
               many: tally(grouped)}
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    lines = [f"# {' '.join(bench)}: {pairs} pairs of runs, default tolerance (5%) and confidence (95%)"]
    for side in ("one_run_per_side", many):
        t = summary[side]
        lines.append(
            f"{side}: {t['comparisons']} comparisons of {t['points_per_comparison']} points; "
            f"false regressions {t['false_regressions']}/{t['comparisons']} "
            f"({t['false_regression_points']} points, whole sweep {t['false_shifts']}); "
            f"planted 30% slowdown detected {t['detected']}/{t['comparisons']} "
            f"({t['detected_points']} points, whole sweep {t['detected_shifts']})")
    with open(os.path.join(out_dir, f"{name}.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
