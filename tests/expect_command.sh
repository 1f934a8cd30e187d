#!/usr/bin/env bash
# Runs a command as a test and checks both its exit status and its output
# (ctest's PASS_REGULAR_EXPRESSION alone ignores the exit status, so a
# command that crashes after printing the expected line would pass).
#   expect_command.sh STATUS REGEX COMMAND [ARG...]
# Passes when COMMAND exits with exactly STATUS (a number) and its stdout and
# stderr together contain a match of the extended regular expression REGEX.
# The output is always printed, so a failure shows what the command said.
set -uo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: expect_command.sh STATUS REGEX COMMAND [ARG...]" >&2
  exit 2
fi
want_status=$1 regex=$2
shift 2
out=$("$@" 2>&1)
status=$?
printf '%s\n' "$out"
fail=0
if [[ $status -ne $want_status ]]; then
  if [[ $status -gt 128 ]]; then
    echo "expect_command: '$1' was killed by signal $((status - 128)) (exit $status), expected exit $want_status" >&2
  else
    echo "expect_command: '$1' exited $status, expected $want_status" >&2
  fi
  fail=1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "expect_command: the output of '$1' does not match: $regex" >&2
  fail=1
fi
exit $fail
