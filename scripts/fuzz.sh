#!/usr/bin/env bash
# Builds and runs the config fuzzer (tests/fuzz/config_fuzzer.cpp) with clang's libFuzzer.
# Usage: scripts/fuzz.sh [SECONDS (default 60)] [more libFuzzer flags]
#   nice scripts/fuzz.sh 600        # a longer run; the corpus in build/fuzz/corpus grows across runs
#   build/fuzz/config_fuzzer FILE   # replay one input (a finding, or tests/fuzz/regressions/*)
# Exit status: 0 no finding, 1 a finding (kept in build/fuzz/findings/), 77 no clang++ with the
# libFuzzer runtime here (ctest reports config_fuzz_15s as skipped).
# ACCEL_FUZZ_DIR: where to build and keep the corpus (default build/fuzz).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${ACCEL_FUZZ_DIR:-$root/build/fuzz}"
seconds="${1:-60}"
shift || true
export LC_ALL=C  # the seeds' template indices follow the harness's byte order of file names
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

# The compiler probe's directory and the harness's scratch directory (below) go when this run ends,
# however it ends: libFuzzer ends a run with a finding or a timeout by _Exit, past the harness's own
# clean-up.
probe="" scratch=""
trap 'rm -rf "$probe" "$scratch"' EXIT
trap 'exit 129' HUP; trap 'exit 130' INT; trap 'exit 143' TERM
# Only a compiler that links a libFuzzer target can build the harness; anything less is a skip.
probe="$(mktemp -d)"
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' > "$probe/p.cpp"
if ! command -v clang++ >/dev/null 2>&1 ||
   ! clang++ -fsanitize=fuzzer,address "$probe/p.cpp" -o "$probe/p" >/dev/null 2>&1; then
  echo "fuzz: SKIPPED: no clang++ with the libFuzzer runtime (Debian: clang libclang-rt-14-dev; scripts/setup.sh)"
  exit 77
fi

if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S "$root/tests/fuzz" -B "$dir" -DCMAKE_CXX_COMPILER=clang++ >/dev/null
fi
cmake --build "$dir" -j "${ACCEL_BUILD_JOBS:-$(nproc)}"

# Seeds, rebuilt from the repository's files on every run: byte 0 frames them (see the harness).
seeds="$dir/seeds"
rm -rf "$seeds"
mkdir -p "$seeds" "$dir/corpus" "$dir/findings"
seed() {  # seed NAME FRAMING-BYTES FILE
  { printf "$2"; cat "$3"; } > "$seeds/$1"
}
i=0
for t in "$root"/config_templates/*.yaml; do
  name="$(basename "$t" .yaml)"
  for then in 00 04 08 0c 10 20 30; do seed "template-$name-$then" "\\x$then" "$t"; done  # 1x: GPUs here
  # The template again as --set items over itself, plus one ACCEL_* variable.
  {
    printf "\\x03\\x$(printf %02x "$i")"
    awk '/^[a-z_]+:[ \t]*(#.*)?$/ { sub(/:.*/, ""); section = $0 "."; next }
         /^[a-z_]+:/ { section = "" }
         /^ *[a-z_]+: *[^ #]/ { line = $0; sub(/ +#.*/, "", line); sub(/^ */, "", line); sub(/: */, "=", line);
                                print section line }' "$t"
    echo "ACCEL_TRAINING_MAX_STEPS=5"
  } > "$seeds/overrides-$name"
  i=$((i + 1))
done
for f in "$root"/tests/fixtures/bad/*.yaml "$root"/tests/fixtures/import/*.yaml; do
  seed "fixture-$(basename "$f")" '\x00' "$f"
  seed "fixture-$(basename "$f")-convert" '\x08' "$f"
done
# DeepSpeed JSON: the import fixtures, and the files accel and DeepSpeed refuse (tests/fixtures/bad_json).
for f in "$root"/tests/fixtures/import/*.json "$root"/tests/fixtures/bad_json/*.json; do
  name="$(basename "$f")"
  seed "json-$name" '\x01' "$f"
  seed "json-$name-convert" '\x0d' "$f"
  seed "config-file-native-$name" '\x02\x00' "$f"
  seed "config-file-accelerate-$name" '\x02\x01' "$f"
done

# The dictionary: every key-like string literal the config code compares with (DeepSpeed's key
# names included, runtime/config/deepspeed_keys.cpp), also as a quoted JSON key; YAML syntax; JSON
# tokens, and what JSON refuses and YAML reads (comments, single quotes, trailing commas, NaN).
{
  keys="$(grep -ohE '"[A-Za-z_][A-Za-z0-9_]*"' "$root"/runtime/config/*.cpp | sort -u)"
  echo "$keys"
  echo "$keys" | sed -E 's/^"(.*)"$/"\\"\1\\": "/'
  printf '%s\n' '": "' '"\x0a  "' '"- "' '"{"' '"}"' '"["' '"]"' '"auto"' '"&a "' '"*a"' '"!!str "' '"? "' '"~"'
  # Numbers at the edges of the types the values land in (int, int64, double).
  printf '%s\n' '"0"' '"-1"' '"2147483647"' '"2147483648"' '"4294967296"' '"9223372036854775807"' '"1e308"' \
    '".inf"' '".nan"' '"1e-320"'
  printf '%s\n' '"\""' '":"' '","' '", "' '"{}"' '"[]"' '"true"' '"false"' '"null"' '"\"auto\""' '"\\u0000"' \
    '"\\ud83d\\ude00"' '"\\/"' '"1e999"' '"-0.0e+5"' '"NaN"' '"//"' '"/*"' '"\x27"' '",}"' '",]"' '"\x09"' '"\x0d\x0a"'
} > "$dir/config.dict"

echo "fuzz: $seconds s; $(ls "$seeds" | wc -l) seeds, $(ls "$dir/corpus" | wc -l) corpus inputs; findings go to $dir/findings/"
regressions=()
[ -d "$root/tests/fuzz/regressions" ] && regressions=("$root/tests/fuzz/regressions")
# The harness writes each input's files in a directory of its own under ACCEL_FUZZ_SCRATCH.
scratch="$(mktemp -d "$dir/scratch.XXXXXX")"
# libFuzzer's own exit code for a finding is 77, which ctest would read as a skip: make it 1.
status=0
ACCEL_FUZZ_SCRATCH="$scratch" "$dir/config_fuzzer" -max_total_time="$seconds" -timeout=10 -error_exitcode=1 \
  -timeout_exitcode=1 -dict="$dir/config.dict" -artifact_prefix="$dir/findings/" -print_final_stats=1 "$@" \
  "$dir/corpus" "$seeds" "${regressions[@]}" || status=$?
exit "$status"
