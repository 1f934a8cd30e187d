#!/usr/bin/env bash
# Builds UCX with its CUDA transports (cuda_copy, cuda_ipc) from Debian's own
# source package, for nodes that move rows in GPU memory (issue 21,
# docs/transport.md "GPU memory"): Debian's libucx0 has no CUDA support.
#
# The result goes under BUILD_DIR/ucx-cuda (never over Debian's UCX, which
# every other binary keeps using); a node or test that should use it runs
# with LD_LIBRARY_PATH=BUILD_DIR/ucx-cuda/lib (gpu/bundle.sh does not carry
# it yet: its carry is at the device tool's limit). Nothing is downloaded
# at build time: this is a separate step, run by hand (or `make ucx-cuda`)
# on a machine with the CUDA toolkit.
#
# What it needs, as checked on this machine kind (docs/gpu.md): a deb-src
# entry for bookworm main (`apt-get source ucx`: 1.13.1, the version of
# Debian's libucx0), autoconf/automake/libtool, and NVML: UCX's configure
# needs nvml.h and links libnvidia-ml, neither of which the CUDA 13 toolkit
# here has. Both come from Debian's non-free component (libnvidia-ml-dev:
# the header; libnvidia-ml1: the library), downloaded and unpacked into
# the work folder for the build only, not installed: installing
# libnvidia-ml1 would pull the driver's alternatives (contrib), and at run
# time libnvidia-ml.so.1 is the device machine's driver's own. Both apt
# entries go into one file of ours,
# /etc/apt/sources.list.d/strata-ucx-cuda.sources. A plain `make` of UCX
# fails in test/apps/test_cuda_hook.c (CUDA 13 changed cuCtxCreate), so
# only the libraries and ucx_info are built and installed.
#
# Idempotent: an install that already has the CUDA transport module is kept.
# Usage: deploy/build-ucx-cuda.sh [BUILD_DIR] [CUDA_DIR]   (as root, for apt)
set -euo pipefail

build=$(realpath -m "${1:-build}")
cuda=${2:-/usr/local/cuda}
prefix="$build/ucx-cuda"
module="$prefix/lib/ucx/libuct_cuda.so"

say() { echo "build-ucx-cuda: $*" >&2; }

if [[ -e "$module" ]]; then
  say "already built: $module"
  exit 0
fi
[[ -x "$cuda/bin/nvcc" ]] || { say "no CUDA toolkit at $cuda (nvcc missing)"; exit 1; }
[[ $(id -u) -eq 0 ]] || { say "needs root for apt-get (a sources entry and build tools)"; exit 1; }

sources=/etc/apt/sources.list.d/strata-ucx-cuda.sources
if [[ ! -f "$sources" ]]; then
  say "adding $sources (deb-src bookworm main; deb bookworm non-free)"
  cat >"$sources" <<'EOF'
# Added by strata's deploy/build-ucx-cuda.sh: UCX's source package and
# libnvidia-ml-dev (nvml.h), for a CUDA-enabled UCX under the build folder.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  apt-get update -qq
fi
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
  --no-install-recommends dpkg-dev autoconf automake libtool make >/dev/null

work="$build/ucx-cuda-src"
rm -rf "$work"
mkdir -p "$work/nvml"
cd "$work"
say "fetching NVML (libnvidia-ml-dev, libnvidia-ml1) and Debian's ucx source package into $work"
apt-get download -qq libnvidia-ml-dev libnvidia-ml1
for deb in libnvidia-ml-dev_*.deb libnvidia-ml1_*.deb; do dpkg-deb -x "$deb" nvml; done
nvml_lib=$(dirname "$(find "$work/nvml" -name 'libnvidia-ml.so.1' | head -1)")
[[ -e "$work/nvml/usr/include/nvml.h" && -d "$nvml_lib" ]] ||
  { say "NVML packages unpacked without nvml.h or libnvidia-ml.so.1"; exit 1; }
ln -sf libnvidia-ml.so.1 "$nvml_lib/libnvidia-ml.so"
apt-get source --download-only -qq ucx
dsc=$(ls ucx_*.dsc)
dpkg-source -x "$dsc" src >/dev/null
cd src
say "configuring $(basename "$dsc" .dsc) with CUDA at $cuda (log: $work/configure.log)"
./autogen.sh >"$work/autogen.log" 2>&1
CPPFLAGS="-I$work/nvml/usr/include" LDFLAGS="-L$nvml_lib" \
  ./configure --prefix="$prefix" --with-cuda="$cuda" --without-rocm --without-java \
  --enable-mt --disable-logging --disable-debug --disable-assertions --disable-params-check \
  >"$work/configure.log" 2>&1 || { say "configure failed: tail of $work/configure.log"; tail -20 "$work/configure.log" >&2; exit 1; }
modules=$(grep -i "UCT modules" "$work/configure.log")
[[ $modules == *cuda* ]] || { say "configure found no CUDA: $modules"; exit 1; }
jobs=$(nproc)
for d in ucm ucs uct ucp tools/info; do
  say "building and installing src/$d ($jobs jobs)"
  make -C "src/$d" -j"$jobs" install >"$work/make-${d//\//-}.log" 2>&1 ||
    { say "make in src/$d failed: tail of $work/make-${d//\//-}.log"; tail -20 "$work/make-${d//\//-}.log" >&2; exit 1; }
done
[[ -e "$module" ]] || { say "built, but $module is missing"; exit 1; }
say "done: $prefix ($("$prefix/bin/ucx_info" -v | head -1))"
say "its CUDA transport module: $module (ucx_info -d lists cuda_copy and cuda_ipc only where a driver and a device are present)"
rm -rf "$work"
