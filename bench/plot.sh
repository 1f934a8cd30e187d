#!/usr/bin/env bash
# Plots benchmark results (JSON lines from `strata bench SUITE --json-out F`)
# as one bar per result: its ratio to the baseline it was measured against,
# with 1.0 (parity) drawn in. Usage: bench/plot.sh RESULTS.jsonl OUT.png
set -euo pipefail
in=${1:?results file}
out=${2:?output png}
command -v gnuplot >/dev/null || { echo "plot: gnuplot is missing (make deps-bench installs gnuplot-nox)" >&2; exit 1; }
data=$(mktemp)
trap 'rm -f "$data"' EXIT
# "name vs baseline" <tab> ratio, one line per result (a zero baseline has
# no ratio and is left out).
grep -v '"baseline_value":0,' "$in" | sed -n 's/.*"name":"\([^"]*\)".*"baseline":"\([^"]*\)".*"ratio":\([-0-9.eE+]*\).*/\1 vs \2\t\3/p' > "$data"
[[ -s "$data" ]] || { echo "plot: no results in $in" >&2; exit 1; }
rows=$(wc -l < "$data")
gnuplot <<GP
set terminal pngcairo size 1000,$((120 + 28 * rows)) font ",10" noenhanced
set output "$out"
set datafile separator "\t"
set title "strata benchmarks: ratio to baseline (1 = parity; higher is better, except bytes per key)"
set style fill solid 0.7 border -1
set yrange [-0.6:$rows - 0.4]
set xrange [0:*]
set grid x
set ytics nomirror
set arrow from 1, graph 0 to 1, graph 1 nohead dt 2 lw 2 lc rgb "black"
plot "$data" using (\$2*0.5):0:(\$2*0.5):(0.35):yticlabels(1) with boxxyerror lc rgb "#4477aa" notitle, \
     "$data" using 2:0:(sprintf(" %.2fx", \$2)) with labels left notitle
GP
echo "plot: $out"
