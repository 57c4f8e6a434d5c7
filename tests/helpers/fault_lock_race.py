"""Race two processes for one `supervisor.lock` ROUNDS times; print a JSON summary of the outcomes.

Usage: fault_lock_race.py FOLDER ROUNDS.  Each round forks two processes that spin until a go file
appears and then call the real `files.lock.InstanceLock.acquire()` at the same instant (far tighter than
two interpreters starting up). Odd rounds start from the lock file a SIGKILLed supervisor leaves
(a dead PID in it), even rounds from no file. The winner holds the lock for 5 ms.
Output: {"rounds": N, "both_won": n, "none_won": n, "loser_messages": [...], "winner_pids": [...]}.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from ralph_supervisor.files.lock import AlreadyRunning, InstanceLock


def racer(lock_path: Path, go: Path, out: int) -> None:
    while not go.exists():
        pass
    lock = InstanceLock(lock_path)
    try:
        lock.acquire()
    except AlreadyRunning as exc:
        os.write(out, f"LOST {exc}".encode())
        os._exit(0)
    os.write(out, f"WON {os.getpid()}".encode())
    time.sleep(0.005)
    lock.release()
    os._exit(0)


def main(folder: Path, rounds: int) -> dict[str, object]:
    summary: dict[str, object] = {"rounds": rounds, "both_won": 0, "none_won": 0}
    losers: list[str] = []
    winners: list[int] = []
    for index in range(rounds):
        lock_path = folder / f"round-{index}" / "supervisor.lock"
        lock_path.parent.mkdir(parents=True)
        if index % 2:
            lock_path.write_text("999999\n")
        go = lock_path.parent / "go"
        pipes = []
        for _ in range(2):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read_end)
                racer(lock_path, go, write_end)
            os.close(write_end)
            pipes.append((pid, read_end))
        time.sleep(0.005)
        go.touch()
        said = []
        for pid, read_end in pipes:
            os.waitpid(pid, 0)
            said.append(os.read(read_end, 1000).decode())
            os.close(read_end)
        won = [s for s in said if s.startswith("WON ")]
        lost = [s[5:] for s in said if s.startswith("LOST ")]
        if len(won) == 2:
            summary["both_won"] = int(summary["both_won"]) + 1  # type: ignore[arg-type]
        elif not won:
            summary["none_won"] = int(summary["none_won"]) + 1  # type: ignore[arg-type]
        else:
            winners.append(int(won[0].split()[1]))
            losers.extend(lost)
    summary["loser_messages"] = losers
    summary["winner_pids"] = winners
    return summary


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]))))
