#!/usr/bin/env bash
# Install ralph-supervise's systemd units as user units (~/.config/systemd/user/), with the real
# path of the ralph-supervise program in ExecStart, then tell how to enable a loop for a workspace.
#
#   scripts/install-systemd.sh [--bin PATH] [--no-reload]
#
#   --bin PATH    the ralph-supervise program to run (default: the one on PATH, else this
#                 checkout's .venv/bin/ralph-supervise)
#   --no-reload   do not run `systemctl --user daemon-reload`
#
# Nothing is started or enabled: that stays your decision (the commands are printed at the end).
set -euo pipefail
shopt -u patsub_replacement 2>/dev/null || true   # bash 5.2: '&' in ${x//a/b} must stay literal

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
units_src="$repo/systemd"
placeholder='%h/.local/bin/ralph-supervise'

die() { printf 'install-systemd.sh: %s\n' "$*" >&2; exit 1; }

bin=""
reload=1
while [ $# -gt 0 ]; do
    case "$1" in
        --bin) [ $# -ge 2 ] || die "--bin needs a path"; bin="$2"; shift 2 ;;
        --bin=*) bin="${1#--bin=}"; shift ;;
        --no-reload) reload=0; shift ;;
        -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done

if [ -z "$bin" ]; then
    if found="$(command -v ralph-supervise 2>/dev/null)"; then
        bin="$found"
    elif [ -x "$repo/.venv/bin/ralph-supervise" ]; then
        bin="$repo/.venv/bin/ralph-supervise"
    else
        die "ralph-supervise not found on PATH nor in $repo/.venv; install it (pipx install .) or pass --bin PATH"
    fi
fi
[ -f "$bin" ] && [ -x "$bin" ] || die "--bin: $bin is not an executable file"
# Absolute, but without resolving symlinks (a venv's bin/ must stay the venv's).
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

# In a unit file '%' starts a specifier and a path with blanks must be quoted.
exec_path="${bin//%/%%}"
case "$exec_path" in
    *[[:space:]]*) exec_path="\"$exec_path\"" ;;
esac

config_home="${XDG_CONFIG_HOME:-$HOME/.config}"
dest="$config_home/systemd/user"
env_dir="$config_home/ralph-supervise"
mkdir -p "$dest" "$env_dir"

for unit in 'ralph-supervise@.service' 'ralph-supervise.service'; do
    [ -f "$units_src/$unit" ] || die "missing $units_src/$unit"
    content="$(cat "$units_src/$unit")"
    content="${content//"$placeholder"/"$exec_path"}"
    tmp="$dest/.$unit.tmp.$$"
    printf '%s\n' "$content" > "$tmp"
    mv -f "$tmp" "$dest/$unit"
    printf 'installed %s\n' "$dest/$unit"
done
printf 'ExecStart runs %s\n' "$bin"

if [ "$reload" = 1 ]; then
    if command -v systemctl >/dev/null 2>&1; then
        if systemctl --user daemon-reload 2>/dev/null; then
            echo 'systemctl --user daemon-reload: done'
        else
            echo 'warning: could not reach your user systemd; run `systemctl --user daemon-reload` in your session' >&2
        fi
    else
        echo 'note: systemctl not found; the units are in place for when systemd runs' >&2
    fi
fi

workspace="$PWD"
if command -v systemd-escape >/dev/null 2>&1; then
    instance="$(systemd-escape --path "$workspace")"
else
    instance='$(systemd-escape --path /path/to/project)'
    workspace='/path/to/project'
fi
cat <<EOF

To supervise the loop in $workspace:
  systemctl --user enable --now "ralph-supervise@$instance.service"
  loginctl enable-linger "\$USER"      # keep it running after you log out
  journalctl --user -fu "ralph-supervise@$instance.service"
The command it runs (default: ralph) and extra flags go in
  $env_dir/$instance.env
e.g.
  RALPH_SUPERVISE_COMMAND=./ralph_loop.sh
  RALPH_SUPERVISE_ARGS=--on-open pause
  PATH=$PATH
(systemd does not read your shell profile: the PATH line lets the service find ralph and claude.)
For another folder: systemctl --user enable --now "ralph-supervise@\$(systemd-escape --path /path/to/project).service"
Every loop of yours on this machine, running or stale: ralph-supervise ls   (or: ralph-supervise watch --all)
EOF
