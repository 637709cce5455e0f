#!/usr/bin/env bash
# Downloads (does not install) the Debian packages accel's build needs beyond what a lent GPU machine
# has (it has torch 2.11, CMake, ninja and the CUDA toolkit, and no package registry): the C++
# libraries and headers below, as .deb files in .gpu-deps/ (git-ignored, about 3 MB). Carry that folder
# to the GPU machine (the device tool's `carry`), where scripts/gpu_check.sh unpacks them into a private
# prefix. Run here, where Debian's registry is reachable. Safe to rerun.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/.gpu-deps"
packages=(
  libyaml-cpp-dev libyaml-cpp0.7
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libcli11-dev nlohmann-json3-dev catch2
  libgloo-dev   # headers only (c10d's ProcessGroupGloo.hpp); never linked
)
mkdir -p "$out"
cd "$out"
missing=()
for p in "${packages[@]}"; do
  compgen -G "${p}_*.deb" >/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get download -o APT::Sandbox::User=root "${missing[@]}"
fi
echo "fetch_gpu_build_deps: ${#packages[@]} packages in $out ($(du -sh "$out" | cut -f1))"
