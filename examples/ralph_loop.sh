#!/usr/bin/env bash
# A small Ralph-style loop: call the agent on the prompt again and again, through GNU timeout,
# as frankbria/ralph-claude-code's ralph_loop.sh does (here with the fake agents in examples/bin).
#   RALPH_LOOP_MAX    stop after this many calls (default: never)
#   RALPH_LOOP_PAUSE  seconds between calls (default 0.5)
#   RALPH_LOOP_TIMEOUT  seconds a call may take (default 60)
#   RALPH_LOOP_AGENT    claude (default), codex, gemini, opencode, cursor or amp: the CLI called, with its
#                       machine-readable output
#   RALPH_LOOP_FORMAT   claude's and cursor-agent's --output-format: json (default), stream-json (Ralph's --live)
#                       or text; gemini's -o (json, stream-json or text); text turns codex's, opencode's and
#                       amp's JSON off
here=$(cd "$(dirname "$0")" && pwd)
# The fake agent in examples/bin, unless the caller put it on PATH already (scripts/demo.sh and the tests do,
# so that ralph-supervise's call shims, which it puts first on PATH, stay in front of it).
case ":$PATH:" in *":$here/bin:"*) ;; *) export PATH="$here/bin:$PATH" ;; esac
prompt=${RALPH_PROMPT:-"Implement the next step of the plan in PLAN.md."}
agent=${RALPH_LOOP_AGENT:-claude}
format=${RALPH_LOOP_FORMAT:-json}
loop=0
while true; do
    loop=$((loop + 1))
    echo "[ralph] loop #$loop: calling $agent"
    case "$agent" in
        codex)
            json=--json; [ "$format" = text ] && json=""
            timeout "${RALPH_LOOP_TIMEOUT:-60}" codex exec $json --skip-git-repo-check "Loop #$loop: $prompt" < /dev/null ;;
        gemini)
            timeout "${RALPH_LOOP_TIMEOUT:-60}" gemini -o "$format" --yolo -p "Loop #$loop: $prompt" < /dev/null ;;
        opencode)
            fmt=json; [ "$format" = text ] && fmt=default
            timeout "${RALPH_LOOP_TIMEOUT:-60}" opencode run --format "$fmt" "Loop #$loop: $prompt" < /dev/null ;;
        cursor)
            timeout "${RALPH_LOOP_TIMEOUT:-60}" cursor-agent -p --output-format "$format" --force \
                "Loop #$loop: $prompt" < /dev/null ;;
        amp)
            json=--stream-json; [ "$format" = text ] && json=""
            timeout "${RALPH_LOOP_TIMEOUT:-60}" amp -x "Loop #$loop: $prompt" $json < /dev/null ;;
        *)
            timeout "${RALPH_LOOP_TIMEOUT:-60}" claude --output-format "$format" \
                --append-system-prompt "Loop #$loop of the fake Ralph loop" -p "$prompt" < /dev/null ;;
    esac
    echo "[ralph] loop #$loop: $agent exited with $?"
    if [ -n "${RALPH_LOOP_MAX:-}" ] && [ "$loop" -ge "$RALPH_LOOP_MAX" ]; then
        echo "[ralph] reached RALPH_LOOP_MAX=$RALPH_LOOP_MAX, done"
        exit 0
    fi
    sleep "${RALPH_LOOP_PAUSE:-0.5}"
done
