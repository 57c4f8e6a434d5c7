"""The workspace's snapshots: a private git store of its files, one snapshot per iteration, and the trip when an
iteration destroys the work it began with.

Where each job lives:

- `store.py`: the store itself (`STATE_DIR/snapshots/`): creating and checking it, its refs, `trips.jsonl`,
  the budget (the oldest snapshots dropped), the lock that keeps one writer at a time;
- `take.py`: taking one snapshot (the passes over tracked, untracked and ignored files, the commit);
- `git.py`: running git on the store and on the user's repository, and what its failures mean;
- `info.py`: the values (`SnapshotInfo`, what `snapshots --json` and `status --json` show);
- `restore.py`: `ralph-supervise snapshots` and `restore`, and writing a snapshot's files back;
- `kept_commits.py`: the commits the user's branches pointed to, kept in the store (`restore --commits`);
- `keeper.py`: the supervisor's side: when a snapshot is taken, on a thread of its own;
- `verdict.py` and `discarded.py`: the `destructive` verdict on an iteration's net effect, and which replaced
  files went back to a committed version.

What is ignored is the watcher's rules (`evidence/ignore.py`), written into the store's `info/exclude`.
"""
