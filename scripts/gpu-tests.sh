#!/usr/bin/env bash
# GPU tests of efabench, for a machine with NVIDIA GPUs and a driver (CI has none: there the same
# tests print "skipped: no CUDA driver" and pass).
#
#   scripts/gpu-tests.sh                  build in release, run the GPU tests, and with 2+ GPUs
#                                         run `efabench ipc` and keep its records
#   BIN_DIR=.dev/bin scripts/gpu-tests.sh use prebuilt binaries instead of cargo: BIN_DIR/efabench
#                                         and every other executable in BIN_DIR as a test binary
#                                         of efabench-gpu (`cargo test --release -p efabench-gpu
#                                         --no-run` lists them: the unit tests, gpu, proxy, queue)
#   OUT=DIR                               where logs and records go (default: results/)
#   IPC_ARGS="-b 4K -e 1G"                extra options for the ipc run
#   H2D_ARGS="-b 64M -e 256M"             options for the h2d run (default: 4M and 64M, a few
#                                         seconds); its figures are compared with copies timed
#                                         by PyTorch (scripts/h2d-anchor.py) when torch imports
#   EFABENCH_LIBFABRIC=/path/libfabric.so.1  library for the registration test; default: the CUDA
#                                         build of scripts/gpu-libfabric.sh at .dev/lf-cuda when
#                                         present, else the system's. The test registers on shm
#                                         with FI_HMEM when that library registers CUDA memory
#                                         (the CUDA build does), else on tcp without; its
#                                         "registration:" line, repeated at the end, says which
#                                         and whether HMEM registration was exercised
#
# Exit status: non-zero when any test or the ipc verification fails.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results}
mkdir -p "$OUT"
fail=0

. scripts/lib/nvrtc.sh

if [ -z "${EFABENCH_LIBFABRIC:-}" ] && [ -f .dev/lf-cuda/lib/libfabric.so.1 ]; then
  export EFABENCH_LIBFABRIC=$PWD/.dev/lf-cuda/lib/libfabric.so.1
  echo "using libfabric with CUDA from .dev/lf-cuda (scripts/gpu-libfabric.sh)"
fi
nvidia-smi -L || echo "nvidia-smi failed: no driver?"
nvidia-smi topo -m 2>/dev/null || true
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

if [ -n "${BIN_DIR:-}" ]; then
  efabench="$BIN_DIR/efabench"
  : >"$OUT/gpu-tests.log"
  for t in "$BIN_DIR"/*; do
    [ -x "$t" ] && [ "$(basename "$t")" != efabench ] || continue
    echo "=== $t"
    "$t" --nocapture --test-threads=1 2>&1 | tee -a "$OUT/gpu-tests.log" || fail=1
  done
else
  cargo build --release -p efabench || exit 1
  efabench=target/release/efabench
  [ -n "${CARGO_TARGET_DIR:-}" ] && efabench="$CARGO_TARGET_DIR/release/efabench"
  cargo test --release -p efabench-gpu -- --nocapture --test-threads=1 2>&1 | tee "$OUT/gpu-tests.log" || fail=1
fi

grep -h '^registration:' "$OUT/gpu-tests.log" 2>/dev/null || echo "registration: no line in $OUT/gpu-tests.log (test skipped or not run)"

if [ "${ngpu:-0}" -ge 2 ]; then
  kind=${MACHINE:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-' | tr 'A-Z' 'a-z')-x$ngpu}
  rec="$OUT/ipc-$kind-$(date -u +%F).jsonl"
  echo "=== efabench launch -n $ngpu -- ipc ${IPC_ARGS:-} -o $rec"
  # shellcheck disable=SC2086
  "$efabench" launch -n "$ngpu" -- ipc ${IPC_ARGS:-} -o "$rec" 2>&1 | tee "$OUT/ipc-$kind.log" || fail=1
else
  echo "ipc skipped: needs 2 or more GPUs (found ${ngpu:-0})"
fi

if [ "${ngpu:-0}" -ge 1 ]; then
  kind=${MACHINE:-$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tr ' ' '-' | tr 'A-Z' 'a-z')-x$ngpu}
  rec="$OUT/h2d-$kind-$(date -u +%F).jsonl"
  h2d_args=${H2D_ARGS:--b 4M -e 64M -f 16 -n 40}
  echo "=== efabench h2d $h2d_args -o $rec"
  # shellcheck disable=SC2086
  "$efabench" h2d $h2d_args -o "$rec" 2>&1 | tee "$OUT/h2d-$kind.log" || fail=1
  echo "=== efabench doctor --interval 1 (real PCIe links and GPU health)"
  "$efabench" doctor --interval 1 2>&1 | tee "$OUT/doctor-$kind.log"
  "$efabench" topo 2>&1 | tee "$OUT/topo-$kind.log"
  if python3 -c 'import torch' 2>/dev/null; then
    echo "=== scripts/h2d-anchor.py (the same copies timed with CUDA events by PyTorch)"
    # shellcheck disable=SC2086
    # A ratio beyond the anchor's tolerance is a figure to read, not a failed test: one round
    # of 4 MiB copies moves by up to 20% on an H200 in either tool.
    python3 scripts/h2d-anchor.py --records "$rec" 2>&1 | tee "$OUT/h2d-anchor-$kind.log" \
      || echo "h2d anchor: a ratio beyond its tolerance (see the table above); not a test failure"
  else
    echo "h2d anchor skipped: python3 cannot import torch"
  fi
else
  echo "h2d skipped: no GPU"
fi
exit $fail
