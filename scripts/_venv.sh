# Sourced by the scripts: make sure .venv exists and holds this package with the given extras.
# Usage: . scripts/_venv.sh [EXTRAS]   (EXTRAS like "[test]")
set -eu
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="${RALPH_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
fi
extras="${1:-}"
stamp="$VENV/.ralph-installed$extras"
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT$extras"
    touch "$stamp"
fi
export PATH="$VENV/bin:$PATH"
