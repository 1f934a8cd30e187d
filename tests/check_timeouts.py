#!/usr/bin/env python3
"""Every ctest case has a TIMEOUT property (a hung test must fail, not
hold CI until its own limit).

Usage: check_timeouts.py CTEST BUILD_DIR
Lists the tests of BUILD_DIR with `ctest --show-only=json-v1`; exits 1
naming each test without a TIMEOUT, 0 when all have one. A NAME_NOT_BUILT
entry is not a test: gtest_discover_tests stands it in for an executable
this build folder did not build (the ASan run leaves some out,
tests/sanitize/run.sh), and it has no properties to check.
"""
import json
import subprocess
import sys


def main() -> int:
    ctest, build = sys.argv[1], sys.argv[2]
    listing = subprocess.run([ctest, "--show-only=json-v1"], cwd=build, check=True,
                             capture_output=True, text=True).stdout
    tests = json.loads(listing)["tests"]
    missing = []
    tests = [t for t in tests if not t["name"].endswith("_NOT_BUILT")]
    for t in tests:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        if not props.get("TIMEOUT"):
            missing.append(t["name"])
    print(f"{len(tests)} tests, {len(tests) - len(missing)} with a TIMEOUT")
    for name in missing:
        print(f"no TIMEOUT: {name}")
    return 1 if missing or not tests else 0


if __name__ == "__main__":
    sys.exit(main())
