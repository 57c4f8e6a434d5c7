#!/usr/bin/env bash
# Run every benchmark side by side with its baseline and rewrite docs/benchmarks.md.
#   scripts/bench.sh [--quick] [--only NAME,NAME] [--no-soak] [--assemble-only]
#     --quick          small sizes (minutes instead of the better part of an hour)
#     --only           run only these sections (tap, supervisor, soak, filter, tree, workspace, check, fleet, ...);
#                      the others keep their last docs/bench/<name>.md
#     --no-soak        skip the soak (scripts/soak.py: 10,000 iterations; 500 with --quick)
#     --assemble-only  run nothing, rebuild docs/benchmarks.md from docs/bench/
# Each scripts/bench_<name>.py writes docs/bench/<name>.md (and, for tap, supervisor and soak, <name>.json).
# The supervisor's 10,000-iteration memory rows come from the soak's run when the soak runs too.
# The heavy, timing-sensitive ones (tap, echo, supervisor) run last.
set -eu
quick=""
only=""
soak=1
run=1
while [ $# -gt 0 ]; do
    case "$1" in
        --quick) quick="--quick" ;;
        --only) only=",$2,"; shift ;;
        --no-soak) soak=0 ;;
        --assemble-only) run=0 ;;
        -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
        *) echo "bench.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
    esac
    shift
done
. "$(dirname "$0")/_venv.sh" "[test]"
cd "$ROOT"
wanted() { [ -z "$only" ] || [[ "$only" == *",$1,"* ]]; }
PY="$VENV/bin/python"
load_start=$(cut -d' ' -f1 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
failed=""
if [ "$run" = 1 ]; then
    names=""
    for script in scripts/bench_*.py; do
        name=$(basename "$script" .py); name=${name#bench_}
        case "$name" in tap|echo|supervisor) ;; *) names="$names $name" ;; esac
    done
    for name in $names; do
        wanted "$name" || continue
        echo "== bench_$name $quick"
        "$PY" "scripts/bench_$name.py" $quick || failed="$failed $name"
    done
    soak_json=()
    if [ "$soak" = 1 ] && wanted soak; then
        echo "== soak $quick"
        if "$PY" scripts/soak.py $quick; then :; else failed="$failed soak"; fi
        [ -f docs/bench/soak.json ] && soak_json=(--soak-json docs/bench/soak.json)
    fi
    for name in tap echo supervisor; do
        wanted "$name" || continue
        echo "== bench_$name $quick"
        extra=()
        [ "$name" = supervisor ] && extra=("${soak_json[@]}")
        "$PY" "scripts/bench_$name.py" $quick "${extra[@]}" || failed="$failed $name"
    done
fi
"$PY" scripts/_benchkit.py assemble "$load_start" "$started"
left=$(ps -eo args | grep -c '[r]alph-bench-' || true)
[ "$left" = 0 ] || echo "bench.sh: warning: $left benchmark processes still running" >&2
if [ -n "$failed" ]; then
    echo "bench.sh: these benchmarks failed or missed a check:$failed (their sections say why)" >&2
    exit 1
fi
