#!/usr/bin/env bash
# Set up the environment (a virtual environment in .venv) and run the whole test suite.
#   scripts/test.sh            everything (what CI runs)
#   scripts/test.sh --fast     the fast lane: every test not marked slow (no supervisor started), about a minute
# Extra arguments go to pytest. "No tests collected" (pytest exit 5) is a failure.
set -eu
cd "$(dirname "$0")/.."
. scripts/_venv.sh "[test]"
fast=()
if [ "${1:-}" = "--fast" ]; then
    shift
    fast=(-m "not slow")
fi
set +e
python -m pytest ${fast[@]+"${fast[@]}"} "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
    echo "scripts/test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$code"
