#!/usr/bin/env bash
# Runs the CUDA tests and benchmark built here on a machine with a GPU and
# writes a short report. The device machine has no network and no Debian
# packages: build here first (cudart is linked statically), run
# gpu/bundle.sh (stripped binaries and their shared libraries in
# build-gpu/carry), carry that folder, then run:
#   gpu/check.sh [CARRY_DIR] [REPORT]
# Budget: well under 5 minutes on one H200 (tests ~1 min, bench ~1 min,
# two short training runs ~1 min).
set -u
build=${1:-build-gpu/carry}
report=${2:-${OUT:-.}/gpu-report.txt}
mkdir -p "$(dirname "$report")"
fail=0
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec > >(tee "$report") 2>&1
  echo "# strata gpu check $(date -u +%FT%TZ)"
  # On a machine with a device every device test must run: a skip there is
  # a failure (it means the device was not usable), not an "ok".
  has_device=0
  if nvidia-smi -L >/dev/null 2>&1; then has_device=1; fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
  for t in gpu_host_test cuda_cache_test serving_store_test; do
    echo "## $t"
    if timeout 120 "$build/tests/$t" --gtest_brief=1 >"$report.$t.log" 2>&1; then
      skipped=$(grep -c '^\[  SKIPPED \]' "$report.$t.log" || true)
      if [[ $skipped -gt 0 && $has_device -eq 1 ]]; then
        fail=1; echo "FAILED: device tests skipped on a machine with a device"
        grep -B3 '^\[  SKIPPED \]' "$report.$t.log" | head -40
      elif [[ $skipped -gt 0 ]]; then
        echo "skipped: no device here"; grep -m3 -i "skip" "$report.$t.log"
      else
        echo "ok"; tail -3 "$report.$t.log"
      fi
    else
      fail=1; echo "FAILED (rc $?)"; grep -E "Failure|FAILED|error|Skipped" -A3 "$report.$t.log" | head -60
    fi
  done
  echo "## strata bench gpu"
  if ! timeout 150 "$build/strata" bench gpu 2>&1; then fail=1; echo "bench FAILED"; fi
  # End to end: the demo cluster (deploy/examples/local.yaml, 200k rows)
  # trained with the CPU cache backend and then with the CUDA one on the
  # same data; both reports (held-out AUC, examples/s) go in the report.
  work=$(mktemp -d)
  for backend in cpu gpu; do
    echo "## strata launch, caches.backend: $backend"
    sed -e "s|^  count: 2 *# cache tiers.*|  count: 2\n  backend: $backend|" \
        -e "s|ssd_path: data/demo-state|ssd_path: $work/state-$backend|" \
        -e "s|path: data/demo.tsv|path: $work/demo.tsv|" \
        -e "s|rows: 400000|rows: 200000|" -e "s|port: 9464|port: 0|" \
        deploy/examples/local.yaml > "$work/$backend.yaml"
    if timeout 150 "$build/strata" launch "$work/$backend.yaml" > "$work/$backend.log" 2>&1; then
      grep -E "^examples/s|AUC|  cache [0-9]" "$work/$backend.log"
    else
      fail=1; echo "launch FAILED"; tail -20 "$work/$backend.log"
    fi
  done
  rm -rf "$work"
exit $fail
