#!/usr/bin/env bash
# Installs what accel needs (with --tests, what its test suite needs too). Idempotent: it asks apt only for missing packages and creates the
# Python environment only when it is absent (a changed scripts/python-requirements.lock installs into
# the one there); on a machine that has everything it does nothing and takes about a second.
#  1. Debian packages: the build, the C++ libraries, the test tools (the table in docs/development.md).
#  2. One Python environment outside the clone, ${ACCEL_VENV:-~/.cache/accel/venv-torch2.11}, so
#     clean clones and CI reuse it: torch 2.11.0 (PyTorch's own libtorch, the CUDA 13.0 build that
#     runs CPU code without a GPU; CMake finds libtorch through it) and, with --tests, the peers
#     deepspeed and accelerate, the trackers' own readers (tensorboard, mlflow-skinny: the tests read
#     accel's event files and run store with them), transformers and tokenizers, and the scripts'
#     modules; every version pinned in scripts/python-requirements.lock.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build ccache git pkg-config
  lld                     # links accel's torch executables in a fraction of GNU ld's time (cmake/BuildSpeed.cmake)
  libyaml-cpp-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
  libssl-dev              # OpenSSL's libcrypto: HMAC-SHA256 of the job secret (SECURITY.md)
  libcurl4-openssl-dev    # the etcd rendezvous's HTTP client: headers at build time, libcurl4 loaded when an etcd job runs (docs/design/0034)
  libgloo-dev             # Gloo's headers only, for c10d's ProcessGroupGloo.hpp (the wheel ships none); never linked
  catch2                  # test framework, run through ctest (CMake configures the tests with the rest)
  python3-venv            # the Python environment below
  libcairo2-dev fonts-dejavu-core  # `accel report`: charts drawn once as SVG and PNG, in DejaVu Sans
  libpcre2-dev libicu-dev  # tokenizer.json text data: Unicode pre-tokenizer regexes, NFC/NFKC (trainer/text)
)
# What only the test suite needs (scripts/test.sh passes --tests; the quickstart does not wait for it).
test_packages=(
  clang libclang-rt-14-dev  # the config fuzzer (scripts/fuzz.sh): clang++ and its libFuzzer/ASan/UBSan runtimes
  tmux                    # drives the interactive `accel config` in a real terminal in tests
  libaio-dev              # DeepSpeed's async_io op (ZeRO-Infinity NVMe offload) in bench_scale.py's ds_zero3_nvme
  openmpi-bin             # accel launch under mpirun (tests/numerics/test_schedulers.py)
  slurmctld slurmd slurm-client munge  # a one-node SLURM cluster the same test starts: srun, sbatch, scancel
  iproute2                # ip netns, veth, bridge, tc: machines as namespaces (tests/numerics/test_netns_machines.py)
  etcd-server etcd-client  # the etcd rendezvous backend's tests start a real etcd (docs/design/0034)
  xz-utils                # the GPU stage compresses each library over 1 MiB (scripts/gpu_stage.sh; ctest gpu_rehearsal)
)
if [ "${1:-}" = "--tests" ]; then packages+=("${test_packages[@]}"); fi

missing=()
for p in "${packages[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} Debian packages already installed"
else
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The CUDA wheel's CMake package needs the CUDA toolkit at configure time (it is on the project's
# machines); say so now rather than in the middle of a CMake error.
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: warning: no CUDA toolkit (nvcc) found; configuring against the torch CUDA wheel needs" \
       "CUDA 13.0 in /usr/local/cuda (or CUDAToolkit_ROOT), or pass -DTorch_DIR to another libtorch" >&2
fi

venv="${ACCEL_VENV:-$HOME/.cache/accel/venv-torch2.11}"
lock="$root/scripts/python-requirements.lock"
want="$(sha256sum "$lock" | cut -d' ' -f1)"
# Two stamps, each the lock's hash: the whole lock (--tests), and torch alone with its dependencies at
# the lock's pins (what the build and the quickstart's job need; the peers, deepspeed's source build
# and the trackers' readers are a third of the install's time and only the tests use them).
full_stamp="$venv/.accel-lock.sha256"
core_stamp="$venv/.accel-core.sha256"
stamp=$core_stamp; what="torch 2.11.0"
if [ "${1:-}" = "--tests" ]; then stamp=$full_stamp; what="torch 2.11.0 and the peers"; fi
for s in "$full_stamp" "$stamp"; do
  if [ -x "$venv/bin/python" ] && [ -f "$s" ] && [ "$(cat "$s")" = "$want" ]; then
    echo "setup: Python environment $venv is up to date ($what)"
    exit 0
  fi
done
# A changed lock installs into the environment that is there: pip adds what is missing and moves a
# package whose pin changed, and leaves the rest (torch and its CUDA wheels are 3 GB).
if [ -x "$venv/bin/python" ]; then
  echo "setup: updating the Python environment $venv to scripts/python-requirements.lock ($what)"
else
  echo "setup: creating the Python environment $venv ($what; about 3 GB to download)"
  /usr/bin/python3 -m venv "$venv"
fi
pip=("$venv/bin/pip" install --no-input --disable-pip-version-check -q)
if [ "$stamp" = "$core_stamp" ]; then
  "${pip[@]}" torch==2.11.0 -c "$lock"
  "$venv/bin/python" -c 'import torch; print("setup: torch", torch.__version__)' 2>&1 | grep '^setup:'
else
  "${pip[@]}" -r "$lock"
  "$venv/bin/python" -c 'import torch, deepspeed, accelerate, tensorboard, mlflow, transformers; print("setup: torch", torch.__version__,
    "| deepspeed", deepspeed.__version__, "| accelerate", accelerate.__version__, "| tensorboard",
    tensorboard.__version__, "| mlflow-skinny", mlflow.__version__)' 2>&1 | grep '^setup:'
  echo "$want" > "$core_stamp"
fi
echo "$want" > "$stamp"
