"""deploy/haproxy/haproxy.cfg, run as the harness runs it, in front of three control planes that
answer /ready and /leader as gatewayd does (small HTTP servers of the test's own)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx
import pytest
from aiohttp import web

from tests.faults.harness import haproxy, wait_until
from tests.faults.harness.haproxy import HAPROXY, LEADER_BACKEND
from tests.faults.harness.procs import require_binaries

pytestmark = [pytest.mark.faults, pytest.mark.alone]


@dataclass
class FakeControlPlane:
    """/ready, /leader and a client path, answered with its name; stopped by closing its port."""

    name: str
    ready: bool = True
    leader: bool = False
    runner: web.AppRunner | None = None
    port: int = 0

    async def start(self, port: int = 0) -> FakeControlPlane:
        app = web.Application()
        app.router.add_get("/ready", self._ready)
        app.router.add_get("/leader", self._leader)
        app.router.add_post("/v1/chat/completions", self._answer)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def _ready(self, _request: web.Request) -> web.Response:
        return web.json_response({"ready": self.ready}, status=200 if self.ready else 503)

    async def _leader(self, _request: web.Request) -> web.Response:
        return web.json_response({"leader": self.leader}, status=200 if self.leader else 503)

    async def _answer(self, _request: web.Request) -> web.Response:
        return web.json_response({"cp": self.name})

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


async def _ask(client: httpx.AsyncClient, url: str) -> str:
    r = await client.post(f"{url}/v1/chat/completions", json={})
    r.raise_for_status()
    return r.json()["cp"]


async def test_clients_reach_only_ready_control_planes_and_a_dead_one_costs_none_of_them(tmp_path):
    # Guards a front that sent clients to a control plane with nothing to route to, or
    # failed the requests that met a dead one before its checks took it out.
    require_binaries(HAPROXY)
    cps = [
        await FakeControlPlane("cp1", leader=True).start(),
        await FakeControlPlane("cp2").start(),
        await FakeControlPlane("cp3", ready=False).start(),
    ]
    try:
        async with (
            # Small servers of the test's own: no PROXY header for them.
            haproxy(tmp_path / "lb", [cp.address for cp in cps], proxy_protocol=False) as lb,
            httpx.AsyncClient(timeout=10.0) as client,
        ):
            assert await lb.wait_servers_up(2) == {"cp1", "cp2"}
            assert await lb.wait_servers_up(1, LEADER_BACKEND) == {"cp1"}
            answered = {await _ask(client, lb.url) for _ in range(20)}
            assert answered == {"cp1", "cp2"}
            assert {await _ask(client, lb.leader_url) for _ in range(5)} == {"cp1"}

            # cp1 dies: requests keep being answered (refused at connect, sent to
            # another) while the checks take it out of both backends.
            stopped_at = time.monotonic()
            await cps[0].stop()
            cps[1].leader = True
            failures, seen = 0, set()

            async def out_of_both() -> bool:
                nonlocal failures
                try:
                    seen.add(await _ask(client, lb.url))
                except httpx.HTTPError:
                    failures += 1
                up = await lb.servers_up()
                return up == {"cp2"} and await lb.servers_up(LEADER_BACKEND) == {"cp2"}

            await wait_until(out_of_both, timeout_s=15, interval_s=0.05, what="cp1 taken out")
            out_after_s = time.monotonic() - stopped_at
            assert failures == 0 and seen <= {"cp2"}
            assert await _ask(client, lb.leader_url) == "cp2"
            print(f"\na dead control plane left HAProxy's pools after {out_after_s:.2f} s")

            # Back again, as a standby: it rejoins the client pool, not the leader's.
            cps[0].leader = False
            await cps[0].start(port=cps[0].port)
            assert await lb.wait_servers_up(2) == {"cp1", "cp2"}
            assert await lb.servers_up(LEADER_BACKEND) == {"cp2"}
    finally:
        for cp in cps:
            await cp.stop()
