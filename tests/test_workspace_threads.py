"""The workspace's threads meet: calls end on another thread (`mark_call_end`) while the watcher falls
back to polling in the middle of the run. Real inotify with a lowered watch limit (a user namespace of its
own), real files, real threads, under PYTHONDEVMODE=1. Every call gets exactly its own file (or, for the
call the fall back cut into, says its events were lost), nothing raises, nothing hangs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.helpers.inotify_limit import needs_unshare, run_limited

CALLS = 150

SCRIPT = textwrap.dedent(
    """
    import json, sys, threading, time
    from pathlib import Path
    from ralph_supervisor.evidence.workspace import Workspace

    root, calls = Path(sys.argv[1]), int(sys.argv[2])
    failures = []
    ws = Workspace(root, state_dir=root.parent / "state", poll_interval=0.05)
    ws.start()
    mode_at_start = ws.mode

    def grow():  # new folders until the watch limit is reached: the fall back, mid-run, on its own thread
        for n in range(20):
            (root / f"grown{n}").mkdir()
            time.sleep(0.005)

    def end(key):  # the exits thread: a call ended
        try:
            ws.mark_call_end(key)
        except BaseException as exc:
            failures.append(repr(exc))

    grower = threading.Thread(target=grow)
    results = []
    for i in range(calls):
        key = f"call{i}"
        ws.begin_iteration(key)
        if i == calls // 3:
            grower.start()
        (root / f"f{i}.txt").write_text(str(i))
        ender = threading.Thread(target=end, args=(key,))
        ender.start()
        began = time.monotonic()
        delta = ws.end_iteration(key)
        ender.join(10)
        results.append({"paths": list(delta.paths), "lost": delta.events_lost,
                        "seconds": time.monotonic() - began, "ender_alive": ender.is_alive()})
    grower.join(10)
    ws.close_gap()
    ws.stop()
    print("RESULT " + json.dumps({"mode_at_start": mode_at_start, "mode": ws.mode, "failures": failures,
                                  "results": results, "threads": sorted(t.name for t in threading.enumerate())}))
    """
)


@needs_unshare
def test_calls_ending_on_other_threads_while_the_watcher_falls_back_each_get_their_own_file(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    script = tmp_path / "threads.py"
    script.write_text(SCRIPT)
    done = run_limited(script, "max_inotify_watches", 6, str(root), str(CALLS), timeout=120,  # barrier, root, src, 3 grown
                       env={"PYTHONDEVMODE": "1"})  # unraisable errors, unjoined threads and bad locks shout
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
    assert (result["mode_at_start"], result["mode"], result["failures"]) == ("inotify", "polling", [])
    assert (done.stdout + done.stderr).count("watcher_fallback") == 1
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    for i, call in enumerate(result["results"]):
        own = [f"f{i}.txt"]
        assert call["paths"] == own or (call["lost"] and call["paths"] == []), (i, call)
        assert not call["ender_alive"] and call["seconds"] < 5, (i, call)
    assert sum(1 for call in result["results"] if not call["paths"]) <= 2  # only around the fall back
    assert [name for name in result["threads"] if name != "MainThread"] == []
