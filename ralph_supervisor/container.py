"""The supervisor as a container's first process (PID 1 of its own PID namespace).

What `docker run IMAGE` (or `unshare --pid --fork --mount-proc`) gives the entrypoint: PID 1, a fresh
/proc, and the job of init. The supervisor needs nothing special for it: it already reaps every orphan
that re-parents to it (as PID 1 they all do), handles SIGTERM and SIGINT itself (PID 1 gets no signal
whose default action would apply: an unhandled SIGTERM is simply dropped), stops the whole tree with
TERM, grace, KILL, and passes the child's exit code through; when it exits the kernel kills whatever
is left in the namespace.

One thing it must refuse: a new PID namespace with the old /proc (`unshare --pid --fork` without
`--mount-proc`). Then /proc/1 is the host's init, and "every descendant of PID 1" would be every
process of the machine: the tree to pause and stop at shutdown.

    problem = proc_mount_problem()
    if problem:
        sys.exit(f"ralph-supervise: {problem}")
"""

from __future__ import annotations

import os


def proc_mount_problem(pid: int | None = None, proc_self: str | None = None) -> str | None:
    """One line when /proc belongs to another PID namespace than ours, else None.

    /proc/self names the reader as the /proc mount's namespace numbers it; in our own namespace that is
    our pid. `pid` and `proc_self` are for tests; by default they are read.
    """
    pid = os.getpid() if pid is None else pid
    if proc_self is None:
        try:
            proc_self = os.readlink("/proc/self")
        except OSError as exc:
            return f"cannot read /proc/self ({exc.strerror or exc}): the supervisor needs /proc to follow its tree"
    if proc_self == str(pid):
        return None
    return (f"/proc belongs to another PID namespace (we are pid {pid}, /proc says {proc_self}): "
            "mount a /proc for this namespace (unshare --pid --fork --mount-proc; docker does it by itself), "
            "otherwise every process of the machine would look like part of the tree")
