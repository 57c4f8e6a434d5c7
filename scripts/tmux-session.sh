#!/usr/bin/env bash
# Start a loop under ralph-supervise in a new, detached tmux session:
#   pane 0: ralph-supervise run -w DIR -- COMMAND...   (the supervisor and the loop)
#   pane 1: ralph-supervise watch -w DIR               (the live view)
#   status bar: ralph-supervise status --tmux -w DIR, every 5 s
# The tmux server owns the panes, so detaching or logging out of SSH does not disturb the run, and a
# finished pane stays on screen (remain-on-exit) so the supervisor's last words can still be read.
#
# Usage: scripts/tmux-session.sh [-w DIR] [-s SESSION] [-L SOCKET] -- COMMAND [ARG...]
#   -w DIR       the workspace (default: the current directory)
#   -s SESSION   the tmux session name (default: ralph-<workspace folder name>)
#   -L SOCKET    the tmux server socket name (default: your usual tmux server)
# Environment:
#   RALPH_SUPERVISE_BIN   the ralph-supervise program to run (default: ralph-supervise from PATH, else
#                         this repository's .venv)
# Your exported environment (API keys, CB_* thresholds, PATH) is handed to both panes, even when the
# tmux server was started earlier from another environment. Needs tmux 3.0 or newer.
set -euo pipefail

prog=$(basename "$0")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "$prog: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# POSIX single quoting (plain words stay bare): safe for sh, bash, zsh and dash whatever the text holds.
squote="'"
quote() {
    if [[ "$1" =~ ^[A-Za-z0-9_@%+:,./-][A-Za-z0-9_@%+=:,./-]*$ ]]; then printf '%s' "$1"; return; fi
    printf "'%s'" "${1//$squote/$squote\\$squote$squote}"
}
quote_all() {
    local out="" arg
    for arg in "$@"; do out+="$(quote "$arg") "; done
    printf '%s' "${out% }"
}

workspace=$PWD
session=""
tmux_cmd=(tmux)
while [ $# -gt 0 ]; do
    case "$1" in
        -w|--workspace) [ $# -ge 2 ] || die "-w needs a folder"; workspace=$2; shift 2 ;;
        -s|--session)   [ $# -ge 2 ] || die "-s needs a session name"; session=$2; shift 2 ;;
        -L)             [ $# -ge 2 ] || die "-L needs a socket name"; tmux_cmd=(tmux -L "$2"); shift 2 ;;
        -h|--help)      usage; exit 0 ;;
        --)             shift; break ;;
        *)              die "unknown option '$1' (the loop's command goes after --; see --help)" ;;
    esac
done
[ $# -gt 0 ] || die "no command given: put the loop to supervise after --, e.g. -- ralph --monitor"
command -v tmux >/dev/null 2>&1 || die "tmux is not installed"
[ -d "$workspace" ] || die "workspace '$workspace' is not a folder"
workspace=$(cd "$workspace" && pwd -P)

# The program, as an absolute path: the tmux server may have a different PATH than this shell.
if [ -n "${RALPH_SUPERVISE_BIN:-}" ]; then
    found=$(command -v "$RALPH_SUPERVISE_BIN" 2>/dev/null) || die "RALPH_SUPERVISE_BIN '$RALPH_SUPERVISE_BIN' is not a program"
    case "$found" in /*) ;; *) found="$PWD/$found" ;; esac
    bin=("$found")
elif found=$(command -v ralph-supervise 2>/dev/null); then
    bin=("$found")
elif [ -x "$ROOT/.venv/bin/ralph-supervise" ]; then
    bin=("$ROOT/.venv/bin/ralph-supervise")
elif [ -x "$ROOT/.venv/bin/python" ]; then
    bin=("$ROOT/.venv/bin/python" -m ralph_supervisor)
else
    die "ralph-supervise not found: install it, or run scripts/test.sh once to create $ROOT/.venv"
fi

if [ -z "$session" ]; then
    session="ralph-$(basename "$workspace")"
fi
session=$(printf '%s' "$session" | tr -c 'A-Za-z0-9_-' '-')  # tmux reserves '.' and ':' in names
if "${tmux_cmd[@]}" has-session -t "=$session" 2>/dev/null; then
    die "tmux session '$session' already exists: attach with '${tmux_cmd[*]} attach -t $session', or pick another name with -s"
fi

# The exported environment, replayed in each pane from a private file (mode 0600, removed by the pane
# once read): never through a command line, where API keys would show in `ps` and tmux's pane list.
# Variables that describe the outer terminal or tmux itself are left out: inside, tmux sets its own.
write_env_file() {
    local file name
    file=$(umask 077 && mktemp "${TMPDIR:-/tmp}/ralph-tmux-env.XXXXXX")
    while IFS= read -r name; do
        case "$name" in
            TMUX|TMUX_PANE|TERM|TERM_PROGRAM|TERM_PROGRAM_VERSION|COLORTERM|COLUMNS|LINES|SHLVL|PWD|OLDPWD|_|STY|WINDOW) continue ;;
        esac
        [[ "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || continue
        printf 'export %s=%s\n' "$name" "$(quote "${!name-}")"
    done < <(compgen -e) > "$file"
    printf '%s' "$file"
}
run_env=$(write_env_file)
watch_env=$(write_env_file)

pane_line() {  # ENV_FILE ARGS...: the /bin/sh line a pane runs
    local env_file=$1
    shift
    printf '. %s && rm -f %s && cd %s && exec %s' "$(quote "$env_file")" "$(quote "$env_file")" \
        "$(quote "$workspace")" "$(quote_all "$@")"
}
run_line=$(pane_line "$run_env" "${bin[@]}" run -w "$workspace" -- "$@")
watch_line=$(pane_line "$watch_env" "${bin[@]}" watch -w "$workspace")
# tmux reads #(...) as a shell command and '#' as the start of a format: a literal '#' is '##'.
status_line="#($(quote_all "${bin[@]}" status --tmux -w "$workspace" | sed 's/#/##/g'))"

# One tmux invocation: the options are set before a fast-failing command could end its pane.
# Panes run `/bin/sh -c LINE` directly (not through the user's default-shell, which may be fish).
if ! "${tmux_cmd[@]}" \
    new-session -d -s "$session" -n ralph -c "$workspace" /bin/sh -c "$run_line" \; \
    set-option -w -t "$session:" remain-on-exit on \; \
    set-option -t "$session" status-interval 5 \; \
    set-option -t "$session" status-right-length 80 \; \
    set-option -t "$session" status-right "$status_line" \; \
    split-window -d -v -t "$session:" -c "$workspace" /bin/sh -c "$watch_line"
then
    rm -f "$run_env" "$watch_env"
    die "tmux could not start session '$session'"
fi

attach="${tmux_cmd[*]} attach -t $session"
cat <<EOF
ralph-supervise: started tmux session '$session' for $workspace
  attach:   $attach
  detach:   Ctrl-b d   (the loop keeps running; so does an SSH logout)
  status:   $(quote_all "${bin[@]}") status -w $(quote "$workspace")
  stop:     $(quote_all "${bin[@]}") stop -w $(quote "$workspace")
EOF
