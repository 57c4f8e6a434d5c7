#!/usr/bin/env bash
# Set up the environment (a virtual environment in .venv) and run the whole test suite.
#   scripts/test.sh            everything (what CI runs), in 3 worker processes (most tests wait on real
#                              processes, so 3 workers keep 2 cores busy); RALPH_TEST_WORKERS=0 runs them in one
#   scripts/test.sh --fast     the fast lane: every test not marked slow (no supervisor started)
#   RALPH_TEST_NO_SETUP=1      skip scripts/setup.d (the installs of the tools some tests need)
# Extra arguments go to pytest. "No tests collected" (pytest exit 5) is a failure. Every skip is listed at the
# end with its reason, and a skip not allowed by tests/allowed_skips.txt fails the run (tests/helpers/skips.py).
set -eu
cd "$(dirname "$0")/.."
. scripts/_venv.sh "[test]"

# The tools the tests need, installed where missing (scripts/setup.d/README.md); never fatal.
have() { command -v "$1" >/dev/null 2>&1; }
apt_install() {
    have apt-get || return 1
    [ "$(id -u)" = "0" ] || return 1
    (
        flock -w 600 9 || exit 1
        if [ ! -f /tmp/.ralph-apt-updated ]; then
            DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 && touch /tmp/.ralph-apt-updated
        fi
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1
    ) 9>/tmp/.ralph-apt.lock
}
if [ -z "${RALPH_TEST_NO_SETUP:-}" ]; then
    for _setup in scripts/setup.d/*.sh; do
        [ -e "$_setup" ] || continue
        ( . "$_setup" ) || echo "scripts/test.sh: $_setup could not set everything up (the tests that need it skip)" >&2
    done
fi
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
python -m pytest ${parallel[@]+"${parallel[@]}"} ${fast[@]+"${fast[@]}"} --allowed-skips=tests/allowed_skips.txt "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
    echo "scripts/test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$code"
