#!/usr/bin/env bash
# A small Ralph-style loop: call the agent on the prompt again and again, through GNU timeout,
# as frankbria/ralph-claude-code's ralph_loop.sh does (here with the fake agent in examples/bin).
#   RALPH_LOOP_MAX    stop after this many calls (default: never)
#   RALPH_LOOP_PAUSE  seconds between calls (default 0.5)
#   RALPH_LOOP_TIMEOUT  seconds a call may take (default 60)
#   RALPH_LOOP_FORMAT   claude's --output-format: json (default), stream-json (Ralph's --live) or text
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$here/bin:$PATH"
prompt=${RALPH_PROMPT:-"Implement the next step of the plan in PLAN.md."}
loop=0
while true; do
    loop=$((loop + 1))
    echo "[ralph] loop #$loop: calling claude"
    timeout "${RALPH_LOOP_TIMEOUT:-60}" claude --output-format "${RALPH_LOOP_FORMAT:-json}" \
        --append-system-prompt "Loop #$loop of the fake Ralph loop" -p "$prompt" < /dev/null
    echo "[ralph] loop #$loop: claude exited with $?"
    if [ -n "${RALPH_LOOP_MAX:-}" ] && [ "$loop" -ge "$RALPH_LOOP_MAX" ]; then
        echo "[ralph] reached RALPH_LOOP_MAX=$RALPH_LOOP_MAX, done"
        exit 0
    fi
    sleep "${RALPH_LOOP_PAUSE:-0.5}"
done
