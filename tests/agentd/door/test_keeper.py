"""Doors as processes of their own: they outlive the agent that started them, as engines do."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
import psutil

from agentd.door.keeper import DoorKeeper
from tests.agentd.door.test_door import KEY, engine  # noqa: F401  (the stand-in engine fixture)


async def test_a_door_outlives_its_keeper_and_is_found_again_by_the_next(tmp_path, engine):  # noqa: F811
    # Guards: a door inside the agent took every replica of a node off the air while
    # the agent was away (the fault suite's kill -9 of the agent saw 502s).
    engine_port, _ = engine
    first = DoorKeeper(tmp_path / "doors", "127.0.0.1", None)
    record = first.prepare("s1", engine_port, [KEY])
    port = await first.open(record)
    pid = first.record("s1").pid
    try:
        del first  # the agent goes; its door does not
        headers = {"authorization": f"Bearer {KEY}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            assert (await http.post("/v1/echo", content=b"{}", headers=headers)).status_code == 200
            again = DoorKeeper(tmp_path / "doors", "127.0.0.1", None)
            assert await again.open(again.record("s1")) == port  # found, not started anew
            assert again.record("s1").pid == pid and again.pids() == [pid]
            # A rotation reaches the running door: the old key is refused from then on.
            assert again.set_keys("s1", ["the-new-key-abcdefgh"])
            # The door reads its record on the signal: the next requests find the old key gone.
            for _ in range(250):
                r = await http.post("/v1/echo", content=b"{}", headers=headers)
                if r.status_code == 401:
                    break
                await asyncio.sleep(0.02)
            assert r.status_code == 401
            await again.close("s1")
        _, alive = psutil.wait_procs([psutil.Process(pid)], timeout=10)
        assert not alive
        assert again.record("s1") is None
    finally:
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)
