#!/usr/bin/env python3
"""Check that the documentation's paths resolve.

In README.md, docs/**/*.md, results/CURRENT.md and crates/*/README.md:
  - every relative Markdown link `](path)` must exist, relative to the file that holds it;
  - every backticked repository path (`results/...`, `docs/...`, `scripts/...`, `crates/...`,
    `deploy/...`, `fixtures/...`) must exist relative to the repository root, braces and `*`
    expanded as the shell would.

Usage: scripts/doc-links.py            # exit 1 and list the paths that do not resolve
       scripts/doc-links.py --list     # print every path checked, one a line (to diff two trees)
"""
import glob
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LINK = re.compile(r"\]\(([^)\s]+)\)")
TICKED = re.compile(r"`((?:results|docs|scripts|crates|deploy|fixtures)/[^`\s<>]*)`")
# Named on purpose although absent: a file a script writes, a file kept in git history only.
ABSENT = {"results/quickstart.jsonl", "results/parity-experiment.patch"}


def files():
    out = [os.path.join(ROOT, "README.md")]
    out += glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
    out += glob.glob(os.path.join(ROOT, "crates", "*", "README.md"))
    current = os.path.join(ROOT, "results", "CURRENT.md")
    if os.path.exists(current):
        out.append(current)
    return sorted(out)


def braces(path):
    """Expand the first {a,b} of a path, recursively, as the shell does."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    out = []
    for alt in m.group(1).split(","):
        out += braces(path[: m.start()] + alt + path[m.end():])
    return out


def exists(path):
    if "*" in path or "?" in path:
        return bool(glob.glob(path))
    return os.path.exists(path)


def checked():
    """(file, path as written, resolved path) for every path the docs name."""
    for f in files():
        text = open(f, encoding="utf-8").read()
        # Fenced blocks hold command lines and output, not references.
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        base = os.path.dirname(f)
        for m in LINK.finditer(text):
            target = m.group(1).split("#", 1)[0]
            if not target or re.match(r"[a-z]+:", target):
                continue
            yield f, m.group(1), os.path.normpath(os.path.join(base, target))
        for m in TICKED.finditer(text):
            raw = m.group(1).rstrip(".,;:")
            if raw in ABSENT:
                continue
            for p in braces(raw):
                yield f, raw, os.path.normpath(os.path.join(ROOT, p))


def main():
    bad = []
    seen = set()
    for f, raw, path in checked():
        rel = os.path.relpath(path, ROOT)
        seen.add(rel)
        if not exists(path):
            bad.append(f"{os.path.relpath(f, ROOT)}: {raw}")
    if "--list" in sys.argv[1:]:
        print("\n".join(sorted(seen)))
        return
    if bad:
        print("paths in the docs that do not resolve:", *bad, sep="\n  ")
        sys.exit(1)


if __name__ == "__main__":
    main()
