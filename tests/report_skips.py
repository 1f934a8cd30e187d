#!/usr/bin/env python3
"""Lists the tests a ctest run skipped, each with its reason, so that a skip
is never silent. Reads ctest's log of the last run.

Usage: report_skips.py BUILD_DIR
Prints "skipped: N tests" and one "  NAME: REASON" line each (nothing when
none skipped). Always exits 0: the ctest run decides pass or fail.
"""
import pathlib
import re
import sys


def blocks(log: str):
    """(name, output, trailer) for every test in the log; the trailer holds
    ctest's verdict lines (e.g. "Skip regular expression found")."""
    pattern = re.compile(
        r"^\d+/\d+ Test: (?P<name>.+?)\n.*?^Output:\n-+\n(?P<out>.*?)<end of output>\n"
        r"(?P<trailer>.*?)time elapsed",
        re.S | re.M,
    )
    for m in pattern.finditer(log):
        yield m["name"], m["out"], m["trailer"]


def reason(output: str) -> str:
    """The skip message: GoogleTest's text after 'Skipped', or a SKIP line."""
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
    log_path = pathlib.Path(sys.argv[1]) / "Testing" / "Temporary" / "LastTest.log"
    if not log_path.exists():
        print(f"report_skips: no ctest log at {log_path}")
        return 0
    log = log_path.read_text(errors="replace")
    skipped = []
    for name, out, trailer in blocks(log):
        if "[  SKIPPED ]" in out or re.search(r"^Skip", trailer, re.M) or "Test Skipped" in trailer:
            skipped.append((name, reason(out)))
    if skipped:
        print(f"skipped: {len(skipped)} tests")
        for name, why in skipped:
            print(f"  {name}: {why[:300]}")
    else:
        print("skipped: none")
    return 0


if __name__ == "__main__":
    sys.exit(main())
