#!/usr/bin/env bash
# Stages what a lent GPU machine needs into one git-ignored folder, built here: the device has the
# same torch wheel but no compiler time to spare (a lease is 15 minutes in all, see
# scripts/gpu_run.sh). The folder holds
#   bin/   accel, accel-worker, test_cuda_communicators, accel_example_llama (debug info stripped)
#   lib/   libaccel.so.*, libaccel_cuda.so (accel's CUDA plugin, which the programs load on a GPU), and
#          the non-torch shared libraries they link (yaml-cpp, spdlog, fmt, ...; those over 1 MiB as .xz,
#          which gpu_run.sh unpacks)
#   torch_build.txt   the torch version and git revision the binaries were built against
#   manifest.txt      every file and its size
# The test and benchmark scripts travel as part of the working tree. Torch's own libraries are not
# staged: the device's installed wheel provides them (gpu_run.sh puts them on LD_LIBRARY_PATH).
#   scripts/gpu_stage.sh                 # build (build/, or $ACCEL_BUILD_DIR) and stage into .gpu-stage/
#   scripts/gpu_stage.sh --no-build DIR  # stage already built binaries into DIR (the rehearsal's ctest)
# Then, on the device: run carry [.gpu-stage], command `timeout 570 bash scripts/gpu_run.sh`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ACCEL_BUILD_DIR:-$root/build}"
python="${ACCEL_PYTHON:-${ACCEL_VENV:-$HOME/.cache/accel/venv-torch2.11}/bin/python}"
do_build=1
if [ "${1:-}" = "--no-build" ]; then
  do_build=0
  shift
fi
stage="${1:-$root/.gpu-stage}"
programs=(accel accel-worker tests/gpu/test_cuda_communicators examples/llama/accel_example_llama)

if [ $do_build -eq 1 ]; then
  [ -f "$build/CMakeCache.txt" ] || { echo "gpu_stage: $build is not configured: run scripts/build.sh first" >&2; exit 2; }
  cmake --build "$build" -j "$(nproc)" --target accel accel-worker accel_cuda test_cuda_communicators accel_example_llama
fi
[ -f "$build/api/libaccel_cuda.so" ] || { echo "gpu_stage: $build/api/libaccel_cuda.so is not built (cmake --build $build --target accel_cuda)" >&2; exit 2; }
for p in "${programs[@]}"; do
  [ -x "$build/$p" ] || { echo "gpu_stage: $build/$p is not built (cmake --build $build --target $(basename "$p"))" >&2; exit 2; }
done

rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
for p in "${programs[@]}"; do
  strip --strip-debug -o "$stage/bin/$(basename "$p")" "$build/$p"
done

# The shared libraries the programs resolve here, less the C/C++ runtime (the device has its own,
# as new or newer), torch's, CUDA's and NVIDIA's (the device's wheel and driver provide them).
ldd "$build/accel" "$build/accel-worker" "$build/tests/gpu/test_cuda_communicators" \
    "$build/examples/llama/accel_example_llama" |
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    case "$name" in
      libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | libutil.so* | libstdc++.so* | libgcc_s.so* | ld-linux*) continue ;;
    esac
    case "$path" in
      */torch/lib/* | */nvidia/* | /usr/local/cuda* | */libcuda.so*) continue ;;
    esac
    # Copied under the name the programs ask for (the soname), as a plain file: links do not travel.
    strip --strip-debug -o "$stage/lib/$name" "$(readlink -f "$path")"
  done

strip --strip-debug -o "$stage/lib/libaccel_cuda.so" "$build/api/libaccel_cuda.so"

# A library over 1 MiB travels xz-compressed (ICU's data, 31 MiB, which the tokenizer's
# normalization links; libcrypto, 4.6 MiB); gpu_run.sh unpacks them beside the others. The device
# call carries 64 MiB in all.
# Level 0: ICU's data takes 2.3 s of CPU at -0, 3.7 s at -1 and 13 s at -6, for 0.7 MB (-0 against
# -1) and 2.1 MB (-1 against -6) more (the stage's size is checked against 32 MiB by the rehearsal).
find "$stage/lib" -type f -size +1M -exec xz -T0 -0 {} \;

# torch/version.py read without importing torch (2 s of CPU, the most of a --no-build stage): the
# same two strings as torch.__version__ and torch.version.git_version, which gpu_run.sh compares.
"$python" -c 'import importlib.util, os, runpy
v = runpy.run_path(os.path.join(importlib.util.find_spec("torch").submodule_search_locations[0], "version.py"))
print(v["__version__"], v["git_version"])' >"$stage/torch_build.txt"
(cd "$stage" && find . -type f -printf '%s %p\n' | sort -k2 >manifest.txt)
size=$(du -sb "$stage" | cut -f1)
echo "gpu_stage: staged $(($(wc -l <"$stage/manifest.txt"))) files, $((size / 1024 / 1024)) MiB ($size bytes) into $stage"
echo "gpu_stage: built against torch $(cat "$stage/torch_build.txt")"
