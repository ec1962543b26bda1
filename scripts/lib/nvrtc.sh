# Sourced by the GPU scripts. efabench compiles its kernels with NVRTC at run time: put libnvrtc
# on LD_LIBRARY_PATH when the loader does not find it (CUDA toolkit, or NVIDIA's PyPI wheels).
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so'; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cuda_nvrtc", "lib") for p in nvidia.__path__))' 2>/dev/null); do
    if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then
      export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "using NVRTC from $d"
      break
    fi
  done
fi
