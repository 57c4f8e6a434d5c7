#!/usr/bin/env bash
# Build deploy/docker's image and run a loop in it, for real (not part of the test suite: a build takes minutes).
#   scripts/container-check.sh
# 0. Installs buildah, podman, debootstrap and runc from Debian's packages where they are missing.
# 1. Base: the Dockerfile's own FROM when a registry serves it; else a Debian root made here by debootstrap
#    from Debian's packages (python3, pip, CA certificates, the machine's own CAs too), imported as the base
#    (buildah build --from). Needs root, buildah, and debootstrap for that fallback.
# 2. Builds the image with buildah (deploy/docker/Dockerfile, its .dockerignore) and records its size.
# 3. With podman: a stuck example loop (examples/ralph_loop.sh and the fake agents, on the workspace volume)
#    must end with exit 2, and `status --json` read from the state volume on the host must say OPEN, final;
#    a working loop must stop on SIGTERM to the container within the grace, exit 143, no survivors, and no
#    process of either container may be left on the host.
# Writes docs/bench/container.md (and rebuilds docs/benchmarks.md), and says plainly what it could not run.
# Exit 0 when everything it ran passed, 1 otherwise.
#   scripts/container-check.sh --result FILE
# The same, for the test suite (scripts/setup.d/90-container-image.sh, before pytest): the result goes to FILE
# as JSON (passed, failed, or cannot: this machine cannot build, with the reason) and the table to FILE.md;
# docs/ is not touched. tests/test_container_image.py reads it (tests/helpers/container_image.py).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
RESULT=""
if [ $# -gt 0 ]; then
    if [ "$1" != --result ] || [ $# -ne 2 ] || [ -z "$2" ]; then
        echo "usage: scripts/container-check.sh [--result FILE]" >&2
        exit 1
    fi
    RESULT=$2
fi
. scripts/_venv.sh "[test]" >/dev/null
IMAGE=localhost/ralph-loop:check
FROM_IMAGE=$(sed -n 's/^FROM \([^ ]*\).*/\1/p' deploy/docker/Dockerfile | head -1)
LOCAL_BASE=localhost/ralph-debian-base:bookworm
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/ralph-supervise/container-check
WORK=$(mktemp -d /tmp/ralph-container-check.XXXXXX)
CHECK_ID=ralph-check-$$-$RANDOM
mkdir -p "$CACHE"
load_start=$(cut -d' ' -f1 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')

rows=()      # "metric|ours|target|met"
not_run=()
failed=0
say() { echo "container-check: $*" >&2; }
row() { rows+=("$1|$2|$3|$4"); [ "$4" = "**NO**" ] && failed=1; return 0; }
have() { command -v "$1" >/dev/null 2>&1; }
now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$2"; }
cleanup() {
    if have podman; then
        podman rm -f "$CHECK_ID-stuck" "$CHECK_ID-term" >/dev/null 2>&1
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

write_report() {
    {
        echo "## Container: the image built, a loop run in it"
        echo
        echo "Machine: \`$(uname -srm)\`, $(nproc) CPUs; code $(git rev-parse --short HEAD 2>/dev/null || echo unknown);"
        echo "load average $load_start at the start, $(cut -d' ' -f1 /proc/loadavg) at the end. Run by"
        echo "\`scripts/container-check.sh\` on $started: base $base_how; buildah $(buildah --version 2>/dev/null | awk '{print $3}'),"
        echo "podman $(podman --version 2>/dev/null | awk '{print $3}')."
        echo
        echo "| metric | ours | baseline | ratio | target | met? |"
        echo "|---|---|---|---|---|---|"
        for r in "${rows[@]}"; do
            IFS='|' read -r metric ours target met <<<"$r"
            echo "| $metric | $ours |  |  | $target | $met |"
        done
        echo
        if [ ${#not_run[@]} -gt 0 ]; then
            echo "Not run here:"
            echo
            for n in "${not_run[@]}"; do echo "- $n"; done
        else
            echo "Every part ran."
        fi
    } > "$report"
    if [ -z "$RESULT" ]; then
        rm -f docs/bench/container.json
        python scripts/_benchkit.py assemble "$load_start" "$started" >/dev/null
    fi
    cat "$report"
}
report=docs/bench/container.md
if [ -n "$RESULT" ]; then
    mkdir -p "$(dirname "$RESULT")"
    rm -f "$RESULT"
    report="$RESULT.md"
fi

finish() {  # finish passed|failed|cannot [WHY]: the report, the result for the suite, the exit code
    local status=$1 why=${2:-}
    write_report
    if [ -n "$RESULT" ]; then
        python -m tests.helpers.container_image write "$RESULT" "$status" "$why" ${rows[@]+"${rows[@]}"} \
            -- ${not_run[@]+"${not_run[@]}"}
    fi
    [ "$status" = passed ] && exit 0
    exit 1
}

base_how="none"
if [ "$(id -u)" != 0 ]; then
    say "needs root (buildah and podman with the system's storage): nothing built"
    finish cannot "needs root (buildah and podman with the system's storage): nothing built"
fi
missing=()
for tool in buildah podman debootstrap runc; do have "$tool" || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ] && have apt-get; then  # Debian's packages, under the lock the test set-up uses
    say "installing ${missing[*]} from Debian's packages"
    if ! flock -w 600 /tmp/.ralph-apt.lock env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$WORK/apt.log" 2>&1; then
        say "could not install ${missing[*]}: $(tail -1 "$WORK/apt.log")"
    fi
fi
if ! have buildah; then
    say "buildah is not installed (apt-get install buildah podman debootstrap): nothing built"
    finish cannot "buildah is not installed and could not be (apt-get install buildah podman debootstrap)"
fi

# -- 1. the base --------------------------------------------------------------------------------
from="$FROM_IMAGE"
if timeout 120 buildah pull --quiet "$FROM_IMAGE" >"$WORK/pull.log" 2>&1; then
    base_how="\`$FROM_IMAGE\` pulled from its registry"
else
    say "cannot pull $FROM_IMAGE ($(tail -1 "$WORK/pull.log" | cut -c1-160)): making a Debian base with debootstrap"
    not_run+=("pulling \`$FROM_IMAGE\`: its registry cannot be reached from here (\`buildah pull\` failed)")
    if ! buildah inspect "$LOCAL_BASE" >/dev/null 2>&1; then
        if ! have debootstrap; then
            say "no debootstrap to make a base (apt-get install debootstrap): nothing built"
            base_how="none (no registry, no debootstrap)"
            finish cannot "no registry serves $FROM_IMAGE and there is no debootstrap to make a base"
        fi
        rootfs="$CACHE/rootfs"
        rm -rf "$rootfs"
        t0=$(now)
        if ! debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,ca-certificates \
                bookworm "$rootfs" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1; then
            say "debootstrap failed: $(tail -1 "$WORK/debootstrap.log")"
            base_how="none (debootstrap failed)"
            finish cannot "no registry serves $FROM_IMAGE and debootstrap failed: $(tail -1 "$WORK/debootstrap.log" | cut -c1-200)"
        fi
        # Like the python image: pip may install into the system's Python (no PEP 668 marker), and the
        # base trusts the certificate authorities this machine trusts (its network may need them).
        rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED
        cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/" 2>/dev/null
        chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
        rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
        ctr=$(buildah from scratch)
        mnt=$(buildah mount "$ctr")
        tar -C "$rootfs" -c . | tar -C "$mnt" -x
        buildah umount "$ctr" >/dev/null
        buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$ctr"
        buildah commit --quiet "$ctr" "$LOCAL_BASE" >/dev/null
        buildah rm "$ctr" >/dev/null
        rm -rf "$rootfs"
        elapsed "$t0" "$(now)" > "$CACHE/base-seconds"
    fi
    row "Debian base made by debootstrap (minbase + python3, pip; made once, then kept)" \
        "$(cat "$CACHE/base-seconds" 2>/dev/null || echo '?') s" "(for reference)" ""
    from="$LOCAL_BASE"
    base_how="a Debian bookworm root made by debootstrap from Debian's packages, imported as \`$LOCAL_BASE\` (\`buildah build --from\`)"
fi

# -- how containers can run here ------------------------------------------------------------------
# The first that starts a container: the defaults; runc (crun refuses hybrid cgroups); runc with resource
# limits at or below this machine's hard limits (a runtime cannot raise them without CAP_SYS_RESOURCE).
limits=(--ulimit "nofile=1024:1024" --ulimit "nproc=4096:4096")
run_opts=()
build_opts=()
podman_global=()
runs_here=""
if have podman; then
    for choice in default runc runc-limits; do
        case "$choice" in
            default) global=(); extra=() ;;
            runc) global=(--runtime runc); extra=() ;;
            runc-limits) global=(--runtime runc); extra=("${limits[@]}") ;;
        esac
        if timeout 60 podman "${global[@]}" run --rm --network none "${extra[@]}" "$from" true \
                >"$WORK/probe-$choice.log" 2>&1; then
            runs_here=$choice
            podman_global=("${global[@]}")
            run_opts=("${extra[@]}")
            build_opts=("${global[@]}" "${extra[@]}")
            break
        fi
    done
    if [ -z "$runs_here" ]; then
        say "podman cannot start a container here: $(tail -1 "$WORK/probe-runc-limits.log")"
        build_opts=(--isolation chroot)
    elif [ "$runs_here" != default ]; then
        say "containers run here with: ${build_opts[*]} (the defaults fail: $(tail -1 "$WORK/probe-default.log" | cut -c1-160))"
    fi
else
    build_opts=(--isolation chroot)
fi

# -- 2. the image -------------------------------------------------------------------------------
# The last check's image goes first: each build tags a new one, and the one before it, 2 GB, was left untagged
# (a machine running CI filled its disk with them and the next build failed in `buildah commit`). No layer cache
# is lost: `buildah build` keeps none without --layers.
previous=$(buildah images --quiet --no-trunc "$IMAGE" 2>/dev/null | head -1)
if [ -n "$previous" ]; then
    buildah rmi --force "$previous" >/dev/null 2>&1 || say "the last check's image $previous could not be removed"
fi
t0=$(now)
if buildah build --quiet "${build_opts[@]}" --from "$from" --network host -f deploy/docker/Dockerfile \
        --ignorefile deploy/docker/Dockerfile.dockerignore -t "$IMAGE" . >"$WORK/build.log" 2>&1; then
    size=$(buildah images --format '{{.Size}}' "$IMAGE" | head -1)
    row "image built (\`buildah build\`, deploy/docker/Dockerfile)" "$(elapsed "$t0" "$(now)") s" "builds" "yes"
    row "image size" "$size" "(for reference)" ""
else
    say "the build failed: $(grep -v '^\s*$' "$WORK/build.log" | tail -3 | tr '\n' ' ' | cut -c1-400)"
    cp "$WORK/build.log" "$CACHE/build.log"
    row "image built (\`buildah build\`, deploy/docker/Dockerfile)" "failed (log: $CACHE/build.log)" "builds" "**NO**"
    finish failed "the build failed: $(grep -v '^\s*$' "$WORK/build.log" | tail -3 | tr '\n' ' ' | cut -c1-400)"
fi

# -- 3. a loop in it ----------------------------------------------------------------------------
if ! have podman; then
    not_run+=("running the image: podman is not installed")
elif [ -z "$runs_here" ]; then
    not_run+=("running the image: podman cannot start a container here ($(tail -1 "$WORK/probe-runc-limits.log" | cut -c1-160 | tr '|' '/'))")
else
    [ "$runs_here" = default ] || row "how containers run here" "\`${build_opts[*]}\`" "(the defaults fail here)" ""
    workspace() {  # a workspace volume holding the example loop and the fake agents, owned by the image's user
        local ws="$WORK/$1-workspace" state="$WORK/$1-state"
        mkdir -p "$ws" "$state"
        cp examples/ralph_loop.sh "$ws/"
        cp -r examples/bin "$ws/bin"
        chown -R 1000:1000 "$ws" "$state"
    }
    common=("${run_opts[@]}" --network none -e "RALPH_CHECK_ID=$CHECK_ID" -e RALPH_LOOP_PAUSE=0.2 -e FAKE_AGENT_DELAY=0.3
            -e "PATH=/workspace/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    first_iteration() {  # seconds from $2 (epoch) to the first iteration_started in state folder $1
        python3 - "$1/events.jsonl" "$2" <<'PY'
import json, sys
from datetime import datetime
for line in open(sys.argv[1]):
    try:
        event = json.loads(line)
    except ValueError:
        continue
    if event.get("event") == "iteration_started":
        at = datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()
        print(f"{at - float(sys.argv[2]):.1f}")
        break
PY
    }

    # A stuck loop: the breaker opens after 2 calls without progress, for good (one open allowed).
    workspace stuck
    t0=$(now)
    podman "${podman_global[@]}" run -d --name "$CHECK_ID-stuck" "${common[@]}" -e FAKE_AGENT_SCENARIO=stuck \
        -e CB_NO_PROGRESS_THRESHOLD=2 -e RALPH_SUPERVISE_MAX_OPENS=1 \
        -v "$WORK/stuck-workspace:/workspace" -v "$WORK/stuck-state:/state" "$IMAGE" >/dev/null
    code=$(timeout 120 podman wait "$CHECK_ID-stuck" 2>/dev/null || echo "none (still running after 120 s)")
    row "stuck loop in the container: exit code" "$code" "2" "$([ "$code" = 2 ] && echo yes || echo '**NO**')"
    first=$(first_iteration "$WORK/stuck-state" "$t0" 2>/dev/null)
    row "time from \`podman run\` to the first iteration" "${first:-?} s" "(for reference)" ""
    status=$(python -m ralph_supervisor status --json -w "$WORK/stuck-workspace" --state-dir "$WORK/stuck-state" 2>&1)
    verdict=$(python3 -c 'import json,sys; s=json.loads(sys.argv[1]); print(s["state"], "final" if s["final"] else "not final", s["trigger"])' "$status" 2>/dev/null || echo "unreadable")
    row "\`status --json\` read from the state volume on the host" "$verdict" "OPEN final no-progress" \
        "$([ "$verdict" = "OPEN final no-progress" ] && echo yes || echo '**NO**')"

    # A working loop, stopped with SIGTERM to the container (what docker stop and the kubelet send).
    workspace term
    podman "${podman_global[@]}" run -d --name "$CHECK_ID-term" "${common[@]}" -e FAKE_AGENT_SCENARIO=progress \
        -v "$WORK/term-workspace:/workspace" -v "$WORK/term-state:/state" "$IMAGE" >/dev/null
    for _ in $(seq 1 120); do
        grep -q '"iteration_started"' "$WORK/term-state/events.jsonl" 2>/dev/null && break
        sleep 0.5
    done
    grace=$(podman image inspect "$IMAGE" --format '{{range .Config.Env}}{{println .}}{{end}}' \
            | sed -n 's/^RALPH_SUPERVISE_GRACE=//p')
    t0=$(now)
    podman kill --signal TERM "$CHECK_ID-term" >/dev/null
    code=$(timeout 60 podman wait "$CHECK_ID-term" 2>/dev/null || echo "none (still running after 60 s)")
    took=$(elapsed "$t0" "$(now)")
    row "SIGTERM to a working loop's container: exit code" "$code" "143" "$([ "$code" = 143 ] && echo yes || echo '**NO**')"
    row "SIGTERM to the container's exit" "$took s" "< grace ($grace s) + 5 s" \
        "$(python3 -c "import sys; print('yes' if float(sys.argv[1]) < float(sys.argv[2]) + 5 else '**NO**')" "$took" "${grace:-10}")"
    survivors=$(python3 - "$WORK/term-state/events.jsonl" <<'PY'
import json, sys
stops = [json.loads(l) for l in open(sys.argv[1]) if '"tree_stopped"' in l]
print(sum(len(s.get("survivor_pids") or []) if isinstance(s.get("survivor_pids"), list) else int(s.get("survivors") or 0)
          for s in stops) if stops else "no tree_stopped event")
PY
)
    row "survivors of the tree stop (events.jsonl)" "$survivors" "0" "$([ "$survivors" = 0 ] && echo yes || echo '**NO**')"
    left=$(grep -ls "RALPH_CHECK_ID=$CHECK_ID" /proc/[0-9]*/environ 2>/dev/null | wc -l)
    row "processes of both containers left on the host" "$left" "0" "$([ "$left" = 0 ] && echo yes || echo '**NO**')"
fi

if [ "$failed" = 0 ]; then
    finish passed
fi
finish failed "$(for r in "${rows[@]}"; do case "$r" in *'|**NO**') printf '%s; ' "${r%%|*}";; esac; done)"
