#!/usr/bin/env bash
# Installs the Debian packages strata needs, only those missing. Idempotent.
#   deploy/install-deps.sh          build + test dependencies
#   deploy/install-deps.sh --bench  also python3-torch (the PyTorch baseline) and
#                                   redis-server (the serving baseline)
set -euo pipefail

packages=(cmake g++ make pkg-config git libcaf-dev libucx-dev ucx-utils liblmdb-dev lmdb-utils
  prometheus-cpp-dev prometheus libboost-dev libyaml-cpp-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libxxhash-dev libcli11-dev iproute2 curl
  clang libclang-rt-14-dev
  pybind11-dev python3-dev python3-numpy)
if [[ "${1:-}" == "--bench" ]]; then
  # OpenBLAS: without it Debian's torch falls back to the slow reference BLAS.
  # redis-server: the Redis baseline of `strata bench serve`.
  packages+=(python3-torch libopenblas0-pthread gnuplot-nox redis-server)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
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
