#!/usr/bin/env bash
# Builds libfabric and fabtests with CUDA (FI_HMEM_CUDA) from the vendored release tarballs, so
# device memory really goes through libfabric (Debian's and PyPI's builds have no CUDA).
#
# Two modes:
#   --here    build on a machine WITHOUT a GPU or CUDA toolkit (this dev box): CUDA's headers come
#             from PyPI's nvidia-cuda-runtime-cu12 wheel (it carries include/cuda.h and
#             cuda_runtime.h), and libfabric is configured with --enable-cuda-dlopen, so it links
#             no CUDA library and dlopens libcuda.so.1 at run time. fabtests dlopens libcuda.so.1
#             and libcudart.so itself. The result runs on the GPU machine (Ubuntu 24.04, newer
#             glibc than the Debian 12 it is built on): carry the prefix with the run tool.
#   --device  build on the GPU machine against /usr/local/cuda (the vendor README's recipe, about
#             4 minutes with make -j16); use when the --here build cannot be used.
#
# Usage: scripts/gpu-libfabric.sh [--here|--device] [--vendor DIR] [--prefix DIR] [--cuda DIR]
#          --vendor DIR   where libfabric-2.5.1.tar.bz2 and fabtests-2.5.1.tar.bz2 are
#                         (default: ../shared/vendor, ../../shared/vendor, shared/vendor, .gpu-deps)
#          --prefix DIR   install prefix (default: .dev/lf-cuda, which git ignores)
#          --cuda DIR     CUDA root for --device (default /usr/local/cuda) or a ready header dir
#                         (DIR/include/cuda.h) for --here
#          -j N           make jobs (default: nproc)
# Then:  EFABENCH_LIBFABRIC=PREFIX/lib/libfabric.so.1 efabench ...
#        LD_LIBRARY_PATH=PREFIX/lib:/usr/local/cuda/lib64 PREFIX/bin/fi_rma_bw -D cuda ...
# The install is stripped and has no docs, man pages, headers or static libraries (~15 MiB),
# so it fits in a device call's carry.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=here vendor="" prefix=.dev/lf-cuda cuda="" jobs=$(nproc)
while [ $# -gt 0 ]; do
  case "$1" in
    --here) mode=here ;;
    --device) mode=device ;;
    --vendor) vendor=$2; shift ;;
    --prefix) prefix=$2; shift ;;
    --cuda) cuda=$2; shift ;;
    -j) jobs=$2; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "gpu-libfabric.sh: unknown argument '$1': see --help" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$vendor" ]; then
  for d in ../shared/vendor ../../shared/vendor shared/vendor .gpu-deps; do
    [ -f "$d/libfabric-2.5.1.tar.bz2" ] && { vendor=$d; break; }
  done
fi
for t in libfabric-2.5.1.tar.bz2 fabtests-2.5.1.tar.bz2; do
  [ -f "${vendor:-.}/$t" ] || { echo "gpu-libfabric.sh: $t not found in '${vendor:-?}': pass --vendor DIR" >&2; exit 2; }
done
vendor=$(cd "$vendor" && pwd)
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
build=$(mktemp -d "${TMPDIR:-/tmp}/gpu-libfabric.XXXXXX")
trap 'rm -rf "$build"' EXIT

if [ "$mode" = here ]; then
  if [ -z "$cuda" ]; then
    # Headers only: the runtime wheel's include/ has cuda.h and cuda_runtime.h, which includes
    # crt/host_config.h from the nvcc wheel; nvml.h comes from the nvml-dev wheel. No library is linked (dlopen at run time).
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2010_x86_64 --platform manylinux_2_12_x86_64 \
      -d "$build/whl" 'nvidia-cuda-runtime-cu12==12.9.79' 'nvidia-cuda-nvcc-cu12==12.9.86' \
      'nvidia-nvml-dev-cu12==12.9.79'
    for w in "$build"/whl/*.whl; do python3 -m zipfile -e "$w" "$build/whl/x"; done
    cuda=$build/cuda
    mkdir -p "$cuda/lib64"
    cp -r "$build/whl/x/nvidia/cuda_runtime/include" "$cuda/"
    cp -r "$build/whl/x/nvidia/cuda_nvcc/include/crt" "$cuda/include/"
    cp "$build/whl/x/nvidia/nvml_dev/include/nvml.h" "$cuda/include/"
  fi
  [ -f "$cuda/include/cuda.h" ] || { echo "gpu-libfabric.sh: no $cuda/include/cuda.h" >&2; exit 2; }
  lf_cuda=(--with-cuda="$cuda" --enable-cuda-dlopen)
else
  cuda=${cuda:-/usr/local/cuda}
  [ -f "$cuda/include/cuda.h" ] || { echo "gpu-libfabric.sh: no CUDA toolkit at $cuda: pass --cuda DIR or use --here" >&2; exit 2; }
  lf_cuda=(--with-cuda="$cuda" --enable-cuda-dlopen)
fi

cd "$build"
tar xjf "$vendor/libfabric-2.5.1.tar.bz2"
tar xjf "$vendor/fabtests-2.5.1.tar.bz2"
echo "=== libfabric 2.5.1 ($mode, CUDA from $cuda) -> $prefix"
(cd libfabric-2.5.1 &&
  ./configure -q --prefix="$prefix" "${lf_cuda[@]}" --disable-efa --disable-verbs \
    --disable-usnic --disable-psm2 --disable-psm3 --disable-opx --disable-ucx \
    --disable-static --disable-debug &&
  make -s -j"$jobs" && make -s install) >"$build/lf.log" 2>&1 || { tail -40 "$build/lf.log"; exit 1; }
grep -q 'HAVE_CUDA 1' libfabric-2.5.1/config.h || { echo "libfabric configured without CUDA" >&2; exit 1; }
echo "=== fabtests 2.5.1"
(cd fabtests-2.5.1 &&
  ./configure -q --prefix="$prefix" --with-libfabric="$prefix" --with-cuda="$cuda" &&
  make -s -j"$jobs" && make -s install) >"$build/ft.log" 2>&1 || { tail -40 "$build/ft.log"; exit 1; }

# Keep it small enough to carry: binaries and the shared library, stripped.
rm -rf "$prefix/share" "$prefix/include" "$prefix/lib/pkgconfig"
find "$prefix/lib" -name '*.la' -delete
find "$prefix/lib" -name '*.a' -delete
find "$prefix/bin" "$prefix/lib" -type f -perm -u+x -exec strip --strip-unneeded {} + 2>/dev/null || true
strip --strip-unneeded "$prefix"/lib/libfabric.so.* 2>/dev/null || true
echo "=== installed $(du -sh "$prefix" | cut -f1) in $prefix"
LD_LIBRARY_PATH="$prefix/lib" "$prefix/bin/fi_info" --version
