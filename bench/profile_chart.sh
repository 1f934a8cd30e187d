#!/usr/bin/env bash
# Draws the top symbols of two profiles side by side (a horizontal bar chart:
# self time per symbol, before and after), from the text of
#   perf report --no-children --sort sym --stdio     (or --sort dso,sym)
# Usage: bench/profile_chart.sh BEFORE.txt AFTER.txt OUT.svg|OUT.png [N] [TITLE]
# N (default 20): symbols drawn, the largest in either profile first.
# Symbols are shortened (templates' arguments and "(anonymous namespace)::"
# dropped) and entries that shorten to the same name are summed.
set -euo pipefail
before=${1:?before profile (perf report --stdio text)}
after=${2:?after profile}
out=${3:?output .svg or .png}
top=${4:-20}
title=${5:-"top symbols, self time (perf report --no-children --sort sym)"}
command -v gnuplot >/dev/null || { echo "profile_chart: gnuplot is missing (deploy/install-deps.sh --bench installs gnuplot-nox)" >&2; exit 1; }
for f in "$before" "$after"; do
  [[ -r "$f" ]] || { echo "profile_chart: cannot read $f" >&2; exit 1; }
done
data=$(mktemp)
trap 'rm -f "$data"' EXIT

# name <tab> before% <tab> after%, the N largest.
awk -v top="$top" '
  function shorten(dso, sym,   s, out, depth, i, c) {
    # Stripped libraries show addresses: name them by their library.
    if (sym ~ /^0x[0-9a-f]+$/) { sub(/\.so.*/, "", dso); return dso " " sym }
    gsub(/\(anonymous namespace\)::/, "", sym)
    # Drop template arguments and parameter lists: keep depth-0 text.
    out = ""; depth = 0
    for (i = 1; i <= length(sym); ++i) {
      c = substr(sym, i, 1)
      if (c == "<" || c == "(") { if (depth == 0) out = out (c == "<" ? "<>" : "()"); ++depth; continue }
      if (c == ">" || c == ")") { if (depth > 0) --depth; continue }
      if (depth == 0) out = out c
    }
    if (length(out) > 60) out = substr(out, 1, 57) "..."
    return out
  }
  FNR == 1 { ++file }
  /^[ \t]*[0-9.]+%/ {
    pct = $1; sub(/%/, "", pct)
    # "  9.42%  dso  [.] symbol" ([k]: kernel); the dso column may be absent.
    if (!match($0, /\[[.k]\][ \t]+/)) next
    kernel = substr($0, RSTART, 3) == "[k]"
    dso = (NF > 2 && $2 !~ /^\[[.k]\]$/) ? $2 : ""
    sym = substr($0, RSTART + RLENGTH); sub(/[ \t]+$/, "", sym)
    name = (kernel ? "[k] " : "") shorten(dso, sym)
    if (!(name in seen)) { seen[name] = 1; names[++n] = name }
    v[file, name] += pct
  }
  END {
    for (i = 1; i <= n; ++i) {
      m = v[1, names[i]] > v[2, names[i]] ? v[1, names[i]] : v[2, names[i]]
      printf "%.4f\t%s\t%.2f\t%.2f\n", m, names[i], v[1, names[i]] + 0, v[2, names[i]] + 0
    }
  }' "$before" "$after" | sort -t$'\t' -k1,1gr | head -n "$top" | cut -f2- > "$data"
[[ -s "$data" ]] || { echo "profile_chart: no 'NN.NN%' lines in $before or $after" >&2; exit 1; }
rows=$(wc -l < "$data")
case "$out" in
  *.svg) terminal="svg size 1100,$((140 + 34 * rows)) font \"sans,11\" noenhanced background rgb 'white'" ;;
  *.png) terminal="pngcairo size 1100,$((140 + 34 * rows)) font \",10\" noenhanced" ;;
  *) echo "profile_chart: $out: the output must end in .svg or .png" >&2; exit 1 ;;
esac
gnuplot <<GP
set terminal $terminal
set output "$out"
set datafile separator "\t"
set title "$title"
set xlabel "self time, % of samples"
set style fill solid 0.75 border -1
set yrange [$rows - 0.4:-0.6]
set xrange [0:*]
set grid x
set ytics nomirror
set key bottom right
plot "$data" using (\$2*0.5):(\$0-0.18):(\$2*0.5):(0.17):yticlabels(1) with boxxyerror lc rgb "#aa4444" title "before", \
     "$data" using (\$3*0.5):(\$0+0.18):(\$3*0.5):(0.17) with boxxyerror lc rgb "#4477aa" title "after", \
     "$data" using 2:(\$0-0.18):(sprintf(" %.1f%%", \$2)) with labels left font ",9" notitle, \
     "$data" using 3:(\$0+0.18):(sprintf(" %.1f%%", \$3)) with labels left font ",9" notitle
GP
echo "profile_chart: $out ($rows symbols)"
