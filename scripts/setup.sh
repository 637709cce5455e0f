#!/usr/bin/env bash
# Installs every Debian package accel needs. Idempotent: it asks apt only for what is missing.
# Why each package: see the table in README.md ("Dependencies").
set -euo pipefail

packages=(
  build-essential cmake ccache git pkg-config
  libtorch-dev            # libtorch 1.13 (CPU) with c10d and Gloo
  libopenblas0-openmp     # optimised BLAS: ~20x faster matmuls than the reference BLAS
  libyaml-cpp-dev libcli11-dev libspdlog-dev nlohmann-json3-dev
  libgloo-dev             # Gloo collectives (reduce_scatter is missing from libtorch's wrapper)
  catch2                  # test framework, run through ctest
  python3-torch           # Debian's PyTorch, for the independent reference scripts
  python3-numpy python3-yaml  # imported by the reference scripts (they read job files)
  python3-matplotlib      # plots of scripts/precision_experiment.py (PNG)
  tmux                    # drives the interactive `accel config` in a real terminal in tests
)

missing=()
for p in "${packages[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "setup: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
