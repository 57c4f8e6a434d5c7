#!/usr/bin/env bash
# A fast fake Ralph loop for the soak and the memory benchmarks (scripts/soak.py, scripts/bench_supervisor.py).
# Each iteration prints a marker line (run the supervisor with --iteration-marker '^\[fast-loop\] iteration ')
# then what an agent call prints (stream-json events and a result with token usage), and rewrites one of a
# fixed set of files, so every iteration makes progress while the workspace does not grow.
#   FAST_LOOP_ITERATIONS  how many iterations (default 1000)
#   FAST_LOOP_SLEEP       seconds each iteration lasts, roughly (default 0.02)
#   FAST_LOOP_FILES       how many files it takes turns rewriting under src/ (default 20)
#   FAST_LOOP_ERROR_EVERY every Nth iteration also prints an error line (default 50; 0 = never)
n=${FAST_LOOP_ITERATIONS:-1000}
pause=${FAST_LOOP_SLEEP:-0.02}
files=${FAST_LOOP_FILES:-20}
error_every=${FAST_LOOP_ERROR_EVERY:-50}
verbs=(Implemented Refactored Tested Documented Fixed Extended Simplified Renamed Reviewed Optimised Split Merged)
things=(parser cache router schema migration handler logger client config scheduler exporter validator index)
mkdir -p src
for ((i = 1; i <= n; i++)); do
    echo "[fast-loop] iteration $i"
    echo '{"type":"system","subtype":"init","session_id":"fast-loop-session"}'
    echo "{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"Working on step $i: editing src/step_$((i % files)).py\"}]}}"
    if [ "$error_every" -gt 0 ] && [ $((i % error_every)) -eq 0 ]; then
        echo "Error: Failed to compile src/step_$((i % files)).py:$((i % 300)):5"
    fi
    printf 'STEP = %d\n' "$i" > "src/step_$((i % files)).py"
    echo "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"${verbs[i % 12]} the ${things[i % 13]} ${things[(i / 13) % 13]} for step $i.\",\"usage\":{\"input_tokens\":600,\"output_tokens\":$((400 + i % 300))}}"
    sleep "$pause"
done
echo "[fast-loop] done after $n iterations"
