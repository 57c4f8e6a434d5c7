#!/usr/bin/env bash
# Set up the environment (a virtual environment in .venv) and run the whole test suite.
# Extra arguments go to pytest. "No tests collected" (pytest exit 5) is a failure.
set -eu
cd "$(dirname "$0")/.."
. scripts/_venv.sh "[test]"
set +e
python -m pytest "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
    echo "scripts/test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$code"
