"""A wait's beginning and the loop's exit, in the order they can really meet on the event loop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

from ralph_supervisor.breaker import State
from ralph_supervisor.limit_wait import Wait
from ralph_supervisor.records import Warnings
from ralph_supervisor.runtime.lifecycle import Lifecycle
from ralph_supervisor.runtime.wait_episode import WaitEpisode


class SlowFreeze:
    """Tree actions whose freeze takes a while, as a real cgroup freeze or a walk of the tree does."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.paused = False
        self.freezing = asyncio.Event()
        self.may_finish = asyncio.Event()

    async def pause(self, iteration: int) -> None:
        self.freezing.set()
        await self.may_finish.wait()
        self.paused = True

    async def resume(self, iteration: int) -> None:
        self.paused = False


def test_a_loop_that_exits_while_its_wait_is_being_begun_ends_that_wait(tmp_path: Path) -> None:
    said: list[str] = []

    async def scenario() -> None:
        actions = SlowFreeze()
        child = {"running": True}
        metrics = SimpleNamespace(limit_wait=lambda until: said.append("ended" if until is None else "started"))
        episode = WaitEpisode(SimpleNamespace(workspace=tmp_path), breaker=SimpleNamespace(state=State.CLOSED),
                              actions=actions, loop_waits=None, silence=SimpleNamespace(restart=lambda now: None),
                              metrics=metrics, notifier=SimpleNamespace(send=lambda notice: None),
                              warnings=Warnings(), lifecycle=Lifecycle(asyncio.get_running_loop()),
                              child_running=lambda: child["running"], iteration=lambda: 3,
                              apply=None,  # type: ignore[arg-type]
                              save=lambda: None, tell_systemd=lambda: None)
        begun = asyncio.create_task(episode.begin(Wait(until=time.time() + 300, known_reset=True, reason="limit"), 3))
        await actions.freezing.wait()
        child["running"] = False  # the loop exits while its tree is being frozen
        exited = asyncio.create_task(episode.loop_exited())
        await asyncio.sleep(0)
        actions.may_finish.set()
        await asyncio.wait_for(asyncio.gather(begun, exited), 5)
        assert episode.until is None and not actions.paused

    asyncio.run(scenario())
    assert said == ["started", "ended"]
