#!/usr/bin/env python3
"""How routing skew moves `efabench ep`: the same job under several `--routing` choices, in
alternating rounds (every routing once per round, so slow phases of a shared machine hit them
alike), and the median over rounds of each phase's p50 (the slowest rank per iteration).

Usage: scripts/ep-skew.py [--efabench target/release/efabench] [--ranks 4] [--rounds 5]
           [--routing uniform,zipf:1.2,hot:0:0.5] OUT [-- EP ARGS...]
       scripts/ep-skew.py --summarize OUT   (the table again from OUT/records.jsonl, e.g. of
                                            rounds cut short; ratios against the first routing)

EP ARGS default to `-p shm --initiator cpu --tokens 128 --hidden 2048 --experts 32 --topk 4
-n 50 -w 5`. OUT gets every round's records (records.jsonl), the table (summary.txt) and
summary.json. Exit status 2 on bad arguments, 1 when a run fails or reports errors.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

DEFAULT_EP = ["-p", "shm", "--initiator", "cpu", "--tokens", "128", "--hidden", "2048",
              "--experts", "32", "--topk", "4", "-n", "50", "-w", "5"]


def run(efabench, ranks, routing, ep_args, out_jsonl):
    cmd = [efabench, "launch", "-n", str(ranks), "--", "ep"] + ep_args + [
        "--routing", routing, "-o", out_jsonl, "--format", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"ep-skew: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-400:]}")


def summarize(out, routings, p50, imbalance, errors, header):
    variants = sorted({v for r in routings for v in p50[r]})
    lines = [header + ": median over rounds (the lower middle one for an even count) of the p50 (us) of the slowest rank per iteration; "
             f"ratio = against {routings[0]}"]
    head = f"{'routing':<16}{'ranks max/mean':>15}" + "".join(f"{v:>28}" for v in variants)
    lines.append(head)
    summary = {"header": header, "rows": []}
    base = {v: statistics.median_low(p50[routings[0]][v]) for v in variants if v in p50[routings[0]]}
    for r in routings:
        row = {"routing": r, "rank_imbalance": imbalance.get(r), "p50_us": {}, "ratio": {}}
        cells = ""
        for v in variants:
            if v not in p50[r]:
                cells += f"{'-':>28}"
                continue
            m = statistics.median_low(p50[r][v])
            ratio = m / base[v] if base.get(v) else None
            row["p50_us"][v] = m
            row["ratio"][v] = ratio
            cells += f"{m:>18.1f} ({ratio:.2f}x)" if ratio else f"{m:>28.1f}"
        imb = imbalance.get(r)
        lines.append(f"{r:<16}{(f'{imb:.2f}' if imb else '-'):>15}{cells}")
        summary["rows"].append(row)
    lines.append(f"# payload errors: {errors}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


def read(records):
    """p50[routing][variant] = [per round], imbalance[routing], errors, routings in order"""
    p50, imbalance, errors, routings = {}, {}, 0, []
    with open(records) as f:
        for line in f:
            rec = json.loads(line)
            r = rec.get("routing", "?")
            if r not in routings:
                routings.append(r)
            p50.setdefault(r, {}).setdefault(rec["variant"], []).append(rec["lat_us"]["p50"])
            imbalance[r] = rec.get("rank_imbalance", imbalance.get(r))
            errors += rec.get("errors", 0)
    return p50, imbalance, errors, routings


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("--efabench", default="target/release/efabench")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--routing", default="uniform,zipf:1.2,hot:0:0.5")
    ap.add_argument("--summarize", action="store_true")
    ap.add_argument("out")
    ap.add_argument("ep", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    if a.summarize:
        p50, imbalance, errors, routings = read(os.path.join(a.out, "records.jsonl"))
        if not routings:
            print(f"ep-skew: no records in {a.out}/records.jsonl", file=sys.stderr)
            sys.exit(2)
        summarize(a.out, routings, p50, imbalance, errors, f"# ep records of {a.out}")
        sys.exit(1 if errors else 0)
    ep_args = [x for x in a.ep if x != "--"] or DEFAULT_EP
    routings = [r for r in a.routing.split(",") if r]
    if a.ranks < 2 or a.rounds < 1 or not routings:
        print("ep-skew: need --ranks 2 or more, --rounds 1 or more and a --routing list", file=sys.stderr)
        sys.exit(2)
    os.makedirs(a.out, exist_ok=True)
    records = os.path.join(a.out, "records.jsonl")
    open(records, "w").close()
    for rnd in range(a.rounds):
        for r in routings:
            tmp = os.path.join(a.out, ".round.jsonl")
            if os.path.exists(tmp):
                os.remove(tmp)
            run(a.efabench, a.ranks, r, ep_args, tmp)
            with open(tmp) as f, open(records, "a") as out:
                for line in f:
                    rec = json.loads(line)
                    rec["round"] = rnd
                    out.write(json.dumps(rec) + "\n")
            os.remove(tmp)
    p50, imbalance, errors, _ = read(records)
    header = f"# ep {' '.join(ep_args)}, {a.ranks} ranks, {a.rounds} alternating rounds"
    summarize(a.out, routings, p50, imbalance, errors, header)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
