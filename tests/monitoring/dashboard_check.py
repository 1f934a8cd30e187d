#!/usr/bin/env python3
"""Offline check of the Grafana dashboard (monitoring/grafana/strata.json).

Every panel query must parse as PromQL (promtool check rules, on a rule file
with one recording rule per query, $node replaced by a regex), and every
strata_* metric it names must be in the catalogue (docs/metrics.md), so a
renamed metric cannot leave a panel silently empty.

Usage: dashboard_check.py DASHBOARD CATALOGUE_MD WORK_DIR
Exit 0: fine; 1: a problem (printed); 77: promtool is missing (skip).
"""
import json
import re
import shutil
import subprocess
import sys


def queries(panels):
    for p in panels:
        yield from queries(p.get("panels", []))
        for t in p.get("targets", []):
            if t.get("expr"):
                yield p.get("title", "?"), t["expr"]


def main():
    dashboard, catalogue, work = sys.argv[1:4]
    promtool = shutil.which("promtool")
    if not promtool:
        print("promtool not found (Debian package prometheus): skipping")
        return 77
    with open(dashboard) as f:
        board = json.load(f)
    with open(catalogue) as f:
        documented = set(re.findall(r"`(strata_[a-z0-9_]+)`", f.read()))
    found = list(queries(board.get("panels", [])))
    if not found:
        print(f"{dashboard}: no queries")
        return 1
    problems = []
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, (title, expr) in enumerate(found):
        concrete = expr.replace("$node", ".*").replace("$__rate_interval", "1m")
        lines.append(f"      - record: dashboard:query{i}")
        lines.append("        expr: " + json.dumps(concrete))
        for name in set(re.findall(r"\bstrata_[a-z0-9_]+", expr)):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name not in documented and base not in documented:
                problems.append(f"panel '{title}': {name} is not in {catalogue}")
    rules = f"{work}/dashboard-rules.yml"
    with open(rules, "w") as f:
        f.write("\n".join(lines) + "\n")
    run = subprocess.run([promtool, "check", "rules", rules], capture_output=True, text=True)
    if run.returncode != 0:
        problems.append("promtool check rules failed:\n" + run.stdout + run.stderr)
    for p in problems:
        print(p)
    print(f"{len(found)} queries checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
