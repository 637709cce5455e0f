#!/usr/bin/env bash
# Checks what an accel binary loads: exactly one libtorch (PyTorch's wheel, under TORCH_LIB_DIR when
# given) and no separate Gloo library (Gloo must be the copy inside libtorch_cpu, docs/design/0012);
# with --no-torch (the launcher, accel), no libtorch, c10, CUDA or NCCL library at all.
# with --no-cuda (accel-worker), no libtorch_cuda, c10_cuda, cuBLAS, cuDNN, cuSPARSE, cuFFT, NVSHMEM
# or NCCL: those come with accel's CUDA plugin, loaded only by a process that uses a GPU
# (docs/design/0029). The CUDA runtime and CUPTI stay: libtorch_cpu itself needs them.
# Usage: scripts/check_linkage.sh [--no-torch | --no-cuda] BINARY [TORCH_LIB_DIR]. Prints the relevant
# ldd lines; exit 1 on a breach.
set -euo pipefail
if [ "${1:-}" = "--no-cuda" ]; then
  deps="$(ldd "$2")"
  cuda="$(echo "$deps" | grep -E 'libtorch_cuda|libc10_cuda|libcublas|libcudnn|libnccl|libcusparse|libcufft|libnvshmem' || true)"
  if [ -n "$cuda" ]; then
    echo "check_linkage: $2 must not load CUDA libraries (accel's CUDA plugin brings them), but loads:"; echo "$cuda"; exit 1
  fi
  echo "check_linkage: $2 loads no CUDA library ($(echo "$deps" | grep -c '=>') shared libraries in all)"
  exit 0
fi
if [ "${1:-}" = "--no-torch" ]; then
  deps="$(ldd "$2")"
  heavy="$(echo "$deps" | grep -E 'libtorch|libc10|libcuda|libcudart|libnccl|libgloo|libgomp' || true)"
  if [ -n "$heavy" ]; then
    echo "check_linkage: $2 must not load libtorch or its libraries, but loads:"; echo "$heavy"; exit 1
  fi
  if echo "$deps" | grep -q 'not found'; then
    echo "check_linkage: unresolved libraries:"; echo "$deps" | grep 'not found'; exit 1
  fi
  echo "check_linkage: $2 loads no torch library ($(echo "$deps" | grep -c '=>') shared libraries in all)"
  exit 0
fi
binary="$1"
torch_lib_dir="${2:-}"
deps="$(ldd "$binary")"
fail=0
echo "$deps" | grep -E 'libtorch|libc10|libgloo|libnccl' || true
if echo "$deps" | grep -q 'not found'; then
  echo "check_linkage: unresolved libraries:"; echo "$deps" | grep 'not found'; fail=1
fi
if echo "$deps" | grep -qi 'libgloo'; then
  echo "check_linkage: a separate Gloo library is loaded; Gloo must come from libtorch_cpu only"; fail=1
fi
torch_paths="$(echo "$deps" | awk '/libtorch_cpu\.so/ {print $3}' | sort -u)"
if [ "$(echo "$torch_paths" | grep -c .)" -ne 1 ]; then
  echo "check_linkage: expected exactly one libtorch_cpu, found: ${torch_paths:-none}"; fail=1
elif [ -n "$torch_lib_dir" ] && [ "$(readlink -f "$(dirname "$torch_paths")")" != "$(readlink -f "$torch_lib_dir")" ]; then
  echo "check_linkage: libtorch_cpu comes from $torch_paths, not from $torch_lib_dir"; fail=1
fi
[ "$fail" -eq 0 ] && echo "check_linkage: one libtorch ($torch_paths), no separate Gloo"
exit "$fail"
