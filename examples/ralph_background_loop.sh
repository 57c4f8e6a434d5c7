#!/usr/bin/env bash
# Ralph's default "background" mode, in small: each call runs in the background through GNU
# timeout, writes its whole output to a new .ralph/logs/claude_output_<timestamp>.log, and the
# loop polls for it while churning its own bookkeeping files under .ralph/ (none of it progress).
#   RALPH_LOOP_FORMAT  json (default) | stream-json (what --live uses) | text
#   RALPH_LOOP_MAX, RALPH_LOOP_PAUSE, RALPH_LOOP_TIMEOUT as in ralph_loop.sh
here=$(cd "$(dirname "$0")" && pwd)
# The fake agent in examples/bin, unless the caller put it on PATH already (scripts/demo.sh and the tests do,
# so that ralph-supervise's call shims, which it puts first on PATH, stay in front of it).
case ":$PATH:" in *":$here/bin:"*) ;; *) export PATH="$here/bin:$PATH" ;; esac
mkdir -p .ralph/logs
loop=0
while true; do
    loop=$((loop + 1))
    log=".ralph/logs/claude_output_$(date +%Y-%m-%d_%H-%M-%S)_$loop.log"
    echo "[$(date '+%F %T')] [INFO] Loop #$loop: starting claude, output in $log" >> .ralph/logs/ralph.log
    timeout "${RALPH_LOOP_TIMEOUT:-60}" claude --output-format "${RALPH_LOOP_FORMAT:-json}" \
        --append-system-prompt "Loop #$loop" -p "do the next task" < /dev/null > "$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        printf '{"loop_count": %d, "status": "running"}\n' "$loop" > .ralph/status.json
        sleep 0.1
    done
    wait "$pid"
    printf '{"loop_count": %d, "status": "done", "last_action": "executing"}\n' "$loop" > .ralph/status.json
    echo "[ralph] loop #$loop finished"
    if [ -n "${RALPH_LOOP_MAX:-}" ] && [ "$loop" -ge "$RALPH_LOOP_MAX" ]; then exit 0; fi
    sleep "${RALPH_LOOP_PAUSE:-0.5}"
done
