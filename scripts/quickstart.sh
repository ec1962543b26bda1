#!/usr/bin/env bash
# Install what is missing, build efabench, and run the main job on this host: a two-rank
# point-to-point benchmark over loopback with the best provider available (efa, else shm, else
# tcp), payloads verified, records appended to results/quickstart.jsonl.
# Extra arguments go to the benchmark, e.g. scripts/quickstart.sh -e 4M --variant stream
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release -q -p efabench
mkdir -p results
exec target/release/efabench launch -n 2 -- sendrecv -o results/quickstart.jsonl "$@"
