#!/usr/bin/env bash
# Installs what strata needs to build and to run every test, only what is
# missing. Idempotent: a second run installs nothing.
#   deploy/install-deps.sh          build + test dependencies: Debian packages,
#                                   then the pinned npm test tools (tests/deploy/npm)
#                                   in .ci/tools (ignored by git)
#   deploy/install-deps.sh --bench  also OpenBLAS for torch, gnuplot (plots) and
#                                   redis-server (the serving baseline)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake g++ make ninja-build lld pkg-config git libcaf-dev libucx-dev ucx-utils liblmdb-dev lmdb-utils
  prometheus-cpp-dev prometheus libboost-dev libyaml-cpp-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libxxhash-dev libcli11-dev iproute2 curl
  libssl-dev
  # OpenBLAS: the CTR model's MLP GEMMs (model/mlp_blas.hpp, docs/performance.md).
  libopenblas-serial-dev
  clang libclang-rt-14-dev
  pybind11-dev python3-dev python3-numpy
  # Test-only: the manifest schema drift check (tests/deploy/schema_check.py)
  # and the Python client and PyTorch tests (tests/serving/*.py).
  python3-jsonschema python3-yaml python3-torch
  # Test-only: stops a node inside a UCX send (cluster_test's FailureTest).
  gdb)
# The offline Kubernetes schema check runs on node and npm. Debian's packages
# only where none is on PATH: a machine with NodeSource's nodejs has npm in it,
# and Debian's npm would conflict with it.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi
if [[ "${1:-}" == "--bench" ]]; then
  # OpenBLAS: without it Debian's torch falls back to the slow reference BLAS
  # (fine for the tests, not for the PyTorch baseline).
  # redis-server: the Redis baseline of `strata bench serve`.
  packages+=(libopenblas0-pthread gnuplot-nox redis-server)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
install_npm_tools() {
  local lock=tests/deploy/npm/package-lock.json dest=.ci/tools
  if [[ -f $dest/package-lock.json ]] && cmp -s "$lock" "$dest/package-lock.json" &&
    [[ -d $dest/node_modules/kubernetes-models ]]; then
    return 0
  fi
  echo "install-deps: npm test tools (tests/deploy/npm) into $dest"
  mkdir -p "$dest"
  cp tests/deploy/npm/package.json "$lock" "$dest/"
  if ! npm ci --no-audit --no-fund --prefix "$dest" >"$dest/npm.log" 2>&1; then
    cat "$dest/npm.log" >&2
    echo "install-deps: 'npm ci' of the test tools failed (log above)" >&2
    exit 1
  fi
}

if [[ ${#missing[@]} -eq 0 ]]; then
  install_npm_tools
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo="sudo"
  else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi
if ! $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq; then
  echo "install-deps: 'apt-get update' failed; check the network or the apt sources" >&2
  exit 1
fi
if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends "${missing[@]}"; then
  echo "install-deps: could not install: ${missing[*]} (this script expects Debian 12)" >&2
  exit 1
fi
install_npm_tools
