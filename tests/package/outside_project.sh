#!/usr/bin/env bash
# accel as a package (docs/design/0016), as a user outside accel's tree meets it:
#  1. `cmake --install` gives bin/accel, lib/libaccel.so (and its CUDA plugin, lib/libaccel_cuda.so,
#     which the installed accel-worker loads), include/accel and lib/cmake/accel, and the
#     installed config names nothing in accel's source tree;
#  2. examples/minimal, configured as a project of its own, builds with find_package(accel) against
#     the installed tree and against the build tree;
#  3. the installed launcher runs the installed-tree build at world 2 (deepspeed zero_stage 2), and its
#     losses and final weights are bitwise those of the in-tree example (the same code and library);
#  4. a torch of another version is refused at configure time with a message naming both versions;
#  5. every other example (examples/*/) builds against the installed tree, each a project with its own
#     find_package(accel) (all in one CMake tree), and the installed launcher runs it under its own
#     job.yaml for 2 steps;
#  6. with a decoy libtorch/libc10 on the system library path (as Debian's python3-torch puts 1.13
#     in /usr/lib), the project still links exactly accel's torch; a decoy in the cache, or a system
#     kineto, is refused at configure time, naming it.
# Usage: outside_project.sh <accel build dir> <accel source dir> <in-tree accel_example_minimal>
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd); in_tree_example=$3
work="$build/package_test"
rm -rf "$work"; mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
launcher=""; [ -n "$(command -v ccache)" ] && launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
# ccache sees paths relative to the source tree, so the outside builds hit it from one run (and one
# checkout) to the next. They carry no debug info (torch's headers make -g cost about 45% of each
# compile, and nothing here reads it) and are not optimized: on a fresh machine (a cold ccache) each
# of the five compiles is a miss, and -O0 costs 17.3 s of CPU against 23.6 s at -O2 for
# examples/minimal (parsing torch's headers alone: 16.2 s). What runs is libaccel's and libtorch's
# code either way; the examples' own arithmetic follows IEEE order at any level (no -ffast-math, no
# FMA contraction on baseline x86-64), which step 3's bitwise comparison with the in-tree -O2 build checks.
export CCACHE_BASEDIR="$src" CCACHE_NOHASHDIR=1
build_type=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O0 -DNDEBUG")
# A fresh configure of a project that finds this torch costs about 4.4 s here: the CUDA wheel's config
# enables CUDA (nvcc's identification and ABI check, 2 s) and starts FindPython and python to hash
# libnvrtc.so (1.5 s), a hash it only prints. Step 2's configure against the installed tree goes the
# way a user's does; the others give the hash (torch skips computing it when it is set) and share
# configured trees where the check is about the same thing.
skip_hash=-DCUDA_NVRTC_SHORTHASH=not-computed

echo "== 1. install"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
for f in bin/accel libexec/accel/accel-worker lib/libaccel.so include/accel/accel.hpp include/accel/accelerator.hpp \
         lib/cmake/accel/accelConfig.cmake lib/cmake/accel/accelConfigVersion.cmake lib/cmake/accel/accelTargets.cmake; do
  [ -e "$work/prefix/$f" ] || fail "the install has no $f (see $work/install.log)"
done
if grep -l "$src" "$work"/prefix/lib/cmake/accel/*.cmake; then fail "the installed config refers to the source tree"; fi
"$work/prefix/bin/accel" --version > /dev/null || fail "the installed accel does not run"
env_json=$("$work/prefix/bin/accel" env --json) || fail "the installed accel env fails"
grep -q "\"cuda_library_loaded\"" <<< "$env_json" || fail "the installed accel does not find its accel-worker"
# With a CUDA libtorch, the installed accel-worker finds the installed CUDA plugin beside libaccel.so.
if [ -e "$build/api/libaccel_cuda.so" ]; then
  [ -e "$work/prefix/lib/libaccel_cuda.so" ] || fail "the install has no lib/libaccel_cuda.so"
  grep -Eq '"cuda_plugin": *"loaded' <<< "$env_json" ||
    fail "the installed accel-worker does not load the installed CUDA plugin: $(grep cuda_plugin <<< "$env_json")"
fi

echo "== 2. examples/minimal as a project of its own, against each tree"
for tree in install build; do
  if [ $tree = install ]; then dir="$work/prefix/lib/cmake/accel" quick=""; else dir="$build" quick=$skip_hash; fi
  cmake -S "$src/examples/minimal" -B "$work/minimal_$tree" "${build_type[@]}" $launcher $quick \
        -Daccel_DIR="$dir" > "$work/configure_$tree.log" 2>&1 || { cat "$work/configure_$tree.log"; fail "configure against the $tree tree"; }
  cmake --build "$work/minimal_$tree" -j 1 > "$work/build_$tree.log" 2>&1 || { tail -30 "$work/build_$tree.log"; fail "build against the $tree tree"; }
done
# Against the installed tree, the headers come from the prefix, not from accel's sources.
grep -q "$work/prefix/include" "$work/minimal_install/compile_commands.json" 2>/dev/null ||
  grep -rq "$work/prefix/include" "$work/minimal_install/CMakeFiles/accel_example_minimal.dir/flags.make" ||
  fail "the installed-tree build does not use the installed headers"
if grep -q "$src/include" "$work/minimal_install/CMakeFiles/accel_example_minimal.dir/flags.make"; then
  fail "the installed-tree build reads accel's source include/"
fi

echo "== 3. the installed launcher runs it at world 2; the result equals the in-tree example's"
# The jobs' rendezvous port is the default 29500, which a job or test running beside this one may hold.
free_port="--set main_process_port=0"
run_example() {  # <program> <output dir>
  sed -e "s#^program:.*#program: [\"$1\"]#" -e "s#output_dir:.*#output_dir: $2#" -e "s#max_steps:.*#max_steps: 4#" \
      "$src/examples/minimal/job.yaml" > "$2.yaml"
  (cd "$work" && "$work/prefix/bin/accel" launch "$2.yaml" $free_port > "$2.log" 2>&1) || { tail -20 "$2.log"; fail "accel launch $1"; }
}
run_example "$work/minimal_install/accel_example_minimal" "$work/run_install"
run_example "$in_tree_example" "$work/run_in_tree"
[ "$(wc -l < "$work/run_install/metrics.jsonl")" -eq 4 ] || fail "expected 4 metrics records"
cmp "$work/run_install/model.safetensors" "$work/run_in_tree/model.safetensors" ||
  fail "the installed-tree build's weights differ from the in-tree example's"
diff <(grep -o '"loss":[^,}]*' "$work/run_install/metrics.jsonl") <(grep -o '"loss":[^,}]*' "$work/run_in_tree/metrics.jsonl") ||
  fail "the losses differ"

echo "== 4. another torch version is refused at configure time"
fake="$work/fake_torch"; mkdir -p "$fake"
printf 'set(PACKAGE_VERSION "2.10.0")\nset(PACKAGE_VERSION_COMPATIBLE TRUE)\n' > "$fake/TorchConfigVersion.cmake"
printf 'add_library(torch INTERFACE IMPORTED)\nset(Torch_FOUND TRUE)\n' > "$fake/TorchConfig.cmake"
if cmake -S "$src/examples/minimal" -B "$work/minimal_wrong_torch" -Daccel_DIR="$work/prefix/lib/cmake/accel" \
         -DTorch_DIR="$fake" > "$work/configure_wrong_torch.log" 2>&1; then
  fail "a torch 2.10 was accepted"
fi
grep -q "built against torch 2.11" "$work/configure_wrong_torch.log" && grep -q "found torch 2.10.0" "$work/configure_wrong_torch.log" ||
  { cat "$work/configure_wrong_torch.log"; fail "the refusal does not name both versions"; }

echo "== 5. the other examples, built against the installed tree and run"
# One CMake tree holds them all: a generated top project with each example as a subdirectory, with its
# own project() and its own find_package(accel) (the top project finds nothing, and the accel::accel
# one example imports is visible only in its directory), so torch's CUDA set-up runs once for all of
# them. An example configured alone is step 2's check, on examples/minimal.
names=()
for dir in "$src"/examples/*/; do
  name=$(basename "$dir"); [ "$name" = minimal ] && continue
  [ -f "$dir/CMakeLists.txt" ] && names+=("$name")
done
top="$work/examples_top"; mkdir -p "$top"
{ echo "cmake_minimum_required(VERSION 3.18)"; echo "project(accel_examples LANGUAGES CXX)"
  for name in "${names[@]}"; do echo "add_subdirectory(\"$src/examples/$name\" $name)"; done; } > "$top/CMakeLists.txt"
cmake -S "$top" -B "$work/examples_install" "${build_type[@]}" $launcher $skip_hash \
      -Daccel_DIR="$work/prefix/lib/cmake/accel" > "$work/configure_examples.log" 2>&1 ||
  { cat "$work/configure_examples.log"; fail "configure examples/{${names[*]}} against the installed tree"; }
for name in "${names[@]}"; do
  dir="$src/examples/$name"
  cmake --build "$work/examples_install" --target "accel_example_$name" -j 1 > "$work/build_$name.log" 2>&1 ||
    { tail -30 "$work/build_$name.log"; fail "build $name"; }
  binary="$work/examples_install/$name/accel_example_$name"
  [ -x "$binary" ] || fail "examples/$name builds no accel_example_$name"
  # Its job as written, with the program built here, its own output directory and 2 steps.
  sed -e "s#\./accel_example_$name#$binary#" -e "s#output_dir:.*#output_dir: $work/run_$name#" \
      -e "s#max_steps:.*#max_steps: 2#" "$dir/job.yaml" > "$work/run_$name.yaml"
  # llama reads a token file (its job names runs/llama/tokens.bin): byte tokens of accel's README.
  [ -f "$dir/make_tokens.py" ] && python3 "$dir/make_tokens.py" "$work/runs/$name/tokens.bin" "$src/README.md" > /dev/null
  (cd "$work" && "$work/prefix/bin/accel" launch "$work/run_$name.yaml" $free_port > "$work/run_$name.log" 2>&1) ||
    { tail -20 "$work/run_$name.log"; fail "accel launch examples/$name"; }
  [ "$(wc -l < "$work/run_$name/metrics.jsonl")" -eq 2 ] || fail "examples/$name: expected 2 metrics records"
  echo "examples/$name: built against the installed tree, 2 steps run"
done
echo "== 6. a decoy libtorch on the system library path"
decoy="$work/decoy/lib"; mkdir -p "$decoy" "$work/decoy/kineto"
echo 'int accel_decoy_libtorch_1_13(void) { return 113; }' > "$work/decoy/decoy.c"
for lib in torch torch_cpu c10; do cc -shared -fPIC -o "$decoy/lib$lib.so" "$work/decoy/decoy.c"; done
cc -shared -fPIC -o "$work/decoy/kineto/libkineto.so" "$work/decoy/decoy.c"
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")
[ -n "$torch_dir" ] || fail "no Torch_DIR in $build/CMakeCache.txt"
configure_minimal() {  # <build dir> <log> [cmake args...]: examples/minimal against the installed tree
  local dir=$1 log=$2; shift 2
  cmake -S "$src/examples/minimal" -B "$dir" "${build_type[@]}" $launcher \
        -Daccel_DIR="$work/prefix/lib/cmake/accel" -DTorch_DIR="$torch_dir" "$@" > "$log" 2>&1
}
# (a) libtorch, libtorch_cpu and libc10 where Debian's are: not found; the program links the wheel's.
configure_minimal "$work/minimal_decoy" "$work/configure_decoy.log" $skip_hash -DCMAKE_SYSTEM_LIBRARY_PATH="$decoy" ||
  { cat "$work/configure_decoy.log"; fail "configure beside a decoy libtorch"; }
if grep -E "^[A-Za-z0-9_]+_LIBRARY:FILEPATH=$decoy" "$work/minimal_decoy/CMakeCache.txt"; then
  fail "the decoy libtorch was found (above: the cache entries that name it)"
fi
grep -q "^c10_LIBRARY:FILEPATH=$(dirname "$(dirname "$(dirname "$torch_dir")")")/lib/libc10.so" "$work/minimal_decoy/CMakeCache.txt" ||
  { grep '^c10_LIBRARY' "$work/minimal_decoy/CMakeCache.txt"; fail "libc10 is not the wheel's"; }
cmake --build "$work/minimal_decoy" -j 1 > "$work/build_decoy.log" 2>&1 || { tail -30 "$work/build_decoy.log"; fail "build beside a decoy libtorch"; }
if ldd "$work/minimal_decoy/accel_example_minimal" | grep -q "$work/decoy"; then fail "loads the decoy"; fi
# (b) a decoy already in the cache (an earlier configure found it), and (c) a kineto, which the
# wheel does not ship, so the system's is all TorchConfig can find: refused, naming the library.
# Both configure again a tree configured above: (b) the decoy tree of (a), its c10_LIBRARY set to the
# decoy; (c) step 2's installed-tree build (done with), whose kineto_LIBRARY is NOTFOUND, so
# find_library looks again, now with the kineto directory on the system path.
refused() {  # <name> <decoy library> <configured tree> [cmake args...]
  local name=$1 lib=$2 tree=$3; shift 3
  if cmake -S "$src/examples/minimal" -B "$tree" "$@" > "$work/configure_decoy_$name.log" 2>&1; then
    fail "a decoy $lib was accepted ($name)"
  fi
  grep -q "$lib" "$work/configure_decoy_$name.log" || { cat "$work/configure_decoy_$name.log"; fail "the refusal does not name $lib"; }
}
refused cached "$decoy/libc10.so" "$work/minimal_decoy" -Dc10_LIBRARY="$decoy/libc10.so"
grep -q '^kineto_LIBRARY:FILEPATH=.*NOTFOUND' "$work/minimal_install/CMakeCache.txt" ||
  fail "kineto was found for the installed-tree build: $(grep '^kineto_LIBRARY' "$work/minimal_install/CMakeCache.txt")"
refused kineto "$work/decoy/kineto/libkineto.so" "$work/minimal_install" $skip_hash \
        -DCMAKE_SYSTEM_LIBRARY_PATH="$work/decoy/kineto"
echo "decoy libtorch: not found beside the wheel's torch; a stray one in the cache or a system kineto is refused at configure time"

echo "package: install, find_package from both trees, bitwise-equal run, torch version check, every example, decoy torch: ok"
