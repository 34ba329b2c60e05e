"""What /mcp does for a caller, whichever protocol generation it speaks: list and call tools.

``tools/list`` asks each server the key is granted, through the caller's own
upstream connection, concurrently, and keeps only the tools it may call, named
``SERVER.TOOL``. ``tools/call`` refuses anything not granted exactly as it
refuses a tool that does not exist, then runs the server's breaker, the key's
rate and the server's timeout; every call leaves an accounting row and a
metric. The legacy and 2026-07-28 adapters (legacy.py, modern.py) only shape
what goes in and out.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import UTC, datetime

from gatewayd.gateway.policy.keys import KeyInfo
from gatewayd.mcp.endpoint.errors import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RATE_LIMITED,
    TIMED_OUT,
    UNAVAILABLE,
    RpcError,
    unknown_tool,
)
from gatewayd.mcp.endpoint.progress import Progress, caller_token
from gatewayd.mcp.endpoint.streams import Streams
from gatewayd.mcp.runtime import McpRuntime
from gatewayd.mcp.upstream.errors import UpstreamError, UpstreamRpcError
from gatewayd.store.mcp_records import McpCallRow
from llmgw.mcp.names import ADMIN_SERVER, listed_name, split_listed

log = logging.getLogger(__name__)

# Methods answered with an empty list: the gateway serves tools only, and an
# agent that asks for resources or prompts should hear "none", not an error.
EMPTY_LISTS = {
    "resources/list": "resources",
    "resources/templates/list": "resourceTemplates",
    "prompts/list": "prompts",
}


class Caller:
    """Who is calling, for one request: the key, and whose upstream connections it uses."""

    __slots__ = ("headers", "key", "modern", "owner")

    def __init__(self, key: KeyInfo, owner: str, *, modern: bool):
        self.key = key
        self.owner = owner  # the legacy session id, or "key:<key_id>"
        self.modern = modern
        # Who the caller is, for the company server's own logs; never its secret.
        self.headers = {"X-Llmgw-Key-Id": key.key_id, "X-Llmgw-Project": key.project}


class Call:
    """One tools/call's accounting, filled as it goes."""

    __slots__ = ("server", "started", "status", "tool")

    def __init__(self, server: str, tool: str):
        self.server, self.tool, self.status = server, tool, "ok"
        self.started = time.perf_counter()


def _says_unknown(result: dict, tool: str) -> bool:
    content = result.get("content")
    return (
        isinstance(content, list)
        and len(content) == 1
        and isinstance(content[0], dict)
        and content[0].get("text") == f"Unknown tool: {tool}"
    )


def _secs(s: float) -> int:
    return max(1, math.ceil(s))


class Dispatcher:
    def __init__(self, rt: McpRuntime, streams: Streams):
        self.rt = rt
        self.streams = streams
        self._admin_names: frozenset[str] | None = None

    # --- the methods both generations share ----------------------------------

    async def answer(self, caller: Caller, method: str, params: dict) -> dict:
        """The result of a request that is not tools/call; RpcError when refused."""
        if method == "tools/list":
            tools = await self.list_tools(caller)
            return self._listed({"tools": tools}, caller)
        if method == "ping":
            return {"resultType": "complete"} if caller.modern else {}
        field = EMPTY_LISTS.get(method)
        if field is not None:
            return self._listed({field: []}, caller)
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")

    @staticmethod
    def _listed(result: dict, caller: Caller) -> dict:
        if caller.modern:
            # Lists differ per key: no one else may reuse this answer.
            result.update(resultType="complete", cacheScope="private", ttlMs=0)
        return result

    # --- tools/list -----------------------------------------------------------

    async def list_tools(self, caller: Caller) -> list[dict]:
        reg = self.rt.registry
        servers = reg.granted_servers(caller.key)
        if not servers:
            return []
        if len(servers) == 1:
            per_server = [await self._server_tools(caller, servers[0])]
        else:
            per_server = await asyncio.gather(*(self._server_tools(caller, s) for s in servers))
        out: list[dict] = []
        key = caller.key
        for server, tools in zip(servers, per_server, strict=True):
            for t in tools:
                bare = t.get("name") if isinstance(t, dict) else None
                if not isinstance(bare, str) or not reg.allowed(key, server, bare):
                    continue
                name = listed_name(server, bare)
                if name is not None:
                    out.append({**t, "name": name})
        return out

    async def _server_tools(self, caller: Caller, server: str) -> list[dict]:
        """A server's tools as it lists them; none when it cannot be asked (a failing
        server is left out of the list, and counted on its breaker)."""
        if server == ADMIN_SERVER:
            return self.rt.admin_tools.tools()
        reg, breakers = self.rt.registry, self.rt.breakers
        rec = reg.get(server)
        if rec is None or not rec.enabled or breakers.admit(server) > 0:
            return []
        timeout_s = reg.timeout_s(rec)
        try:
            async with asyncio.timeout(timeout_s):
                up = await self._upstream(caller, server)
                tools = await up.list_tools()
        except UpstreamError as e:
            await self._failed(caller, server, e.kind, e.message)
            return []
        except TimeoutError:
            await self._failed(caller, server, "timeout", f"no answer within {timeout_s:g} s")
            return []
        except UpstreamRpcError as e:
            breakers.success(server)
            log.info("MCP server %s refused to list its tools: %s", server, e.message)
            return []
        except asyncio.CancelledError:
            breakers.release(server)
            raise
        breakers.success(server)
        reg.tools_seen[server] = [
            t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)
        ]
        return tools

    # --- tools/call -----------------------------------------------------------

    async def call_tool(
        self, caller: Caller, params: dict, call: Call, progress: Progress | None = None
    ) -> dict:
        """The tool's result; RpcError when refused or failed (``call.status`` says how).

        With ``progress``, the upstream is asked for progress under that relay's token.
        """
        name = params.get("name")
        if not isinstance(name, str):
            call.status = "not_found"
            raise RpcError(INVALID_PARAMS, "tools/call needs the tool's name in params.name")
        args = params.get("arguments")
        if args is None:
            args = {}
        elif not isinstance(args, dict):
            call.status = "error"
            raise RpcError(INVALID_PARAMS, "params.arguments must be an object")
        parts = split_listed(name)
        if parts is None:
            raise self._unknown(call, name)
        server, tool = call.server, call.tool = parts
        reg = self.rt.registry
        if not reg.allowed(caller.key, server, tool):
            raise self._unknown(call, name)
        if server == ADMIN_SERVER:
            if tool not in self._admin_tool_names():
                raise self._unknown(call, name)
            result = await self.rt.admin_tools.call(tool, args)
            if result.get("isError"):
                call.status = "tool_error"
            return result
        rec = reg.get(server)
        if rec is None or not rec.enabled:
            raise self._unknown(call, name)
        return await self._call_upstream(caller, call, rec, name, tool, args, progress)

    async def _call_upstream(self, caller, call, rec, name, tool, args, progress) -> dict:
        server = rec.name
        breakers = self.rt.breakers
        wait_s = breakers.admit(server)
        if wait_s > 0:
            call.status = "unavailable"
            _, reason = breakers.state(server)
            raise RpcError(
                UNAVAILABLE,
                f"{server} is not answering ({reason or 'it failed'}); its tools are off"
                f" until a trial call in {_secs(wait_s)} s",
                {"server": server, "retryAfterSeconds": _secs(wait_s)},
                status="unavailable",
            )
        if rec.rate_per_minute > 0:
            wait_s = self.rt.rates.take(caller.key.key_id, server, rec.rate_per_minute)
            if wait_s > 0:
                breakers.release(server)  # this was no trial of the server
                call.status = "rate_limited"
                raise RpcError(
                    RATE_LIMITED,
                    f"at most {rec.rate_per_minute} calls a minute to {server} for this key;"
                    f" try again in {_secs(wait_s)} s",
                    {"retryAfterSeconds": _secs(wait_s), "server": server},
                    status="rate_limited",
                )
        timeout_s = self.rt.registry.timeout_s(rec)
        try:
            # The upstream client bounds its open and the call by timeout_s itself
            # (an UpstreamError "timeout"): no second timer on the hot path.
            up = await self._upstream(caller, server)
            if progress is None:
                result = await up.request(
                    "tools/call", {"name": tool, "arguments": args}, timeout_s=timeout_s
                )
            else:
                result = await up.request(
                    "tools/call",
                    {"name": tool, "arguments": args, "_meta": {"progressToken": progress.token}},
                    timeout_s=timeout_s,
                    on_notification=progress.on_notification,
                )
        except UpstreamError as e:
            if e.kind == "timeout":
                raise await self._timed_out(caller, call, server, timeout_s) from None
            await self._failed(caller, server, e.kind, e.message)
            call.status = "unavailable"
            raise RpcError(
                UNAVAILABLE,
                f"{server} could not be reached: {e.message}",
                {"server": server},
                status="unavailable",
            ) from None
        except UpstreamRpcError as e:
            breakers.success(server)  # it answered: the server is up
            if e.code == INVALID_PARAMS and str(e.message).startswith("Unknown tool"):
                raise self._unknown(call, name) from None
            call.status = "error"
            raise RpcError(e.code, e.message, e.data) from None
        except asyncio.CancelledError:
            breakers.release(server)
            raise
        breakers.success(server)
        if result.get("isError"):
            if _says_unknown(result, tool):
                # An SDK server answers a tool it lacks as an isError result: told
                # apart from an ungranted tool's answer, it would reveal which it is.
                raise self._unknown(call, name)
            call.status = "tool_error"
        return result

    async def _timed_out(self, caller, call, server, timeout_s) -> RpcError:
        self.rt.breakers.failure(server, f"no answer within {timeout_s:g} s")
        call.status = "timeout"
        return RpcError(
            TIMED_OUT,
            f"{server} did not answer within {timeout_s:g} s",
            {"server": server},
            status="timeout",
        )

    async def _failed(self, caller: Caller, server: str, kind: str, message: str) -> None:
        self.rt.breakers.failure(server, message)
        log.warning("MCP server %s failed (%s): %s", server, kind, message)
        if kind != "timeout":
            # The connection may be broken: the next call opens a fresh one.
            await self.rt.pool.drop(caller.owner, server)

    def _unknown(self, call: Call, name: str) -> RpcError:
        call.status = "not_found"
        return unknown_tool(name)

    def _admin_tool_names(self) -> frozenset[str]:
        if self._admin_names is None:
            self._admin_names = frozenset(t["name"] for t in self.rt.admin_tools.tools())
        return self._admin_names

    def progress_for(self, caller: Caller, params: dict, headers: dict) -> Progress | None:
        """A relay for the call's progress when it asks for progress and can take a stream."""
        token = caller_token(params, headers)
        if token is None:
            return None
        owner, streams = caller.owner, self.streams
        return Progress(token, lambda method, _params: streams.notify(owner, method))

    async def _upstream(self, caller: Caller, server: str):
        owner = caller.owner
        streams = self.streams
        return await self.rt.pool.get(
            owner,
            server,
            caller=caller.headers,
            on_notification=lambda method, _params: streams.notify(owner, method),
        )

    # --- accounting -----------------------------------------------------------

    async def record(self, caller: Caller, call: Call, bytes_in: int, bytes_out: int) -> None:
        """Account a call: its row, on disk before this returns when there is a journal (the
        answer goes out after: a call answered is accounted even if gatewayd is killed then)."""
        seconds = time.perf_counter() - call.started
        key = caller.key
        durable = self.rt.writer.add(
            McpCallRow(
                at=datetime.now(UTC),
                key_id=key.key_id,
                project=key.project,
                server=call.server,
                tool=call.tool,
                status=call.status,
                latency_ms=seconds * 1000.0,
                bytes_in=bytes_in,
                bytes_out=bytes_out,
            )
        )
        self.rt.metrics.observe(call.server, call.tool, call.status, seconds)
        if durable is not None:
            # Shielded: the group's future is shared with other calls.
            await asyncio.shield(durable)
