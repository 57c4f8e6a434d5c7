#!/usr/bin/env bash
# Install loop-context 1.5.0 (the ledger breaker `check` is compared with) from the npm registry into
# ./node_modules of the repository, where tests/test_check_vs_loop_context.py and scripts/bench_check.py look.
# Does nothing when that version is there already. Needs node and npm (Debian: apt-get install nodejs npm).
#   scripts/install-loop-context.sh     prints the path of dist/cli.js; exit 1 (saying why) when it cannot
set -eu
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACKAGE="@cobusgreyling/loop-context"
VERSION="1.5.0"
DIR="$ROOT/node_modules/$PACKAGE"
installed() {
    [ -f "$DIR/dist/cli.js" ] && [ -f "$DIR/package.json" ] &&
        grep -q "\"version\": *\"$VERSION\"" "$DIR/package.json"
}
if ! installed; then
    command -v npm >/dev/null 2>&1 || { echo "install-loop-context: npm is not installed" >&2; exit 1; }
    # --no-save, --no-package-lock: the repository gets no package.json of its own, only node_modules/ (ignored)
    if ! out=$(npm install --prefix "$ROOT" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
               "$PACKAGE@$VERSION" 2>&1); then
        echo "install-loop-context: npm install $PACKAGE@$VERSION failed: $(printf '%s' "$out" | tail -n 3)" >&2
        exit 1
    fi
    installed || { echo "install-loop-context: npm installed no $PACKAGE $VERSION in $DIR" >&2; exit 1; }
fi
echo "$DIR/dist/cli.js"
