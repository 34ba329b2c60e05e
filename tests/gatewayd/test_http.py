"""The HTTP port's health endpoints, over a real socket."""

from __future__ import annotations

import httpx


async def test_health_leader_and_ready_answer_as_load_balancers_expect(cluster):
    base = f"http://127.0.0.1:{cluster.server.ports['http']}"
    async with httpx.AsyncClient(base_url=base) as http:
        assert (await http.get("/health")).json() == {"status": "ok"}
        leader = await http.get("/leader")
        assert leader.status_code == 200 and leader.json()["leader"] is True
        # No model is ready, yet the control plane takes requests: /ready is
        # 200, and says apart that no replica can answer at once.
        # Guards: /ready counted ready replicas, so a cluster whose models were
        # all on demand and idle was 503 on every control plane, HAProxy took
        # them all out, and the request that would start a model never came.
        ready = await http.get("/ready")
        assert ready.status_code == 200, ready.text
        body = ready.json()
        assert body["ready"] is True and body["reason"] == "serving"
        assert body["replicas"] == {"ready": False, "reason": "no model is ready to serve yet"}
        replicas = await http.get("/ready/replicas")
        assert replicas.status_code == 503
        assert replicas.json()["reason"] == "no model is ready to serve yet"
        assert (await http.get("/nope")).status_code == 404
