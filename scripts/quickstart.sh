#!/usr/bin/env bash
# Install what running efabench needs (libfabric only: scripts/setup.sh --run), build efabench,
# and run the main job on this host: a two-rank point-to-point benchmark over loopback with the
# best provider available (efa, else shm, else tcp), payloads verified, records appended to
# results/quickstart.jsonl (ignored by git).
# Extra arguments go to the benchmark, e.g. scripts/quickstart.sh -e 4M --variant stream
set -euo pipefail
cd "$(dirname "$0")/.."

# efabench is built from source: say how to get Rust instead of failing on `cargo: command not found`.
need_rust=$(sed -n 's/^rust-version *= *"\([0-9.]*\)"/\1/p' Cargo.toml | head -1)
how_to_get_rust="install Rust $need_rust or newer with rustup: curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y && . \"\$HOME/.cargo/env\" (or your distribution's cargo if it is $need_rust or newer, e.g. Debian 13: sudo apt-get install cargo), then rerun $0"
if ! command -v cargo >/dev/null; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null; then
  echo "quickstart: cargo not found: $how_to_get_rust" >&2
  exit 2
fi
have_rust=$(rustc --version 2>/dev/null | sed -n 's/^rustc \([0-9]*\.[0-9]*\).*/\1/p')
if [ -z "$have_rust" ] || [ "$(printf '%s\n%s\n' "$need_rust" "$have_rust" | sort -V | head -1)" != "$need_rust" ]; then
  echo "quickstart: rustc ${have_rust:-not found} is older than $need_rust, which efabench needs: ${how_to_get_rust/install/update it (rustup update) or install}" >&2
  exit 2
fi

scripts/setup.sh --run
cargo build --release -q -p efabench
mkdir -p results
exec target/release/efabench launch -n 2 -- sendrecv -o results/quickstart.jsonl "$@"
