#!/usr/bin/env bash
# Installs what nmsparse needs on Debian 12, and only what is missing (idempotent, quiet when
# everything is there). Used by `make test`, `make demo` and .ci/run.
# Data: dataset-fashion-mnist (the default training images), and the Jane Austen corpus through
# scripts/fetch-austen.sh (one file into the user's cache; a failure there only warns, the tests
# that need it skip).
# python3-torch + python3-numpy: examples/calibrate_torch.py and its test (which skips without them).
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh --fuzz     also clang and its libFuzzer runtime
#   scripts/install-deps.sh --cuda     also cuSPARSELt for nmsparse_cuda's 2:4 GEMMs (PyPI wheel
#                                      nvidia-cusparselt-cu13, unpacked into .deps/cusparselt; the
#                                      CUDA toolkit itself is expected at /usr/local/cuda)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(cmake ninja-build g++ make pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev zlib1g-dev python3 liblemon-dev libopenblas-dev
          dataset-fashion-mnist libtorch-dev gnuplot-nox python3-torch python3-numpy)
if [[ "${1:-}" == "--fuzz" ]]; then
  packages+=(clang libclang-rt-14-dev libomp-dev)
fi

if [[ "${1:-}" == "--cuda" ]]; then
  if [[ -f "$root/.deps/cusparselt/nvidia/cu13/include/cusparseLt.h" ]]; then
    exit 0
  fi
  echo "install-deps: installing cuSPARSELt (nvidia-cusparselt-cu13) into .deps/cusparselt" >&2
  tmp="$root/.deps/cusparselt.tmp.$$"
  rm -rf "$tmp"
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$tmp" \
    nvidia-cusparselt-cu13 >/dev/null
  rm -rf "$root/.deps/cusparselt"
  mv "$tmp" "$root/.deps/cusparselt"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# Optional: the Python safetensors package, for the interoperability tests (they skip without it).
if command -v python3 >/dev/null && ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check safetensors numpy >/dev/null 2>&1 ||
    echo "install-deps: python safetensors not installed; interoperability tests will skip" >&2
fi

# The Jane Austen corpus (not a package: one file out of r-cran-janeaustenr's .deb).
"$(dirname "${BASH_SOURCE[0]}")/fetch-austen.sh" ||
  echo "install-deps: scripts/fetch-austen.sh failed; the Austen corpus is missing (tests skip)" >&2
exit 0
