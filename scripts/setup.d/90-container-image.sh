# The image build and a loop run in it (scripts/container-check.sh --result), before the suite and outside its
# timing: in CI (CI set) or when asked (RALPH_TEST_IMAGE=1), since a build takes minutes (the Debian base made
# by debootstrap is kept in ~/.cache between runs). Never fails the set-up: tests/test_container_image.py reads
# the result and passes, fails, or skips with the reason (a machine that cannot build, or no run before it).
if [ -n "${CI:-}" ] || [ "${RALPH_TEST_IMAGE:-}" = 1 ]; then
    result=$(python -c "from tests.helpers.container_image import result_path; print(result_path())")
    mkdir -p "$(dirname "$result")"
    echo "scripts/test.sh: building the image and running a loop in it (scripts/container-check.sh; minutes)" >&2
    started=$(date +%s)
    code=0
    timeout 1800 bash scripts/container-check.sh --result "$result" >"$result.log" 2>&1 || code=$?
    if [ ! -s "$result" ]; then  # killed, or crashed before its end: a failure, not a machine that cannot
        python -m tests.helpers.container_image write "$result" failed \
            "scripts/container-check.sh ended with $code and no result (log: $result.log)" --
    fi
    echo "scripts/test.sh: image check: $(python -c "
import sys
from tests.helpers.container_image import read_result
r = read_result(__import__('pathlib').Path(sys.argv[1]))
print('no result (see ' + sys.argv[1] + '.log)' if r is None else r.status + (': ' + r.reason if r.reason else ''))
" "$result") ($(( $(date +%s) - started )) s)" >&2
fi
