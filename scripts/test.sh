#!/usr/bin/env bash
# Set up the environment (a virtual environment in .venv) and run the whole test suite.
#   scripts/test.sh            everything (what CI runs), in 3 worker processes (most tests wait on real
#                              processes, so 3 workers keep 2 cores busy); RALPH_TEST_WORKERS=0 runs them in one
#   scripts/test.sh --fast     the fast lane: every test not marked slow (no supervisor started)
# Extra arguments go to pytest. "No tests collected" (pytest exit 5) is a failure.
set -eu
cd "$(dirname "$0")/.."
. scripts/_venv.sh "[test]"
fast=()
if [ "${1:-}" = "--fast" ]; then
    shift
    fast=(-m "not slow")
fi
workers=${RALPH_TEST_WORKERS:-3}
parallel=()
if [ "$workers" != "0" ]; then
    parallel=(-n "$workers")
fi
set +e
python -m pytest ${parallel[@]+"${parallel[@]}"} ${fast[@]+"${fast[@]}"} "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
    echo "scripts/test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$code"
