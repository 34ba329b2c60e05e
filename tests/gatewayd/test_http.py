"""The HTTP port's health endpoints, over a real socket."""

from __future__ import annotations

import httpx


async def test_health_leader_and_ready_answer_as_load_balancers_expect(cluster):
    base = f"http://127.0.0.1:{cluster.server.ports['http']}"
    async with httpx.AsyncClient(base_url=base) as http:
        assert (await http.get("/health")).json() == {"status": "ok"}
        leader = await http.get("/leader")
        assert leader.status_code == 200 and leader.json()["leader"] is True
        # No model can be served yet: not ready, and it says why.
        ready = await http.get("/ready")
        assert ready.status_code == 503
        assert ready.json()["reason"] == "no model is ready to serve yet"
        assert (await http.get("/nope")).status_code == 404
