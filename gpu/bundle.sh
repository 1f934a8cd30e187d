#!/usr/bin/env bash
# Prepares what the device machine needs to run gpu/check.sh: stripped
# copies of the GPU test binaries and of `strata` (for `strata bench gpu`)
# in BUILD_DIR/carry, with the shared libraries they need other than
# glibc's own in BUILD_DIR/carry/lib (the device machine has no Debian
# packages; check.sh puts that folder on LD_LIBRARY_PATH). The folder must
# stay under the device tool's 64 MiB carry limit.
# Usage: gpu/bundle.sh [BUILD_DIR]     then carry BUILD_DIR/carry
set -euo pipefail
build=${1:-build-gpu}
out="$build/carry"
rm -rf "$out"
mkdir -p "$out/tests" "$out/lib"
for rel in strata tests/gpu_host_test tests/cuda_cache_test tests/serving_store_test; do
  bin="$build/$rel"
  [[ -x "$bin" ]] || { echo "bundle: $bin is missing; build with nvcc present first" >&2; exit 1; }
  strip -o "$out/$rel" "$bin"
  ldd "$bin" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) continue ;;
    esac
    cp -uL "$lib" "$out/lib/"
  done
done
du -sh "$out"
