#!/usr/bin/env bash
# Builds the libFuzzer targets in BUILD_DIR (clang, ASan + UBSan) and runs
# each for SECONDS on a copy of its seed corpus (tests/fuzz/corpus/<name>/).
# Prints one line per target (executions, result) and exits non-zero if
# any target crashed, leaked, ran out of memory or hit a slow input; the
# reproducer is under BUILD_DIR/fuzz-out/<name>/ (never the source tree).
#
#   bash tests/fuzz/run.sh [BUILD_DIR] [SECONDS]      (make fuzz: build-fuzz 30)
#
# FUZZ_TARGETS="frame wire" limits the targets; FUZZ_JOBS (default 2)
# targets run at once. docs/fuzzing.md explains how to add a crash to the
# corpus once it is fixed.
set -euo pipefail

build=${1:-build-fuzz}
seconds=${2:-30}
jobs=${FUZZ_JOBS:-2}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
targets=${FUZZ_TARGETS:-"frame wire serving_http admin_http manifest reader"}
start=$(date +%s)

for tool in clang clang++ cmake; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool not found (make deps installs it)" >&2; exit 2; }
done
generator=()
if command -v ninja >/dev/null && [[ ! -f "$build/Makefile" ]]; then generator=(-G Ninja); fi

# The libraries: fuzzer-no-link (coverage), ASan, UBSan (fatal at run time:
# UBSAN_OPTIONS below); the executables add -fsanitize=fuzzer
# (tests/fuzz/CMakeLists.txt).
sanitize="-fsanitize=fuzzer-no-link,address,undefined"
mkdir -p "$build"
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_CXX_FLAGS=$sanitize" \
  "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -gline-tables-only -fno-omit-frame-pointer" \
  -DSTRATA_WITH_CUDA=OFF -DSTRATA_FUZZ=ON >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 2; }
fuzzers=()
for t in $targets; do fuzzers+=("${t}_fuzzer"); done
cmake --build "$build" -j 2 --target "${fuzzers[@]}"
built=$(date +%s)
echo "fuzz: built ${#fuzzers[@]} targets in $((built - start)) s; ${seconds} s each, $jobs at a time"

out="$build/fuzz-out"
# One target: a fresh copy of its seeds (findings go there, not into the
# source tree), its artifacts and log under $out/<name>/.
fuzz_one() {
  local t=$1 dir="$out/$1"
  rm -rf "$dir" && mkdir -p "$dir/corpus" "$dir/tmp"
  cp "$root/tests/fuzz/corpus/$t/"* "$dir/corpus/" 2>/dev/null || true
  local rc=0
  TMPDIR="$dir/tmp" \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
    "$build/tests/fuzz/${t}_fuzzer" "$dir/corpus" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$dir/" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}

rm -rf "$out" && mkdir -p "$out"
running=0
for t in $targets; do
  fuzz_one "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=0
for t in $targets; do
  dir="$out/$t"
  rc=$(cat "$dir/rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  artifact=$(ls "$dir"/crash-* "$dir"/leak-* "$dir"/oom-* "$dir"/timeout-* 2>/dev/null |
             head -1 || true)
  if [[ $rc == 0 && -z $artifact ]]; then
    printf 'fuzz %-13s ok     %10s execs in %s s (corpus %s files)\n' "$t" "${execs:-?}" "$seconds" \
      "$(ls "$dir/corpus" | wc -l)"
  else
    failed=1
    kind=$(grep -m1 -oE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer): [a-z-]+|runtime error|out-of-memory|timeout' \
           "$dir/log" || echo "exit $rc")
    printf 'fuzz %-13s FAILED %10s execs: %s\n' "$t" "${execs:-?}" "$kind"
    echo "     reproducer: ${artifact:-none written} (log: $dir/log)"
    echo "     replay: $build/tests/fuzz/${t}_fuzzer ${artifact:-<input>}"
  fi
done
echo "fuzz: total $(( $(date +%s) - start )) s"
exit "$failed"
