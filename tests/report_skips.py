#!/usr/bin/env python3
"""Lists the tests a ctest run skipped, each with its reason, so that a skip
is never silent. Reads the JUnit file of that run (ctest --output-junit).

Usage: report_skips.py JUNIT_XML
Prints "skipped: none", or "skipped: N tests" and one "  NAME: REASON" line
each. Always exits 0: the ctest run decides pass or fail.
"""
import pathlib
import sys
import xml.etree.ElementTree as ET


def reason(output: str) -> str:
    """The skip message: GoogleTest's text after '...: Skipped', or the
    line of a script that says SKIP."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(": Skipped"):
            text = []
            for follow in lines[i + 1:]:
                if follow.startswith("[  SKIPPED ]"):
                    break
                text.append(follow.strip())
            found = " ".join(t for t in text if t)
            if found:
                return found
    for line in lines:
        if line.startswith("SKIP") or "skip" in line.lower():
            return line.strip()
    return "(no reason printed)"


def main() -> int:
    path = pathlib.Path(sys.argv[1])
    if not path.exists():
        print(f"report_skips: no JUnit file at {path}")
        return 0
    skipped = []
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("skipped") is None and case.get("status") != "notrun":
            continue
        out = case.findtext("system-out") or ""
        skipped.append((case.get("name"), reason(out)))
    if not skipped:
        print("skipped: none")
        return 0
    print(f"skipped: {len(skipped)} tests")
    for name, why in skipped:
        print(f"  {name}: {why[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
