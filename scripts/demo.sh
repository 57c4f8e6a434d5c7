#!/usr/bin/env bash
# The main job in one command: supervise a small Ralph-style loop whose agent makes progress twice
# and then gets stuck. The supervisor sees three iterations in a row without progress, opens the
# breaker and freezes the whole process tree; after a short cooldown it thaws the tree for one
# trial iteration, which fails too, so the breaker opens for good and the tree is stopped (exit 2).
# Sets up .venv (and installs this package) on first use.
#   scripts/demo.sh [--agent claude|codex|gemini|opencode|cursor|amp]   the fake agent CLI the loop calls (default claude);
#                   the supervisor is not told which: it reads each call with the adapter of the process
set -eu
agent=claude
while [ $# -gt 0 ]; do
    case "$1" in
        --agent) agent=${2:?--agent needs a name}; shift ;;
        --agent=*) agent=${1#--agent=} ;;
        -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
        *) echo "demo.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
    esac
    shift
done
case "$agent" in claude|codex|gemini|opencode|cursor|amp) ;; *) echo "demo.sh: --agent: no fake $agent (claude, codex, gemini, opencode, cursor, amp)" >&2; exit 1 ;; esac
cd "$(dirname "$0")/.."
. scripts/_venv.sh ""

work=$(mktemp -d "${TMPDIR:-/tmp}/ralph-demo.XXXXXX")
cp examples/PLAN.md "$work/PLAN.md"
git -C "$work" init -q 2>/dev/null || true
echo "== workspace: $work"
echo "== agent: $agent (a fake CLI in examples/bin)"
echo "== ralph-supervise --no-progress 3 --cooldown 0.1 --max-opens 2 -- examples/ralph_loop.sh"
echo

# The fake agents first on PATH: the loop never reaches a real one, and the supervisor's call shims go in front.
export PATH="$PWD/examples/bin:$PATH"
export FAKE_AGENT_SCENARIO=progress-then-stuck FAKE_AGENT_PROGRESS_CALLS=2 FAKE_AGENT_DELAY=1 RALPH_LOOP_PAUSE=0.5
export RALPH_LOOP_AGENT=$agent
ralph-supervise run -w "$work" --no-progress 3 --cooldown 0.1 --max-opens 2 --no-echo --log-format console \
    -- "$PWD/examples/ralph_loop.sh" &
sup=$!

# Wait until the breaker opens (the tree is frozen), then show what a human would look at.
for _ in $(seq 1 300); do
    if ralph-supervise status --json -w "$work" 2>/dev/null | grep -q '"state": "OPEN"'; then break; fi
    sleep 0.1
done
sleep 0.3
echo
echo "== the breaker opened; the tree is paused. ralph-supervise status:"
ralph-supervise status -w "$work" || true
echo
echo "== tmux line: $(ralph-supervise status --tmux -w "$work")"
echo
# The state folder is outside the workspace (~/.local/state/ralph-supervise/workspaces/...): status names it.
state=$(ralph-supervise status --json -w "$work" | python3 -c 'import json, sys; print(json.load(sys.stdin)["state_dir"])')
echo "== $state/escalation.md:"
cat "$state/escalation.md" 2>/dev/null || echo "(none yet)"
echo
echo "== waiting for the cooldown (6 s) and the trial iteration..."
set +e
wait "$sup"
code=$?
set -e
echo
echo "== supervisor exited with $code (2 = the breaker opened for good and the tree was stopped)"
echo "== history:"
cat "$state/history.jsonl"
echo "== processes left behind: $(pgrep -f "$work" | wc -l)"
[ "$code" -eq 2 ]
