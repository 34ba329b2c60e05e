"""``llmgw:admin``: this cluster as a read-only MCP server.

Its tools answer from the admin API's own methods, called in-process on the
AdminService (the very ones ``llmgw ctl`` reaches over gRPC), so the gateway
keeps no admin token for it. Each answer's structured content is the reply as
``llmgw ctl … --json`` prints it (``llmgw.protojson.to_plain``); the text
content is the same JSON, for clients that read only text.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import betterproto2
from grpclib.exceptions import GRPCError

from llmgw.errors import LlmgwError
from llmgw.protojson import to_plain
from proto.llmgw.v1 import (
    GetModelRequest,
    GetNodeRequest,
    ListModelsRequest,
    ListNodesRequest,
    ListReplicasRequest,
    ReplicaLogsRequest,
    StatusRequest,
)

# The most engine lines node_logs fetches per replica (what ctl logs allows).
MAX_LOG_LINES = 500
DEFAULT_LOG_LINES = 100


class ToolRefused(Exception):
    """Arguments a tool will not take, or a thing it cannot find; the message says why."""


@dataclass(frozen=True)
class _Tool:
    name: str
    description: str
    properties: dict[str, dict]
    required: tuple[str, ...]
    run: Callable[[Any, dict], Awaitable[dict]]

    def as_mcp(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": {
                "type": "object",
                "properties": self.properties,
                "required": list(self.required),
                "additionalProperties": False,
            },
            "annotations": {"readOnlyHint": True, "openWorldHint": False},
        }


def _plain(reply: betterproto2.Message) -> dict:
    return to_plain(reply)


def _text(args: dict, name: str, *, required: bool) -> str:
    value = args.get(name)
    if value is None or value == "":
        if required:
            raise ToolRefused(f"give {name!r}: a string")
        return ""
    if not isinstance(value, str):
        raise ToolRefused(f"{name!r} must be a string, not {type(value).__name__}")
    return value


def _lines(args: dict) -> int:
    value = args.get("lines")
    if value is None:
        return DEFAULT_LOG_LINES
    # JSON has one number type; 50.0 is 50, but true is not a number here.
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise ToolRefused(f"'lines' must be a whole number from 1 to {MAX_LOG_LINES}")
    if not 1 <= int(value) <= MAX_LOG_LINES:
        raise ToolRefused(f"'lines' must be from 1 to {MAX_LOG_LINES}, not {int(value)}")
    return int(value)


async def _cluster_status(admin, args: dict) -> dict:
    return _plain(await admin.status(StatusRequest()))


async def _list_nodes(admin, args: dict) -> dict:
    return _plain(await admin.list_nodes(ListNodesRequest()))


async def _list_models(admin, args: dict) -> dict:
    return _plain(await admin.list_models(ListModelsRequest()))


async def _list_replicas(admin, args: dict) -> dict:
    model = _text(args, "model", required=False)
    return _plain(await admin.list_replicas(ListReplicasRequest(model=model)))


async def _explain_placement(admin, args: dict) -> dict:
    model = _text(args, "model", required=True)
    return _plain(await admin.explain_placement(GetModelRequest(name=model)))


async def _node_logs(admin, args: dict) -> dict:
    node = _text(args, "node", required=True)
    lines = _lines(args)
    await admin.get_node(GetNodeRequest(node_id=node))  # an unknown node is refused in words
    replicas = (await admin.list_replicas(ListReplicasRequest())).replicas

    async def logs_of(r) -> dict:
        entry = {"replica_id": r.replica_id, "model": r.model, "state": r.state, "lines": []}
        try:
            got = await admin.replica_logs(ReplicaLogsRequest(replica_id=r.replica_id, lines=lines))
            entry["lines"], entry["error"] = list(got.lines), ""
        except GRPCError as e:
            # One engine the node cannot read does not hide the others' lines.
            entry["error"] = e.message or e.status.name
        return entry

    # Each fetch is a round trip to the node: all at once, not one after another.
    out = await asyncio.gather(*(logs_of(r) for r in replicas if r.node_id == node))
    return {"node_id": node, "replicas": list(out)}


_TOOLS = (
    _Tool(
        "cluster_status",
        "This llmgw cluster: version, store, node counts, the gateway's address and"
        " request counters (as `llmgw ctl status --json`).",
        {},
        (),
        _cluster_status,
    ),
    _Tool(
        "list_nodes",
        "Every node with its state and the reason for it, its GPUs and host facts"
        " (as `llmgw ctl nodes --json`).",
        {},
        (),
        _list_nodes,
    ),
    _Tool(
        "list_models",
        "Every model in the catalog with its state, ready and desired replicas"
        " (as `llmgw ctl models --json`).",
        {},
        (),
        _list_models,
    ),
    _Tool(
        "list_replicas",
        "Replicas with their node, state, reason, deadline and history"
        " (as `llmgw ctl replicas --json`); give a model to see only its own.",
        {"model": {"type": "string", "description": "Only this model's replicas."}},
        (),
        _list_replicas,
    ),
    _Tool(
        "explain_placement",
        "Where one more replica of a model would go, and every node's reason"
        " (as `llmgw ctl explain-placement MODEL --json`).",
        {"model": {"type": "string", "description": "The model's name."}},
        ("model",),
        _explain_placement,
    ),
    _Tool(
        "node_logs",
        "The last lines each engine on a node wrote (as `llmgw ctl logs REPLICA --json`"
        " for every replica placed there).",
        {
            "node": {"type": "string", "description": "The node id (see list_nodes)."},
            "lines": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_LOG_LINES,
                "description": f"Lines per engine, {DEFAULT_LOG_LINES} unless given.",
            },
        },
        ("node",),
        _node_logs,
    ),
)


def _result(structured: dict, *, error: bool = False) -> dict:
    text = json.dumps(structured, indent=2)
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": error,
    }


def _refusal(message: str) -> dict:
    return {"content": [{"type": "text", "text": message}], "isError": True}


class AdminTools:
    """The built-in server's tools, answered by the in-process AdminService."""

    def __init__(self) -> None:
        self._admin = None
        self._by_name = {t.name: t for t in _TOOLS}

    def bind(self, admin) -> None:
        """The AdminService whose methods answer (set once it is made)."""
        self._admin = admin

    def tools(self) -> list[dict]:
        """MCP tool dicts with bare names (the endpoint lists them as llmgw_admin.NAME)."""
        return [t.as_mcp() for t in _TOOLS]

    def names(self) -> list[str]:
        return [t.name for t in _TOOLS]

    async def call(self, tool: str, arguments: dict | None) -> dict:
        """A CallToolResult dict; refusals (bad arguments, unknown node) are isError results
        with the reason in words, never exceptions."""
        spec = self._by_name.get(tool)
        if spec is None:
            return _refusal(
                f"llmgw:admin has no tool {tool!r}; its tools: {', '.join(self.names())}"
            )
        if self._admin is None:
            return _refusal("llmgw:admin is not ready yet on this control plane; try again")
        args = {} if arguments is None else arguments
        if not isinstance(args, dict):
            return _refusal(f"{tool}: the arguments must be an object")
        unknown = sorted(set(args) - set(spec.properties))
        if unknown:
            takes = ", ".join(spec.properties) or "no arguments"
            return _refusal(f"{tool} takes {takes}; not {', '.join(map(repr, unknown))}")
        try:
            return _result(await spec.run(self._admin, args))
        except ToolRefused as e:
            return _refusal(f"{tool}: {e}")
        except GRPCError as e:
            return _refusal(f"{tool}: {e.message or e.status.name}")
        except LlmgwError as e:
            return _refusal(f"{tool}: {e.message}")
