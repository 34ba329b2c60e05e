"""A running gatewayd with company MCP servers, keys and grants, for the /mcp tests.

Servers and grants are written to the store and the registry read again, as the
admin RPCs do (their own tests drive them through ctl); the caller is the
official SDK client pointed at /mcp with an llmgw key.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from gatewayd.mcp.seal import new_ref
from gatewayd.store.mcp_records import McpServerRecord
from llmgw.mcp.names import origin_of
from tests.cluster_fixture import Cluster


@dataclass
class Gateway:
    cluster: Cluster
    keys: dict[str, str] = field(default_factory=dict)  # name -> secret
    key_ids: dict[str, str] = field(default_factory=dict)  # name -> key id

    @property
    def server(self):
        return self.cluster.server

    @property
    def rt(self):
        return self.server.mcp

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.ports['http']}/mcp"

    async def key(self, name: str, project: str) -> str:
        with contextlib.suppress(Exception):
            await self.server.keys.tenancy.create("project", project, parents=True)
        rec, secret = await self.server.keys.create(project, name, [], 0)
        self.keys[name], self.key_ids[name] = secret, rec.key_id
        return secret

    async def add_server(
        self, name: str, url: str, *, bearer: str = "", sealed_headers=None, **fields
    ) -> None:
        """Write the server to the store as the admin RPC does: ``bearer`` and
        ``sealed_headers`` (name -> value) sealed for the origin of ``url``."""
        sealer = self.rt.sealer
        values = dict(sealed_headers or {})
        if bearer:
            values["Authorization"] = f"Bearer {bearer}"
        refs, sealed = {}, {}
        for header, value in values.items():
            ref = new_ref(name)
            refs[header], sealed[ref] = ref, sealer.seal(value, ref, origin_of(url))
        transport = "sse" if url.rstrip("/").endswith("/sse") else "streamable_http"
        rec = McpServerRecord(name, url, transport, secret_refs=refs, **fields)
        await self.server.store.put_mcp_server(rec, sealed)
        await self.rt.registry.refresh()

    async def grant(self, scope: str, target: str) -> None:
        await self.server.store.add_mcp_grant(scope, target, datetime.now(UTC))
        await self.rt.registry.refresh()

    async def revoke(self, scope: str, target: str) -> None:
        await self.server.store.remove_mcp_grant(scope, target)
        await self.rt.registry.refresh()

    def client(self, key: str, mode: str = "auto", **kw) -> Client:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {self.keys[key]}"})
        return Client(streamable_http_client(self.url, http_client=http), mode=mode, **kw)
