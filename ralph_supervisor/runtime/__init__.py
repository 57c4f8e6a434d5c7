"""The supervisor's running parts: each does one job on the event loop, and `supervisor.py` wires them.

None of them imports the supervisor: each takes the parts it works with, and callbacks for the few it
must reach back to (a decision to apply, a wait to begin).

| part | module |
|---|---|
| how a run ends: the exit code, the background tasks, a second signal's hurry | `lifecycle.py` (`Lifecycle`) |
| SIGINT, SIGTERM, SIGCHLD: early ones kept, then handed to the loop | `signals.py` |
| the loop's own process: spawn, environment, exit | `child.py` (`Child`) |
| the loop ended by itself: the last call, the last verifies, its exit code | `loop_end.py` (`LoopEnd`) |
| a decision carried out: history, state, tree, escalation, hook | `apply.py` (`Applier`) |
| a call begun, a call judged, a verify's verdicts | `judge.py` (`CallJudge`) |
| the tree frozen for a usage limit, the ceiling or an outage | `wait_episode.py` (`WaitEpisode`) |
| `pause`, `resume`, `reset`, `stop`, `status` over the control socket | `commands.py` (`Commands`) |
| the tick: the tree sampled, stalls, waits, watchdog | `tick.py` (`Ticker`) |
| analysed output, tailed files, file events: where each goes | `routing.py` (`Routing`) |
| `state.json` and the files of ours that must stay whole | `keeping.py` (`Keeping`) |
"""
