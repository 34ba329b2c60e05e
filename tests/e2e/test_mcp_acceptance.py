"""The MCP gateway's acceptance as a new user meets it.

Two company MCP servers written with the official `mcp` SDK run on loopback
as processes of their own (tests/fakes/mcp_servers.py): ``hr`` over streamable
HTTP, needing a bearer token, and ``wiki`` over the older HTTP+SSE transport.
They are added with ``llmgw ctl mcp add``, granted with ``llmgw ctl mcp grant``,
and reached through ``/mcp`` by the official SDK client in both protocol
generations (2026-07-28 and the session-based 2025-11-25), each agent with its
own llmgw key made by ``llmgw ctl keys create``.

The first test uses the shared ``llmgw up`` (tests/e2e/starter_up.py) and leaves
it as it found it: the servers, grants, keys and tenants it made are removed at
the end. The breaker test kills a server, so it runs its own gatewayd whose
server.yaml opens a breaker after 2 failures for 5 s (the defaults, 5 and 30 s,
would only make it slower).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from llmgw.admin_client import AdminClient
from llmgw.paths import Paths
from llmgw.protojson import to_plain
from tests.e2e.helpers import init_on_free_ports, llmgw, start, wait_until
from tests.fakes.mcp_servers import ServerProcess

HR_TOKEN = "hr-service-account-7d41e0"
MODERN, LEGACY = "2026-07-28", "2025-11-25"
UNKNOWN_TOOL = -32602  # JSON-RPC invalid params: "Unknown tool: NAME"
RATE_LIMITED = -32001
UNAVAILABLE = -32002


def ctl(home: Path, *args: str) -> dict:
    res = llmgw(home, "ctl", *args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def ctl_says(home: Path, *args: str) -> str:
    """What a person reads from ``llmgw ctl ARGS`` (stdout, one line per line)."""
    res = llmgw(home, "ctl", *args, COLUMNS="200")
    assert res.returncode == 0, res.stderr
    return res.stdout


@dataclass(frozen=True)
class Key:
    key_id: str
    secret: str


def make_key(home: Path, project: str, name: str) -> Key:
    made = ctl(home, "keys", "create", "--project", project, "--name", name)
    return Key(made["key_id"], made["secret"])


@contextlib.asynccontextmanager
async def agent(endpoint: str, key: Key, mode: str) -> AsyncIterator[Client]:
    """The SDK client an agent or IDE would run, with its own llmgw key as Bearer."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key.secret}"}, timeout=30)
    async with http, Client(streamable_http_client(endpoint, http_client=http), mode=mode) as c:
        assert c.protocol_version == (MODERN if mode == "auto" else LEGACY)
        yield c


async def listed(c: Client) -> set[str]:
    return {t.name for t in (await c.list_tools()).tools}


async def eventually(fn: Callable[[], Awaitable[Any]], *, timeout_s: float = 20) -> Any:
    """Await ``fn`` until it returns something truthy; a bound, not a timing assertion."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout_s} s waiting for {fn}")
        await asyncio.sleep(0.2)


def text_of(result) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def refused(c: Client, tool: str, arguments: dict) -> MCPError:
    with pytest.raises(MCPError) as e:
        await c.call_tool(tool, arguments)
    return e.value


async def together(*calls: Callable[[], Any]) -> list[Any]:
    """Independent ``llmgw`` commands run at once (each is a process of its own)."""
    return list(await asyncio.gather(*(asyncio.to_thread(call) for call in calls)))


class Made:
    """What a test made on the shared gateway, undone at the end: servers (stage 0) after
    the tree's levels (1 org, 2 team, 3 project) after keys and grants (4), each stage's
    undoings at once."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.undo: dict[int, list[tuple[str, ...]]] = {}

    def __call__(self, stage: int, *undo: str) -> None:
        self.undo.setdefault(stage, []).append(undo)

    async def clean(self) -> list[str]:
        left = []
        for stage in sorted(self.undo, reverse=True):
            todo = self.undo[stage]
            done = await together(*(lambda a=args: llmgw(self.home, "ctl", *a) for args in todo))
            for args, res in zip(todo, done, strict=True):
                if res.returncode != 0:
                    left.append(f"{' '.join(args)}: {res.stderr.strip()}")
        return left


SERVERS, ORG, TEAM, PROJECT, KEYS = range(5)


def write_token(tmp_path: Path) -> Path:
    f = tmp_path / "hr.token"
    f.write_text(HR_TOKEN + "\n")
    f.chmod(0o600)
    return f


# Its own budget: some 40 llmgw commands (a second each on a busy machine), and the shared
# gateway's start when this is the first test to use it.
@pytest.mark.timeout(420)
async def test_agents_reach_exactly_the_company_tools_granted_to_them(starter_gateway, tmp_path):
    home = starter_gateway.home
    made = Made(home)
    async with ServerProcess("hr", token=HR_TOKEN) as hr, ServerProcess("wiki") as wiki:
        try:
            await _acceptance(home, made, hr, wiki, tmp_path)
        finally:
            left = await made.clean()
    assert not left, left
    assert [s["name"] for s in ctl(home, "mcp", "list")["servers"] if not s["builtin"]] == []
    assert ctl(home, "mcp", "grants")["grants"] == []


async def _acceptance(home: Path, made: Made, hr: ServerProcess, wiki: ServerProcess, tmp_path):
    # -- the servers, added as the README says; the tree keys hang from -----------------
    made(SERVERS, "mcp", "remove", "hr", "--yes")
    made(SERVERS, "mcp", "remove", "wiki", "--yes")
    made(ORG, "org", "rm", "Initech")
    for team in ("Initech/people", "Initech/sales"):
        made(TEAM, "team", "rm", team)
    for project in ("Initech/people/directory", "Initech/sales/leads"):
        made(PROJECT, "project", "rm", project)
    token = str(write_token(tmp_path))
    add_hr = ["--url", hr.url, "--bearer-file", token, "--description", "The staff directory"]
    said, _, _ = await together(
        lambda: ctl_says(home, "mcp", "add", "hr", *add_hr),
        lambda: ctl(home, "mcp", "add", "wiki", "--url", wiki.url),
        lambda: ctl(home, "project", "create", "--parents", "Initech/people/directory"),
    )
    assert "Check it: llmgw ctl mcp test hr" in said and "llmgw ctl mcp grant" in said
    assert HR_TOKEN not in said

    tested_hr, tested_wiki, shown, wiki_view, people, listing, _, a = await together(
        lambda: ctl(home, "mcp", "test", "hr"),
        lambda: ctl(home, "mcp", "test", "wiki"),
        lambda: llmgw(home, "ctl", "mcp", "show", "hr", "--json"),
        lambda: ctl(home, "mcp", "show", "wiki"),
        lambda: ctl_says(home, "mcp", "list"),
        lambda: llmgw(home, "ctl", "mcp", "list", "--json").stdout,
        lambda: ctl(home, "project", "create", "--parents", "Initech/sales/leads"),
        lambda: make_key(home, "Initech/people/directory", "agent-a"),
    )
    made(KEYS, "keys", "revoke", a.key_id)
    assert tested_hr["ok"] and set(tested_hr["tools"]) == {"lookup", "slow"}, tested_hr
    assert tested_wiki["ok"] and tested_wiki["tools"] == ["search"], tested_wiki
    # Credentials are shown as header names only, in every answer about the server.
    view = json.loads(shown.stdout)
    assert view["sealed_header_names"] == ["Authorization"] and view["header_names"] == []
    assert view["transport"] == "streamable_http" and wiki_view["transport"] == "sse"
    assert HR_TOKEN not in shown.stdout + people + listing
    endpoint = json.loads(listing)["endpoint"]
    assert endpoint.endswith("/mcp") and endpoint in people
    assert '"Authorization": "Bearer <your llmgw key>"' in people

    # -- who may see what ---------------------------------------------------------------
    made(KEYS, "mcp", "revoke", "Initech/people/directory", "hr.lookup")
    b, c_key, said = await together(
        lambda: make_key(home, "Initech/sales/leads", "agent-b"),
        lambda: make_key(home, "Initech/people/directory", "agent-c"),
        lambda: ctl_says(home, "mcp", "grant", "Initech/people/directory", "hr.lookup"),
    )
    made(KEYS, "keys", "revoke", b.key_id)
    made(KEYS, "keys", "revoke", c_key.key_id)
    assert "within seconds" in said

    for mode in ("auto", "legacy"):
        async with agent(endpoint, a, mode) as c:
            assert await eventually(lambda c=c: _is(listed(c), {"hr.lookup"})), mode
            found = await c.call_tool("hr.lookup", {"name": "Ada"})
            assert not found.is_error and "ada@example.com" in text_of(found), found
            # Its other tool is not granted: refused as if it did not exist.
            e = await refused(c, "hr.slow", {"seconds": 0})
            assert (e.error.code, e.error.message) == (UNKNOWN_TOOL, "Unknown tool: hr.slow")
        async with agent(endpoint, b, mode) as c:
            assert await listed(c) == set()
            ungranted = await refused(c, "hr.lookup", {"name": "Ada"})
            absent = await refused(c, "hr.nothing", {})
            # A caller cannot tell a tool it may not use from one that is not there.
            assert ungranted.error.code == absent.error.code == UNKNOWN_TOOL
            assert ungranted.error.message == "Unknown tool: hr.lookup"

    # A grant to A's team reaches A, already connected, within seconds; revoking hides it.
    async with agent(endpoint, a, "auto") as modern, agent(endpoint, a, "legacy") as legacy:
        ctl(home, "mcp", "grant", "Initech/people", "wiki")
        for c in (modern, legacy):
            assert await eventually(lambda c=c: _is(listed(c), {"hr.lookup", "wiki.search"}))
            pages = await c.call_tool("wiki.search", {"q": "vacation"})
            assert not pages.is_error and "how we work" in text_of(pages), pages
        revoked = ctl(home, "mcp", "revoke", "Initech/people", "wiki")
        assert revoked["changed"] and revoked["still_granted_by"] == []
        for c in (modern, legacy):
            assert await eventually(lambda c=c: _is(listed(c), {"hr.lookup"}))
            e = await refused(c, "wiki.search", {"q": "vacation"})
            assert e.error.code == UNKNOWN_TOOL

    # The upstream received the sealed token on every request and never a caller's key.
    seen = await hr.seen()
    assert seen and {r["headers"].get("authorization") for r in seen} == {f"Bearer {HR_TOKEN}"}
    for r in seen:
        for value in r["headers"].values():
            assert a.secret not in value and b.secret not in value, r
    assert any(r["headers"].get("x-llmgw-key-id") == a.key_id for r in seen)

    # -- the rate: at most N calls a minute per key and server --------------------------
    ctl(home, "mcp", "change", "hr", "--rate", "3")
    async with agent(endpoint, c_key, "auto") as c:
        await eventually(lambda: _is(listed(c), {"hr.lookup"}))
        for _ in range(3):
            assert not (await c.call_tool("hr.lookup", {"name": "Bo"})).is_error
        e = await refused(c, "hr.lookup", {"name": "Bo"})
        assert e.error.code == RATE_LIMITED and "hr" in e.error.message, e.error
        assert e.error.data["retryAfterSeconds"] > 0 and e.error.data["server"] == "hr"

    # -- llmgw:admin, granted like any other server -------------------------------------
    made(KEYS, "mcp", "revoke", a.key_id, "llmgw:admin.list_nodes")
    ctl(home, "mcp", "grant", a.key_id, "llmgw:admin.list_nodes")
    async with agent(endpoint, a, "auto") as c:
        await eventually(lambda: _is(listed(c), {"hr.lookup", "llmgw_admin.list_nodes"}))

        async def same_nodes():
            result = await c.call_tool("llmgw_admin.list_nodes", {})
            assert not result.is_error, result
            # What `ctl nodes --json` prints, asked the same way at once: a heartbeat
            # between the two answers moves a node's figures, and then both are asked again.
            async with AdminClient.from_paths(Paths.under(home)) as admin:
                printed = to_plain(await admin.list_nodes())["nodes"]
            return result.structured_content["nodes"] == printed and printed

        nodes = await eventually(same_nodes)
        # And the command itself prints those nodes (a second later: but for the heartbeat).
        assert without_heartbeat(ctl(home, "nodes")["nodes"]) == without_heartbeat(nodes)

    # -- every call is accounted (never its arguments) ----------------------------------
    async def usage_of_a():
        reply = ctl(home, "mcp", "usage", "--key", a.key_id, "--by", "server,tool,status")
        return {(g["group"]["tool"], g["group"]["status"]): g["calls"] for g in reply["groups"]}

    calls = await eventually(lambda: _at_least(usage_of_a(), ("lookup", "ok"), 2))
    assert calls[("search", "ok")] == 2 and calls[("list_nodes", "ok")] >= 1, calls


def without_heartbeat(nodes: list[dict]) -> list[dict]:
    beat = ("last_heartbeat_at", "heartbeat_seq", "gpu_samples")
    return [{k: v for k, v in n.items() if k not in beat} for n in nodes]


async def _is(value: Awaitable[Any], wanted: Any) -> bool:
    return (await value) == wanted


async def _at_least(groups: Awaitable[dict], key: tuple[str, str], n: int) -> dict | None:
    got = await groups
    return got if got.get(key, 0) >= n else None


# -- the breaker: a server killed and started again ---------------------------------------


@pytest.fixture
def quick_breaker_gateway(tmp_path) -> Path:
    """Its own gatewayd (no node needed for MCP) whose breakers open after 2 failures for 5 s
    (long enough for a ctl call to see one open, short enough to wait for the trial)."""
    home = tmp_path / "home"
    init_on_free_ports(home, "--no-node", "--no-starter")
    config = home / "etc" / "server.yaml"
    settings = yaml.safe_load(config.read_text())
    settings["mcp"].update(breaker_failures=2, breaker_open_s=5.0)
    config.write_text(yaml.safe_dump(settings, sort_keys=False))
    proc = start(home, "server")
    try:
        wait_until(lambda: llmgw(home, "ctl", "status", "--json").returncode == 0, timeout_s=30)
        yield home
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
        assert "Traceback" not in out, out


def breaker_of(home: Path, name: str) -> dict:
    return next(s for s in ctl(home, "mcp", "list")["servers"] if s["name"] == name)


@pytest.mark.timeout(240)
async def test_a_server_killed_opens_its_breaker_and_closes_it_after_the_trial_once_back(
    quick_breaker_gateway, tmp_path
):
    home = quick_breaker_gateway
    async with ServerProcess("hr", token=HR_TOKEN) as hr:
        token = write_token(tmp_path)
        ctl(home, "mcp", "add", "hr", "--url", hr.url, "--bearer-file", str(token))
        ctl(home, "project", "create", "--parents", "Acme/ml/search")
        key = make_key(home, "Acme/ml/search", "agent")
        ctl(home, "mcp", "grant", "Acme/ml/search", "hr")
        endpoint = ctl(home, "mcp", "list")["endpoint"]
        async with agent(endpoint, key, "auto") as c:
            await eventually(lambda: _is(listed(c), {"hr.lookup", "hr.slow"}))
            assert not (await c.call_tool("hr.lookup", {"name": "Ada"})).is_error
            assert (breaker_of(home, "hr")["breaker"], breaker_of(home, "hr")["state"]) == (
                "closed",
                "ok",
            )

            hr.kill()
            await hr.wait()
            e = await refused(c, "hr.lookup", {"name": "Ada"})
            assert e.error.code == UNAVAILABLE and "hr" in e.error.message, e.error

            async def opened():
                err = await refused(c, "hr.lookup", {"name": "Ada"})
                assert err.error.code == UNAVAILABLE and "hr" in err.error.message, err.error
                return breaker_of(home, "hr")["breaker"] == "open"

            await eventually(opened)
            # While open, its tools answer at once, naming the server and when it is tried again.
            err = await refused(c, "hr.lookup", {"name": "Ada"})
            assert err.error.code == UNAVAILABLE, err.error
            assert "hr is not answering" in err.error.message and "trial" in err.error.message
            shown = breaker_of(home, "hr")
            assert shown["state"] == "failing" and shown["breaker_reason"], shown
            people = ctl_says(home, "mcp", "list")
            assert "failing" in people and "open" in people

            await hr.start()  # the same port again

            async def answered():
                try:
                    return not (await c.call_tool("hr.lookup", {"name": "Ada"})).is_error
                except MCPError as e:
                    assert e.error.code == UNAVAILABLE, e.error
                    return False

            # The breaker lets one trial through after breaker_open_s; it succeeds and closes.
            assert await eventually(answered)
            shown = breaker_of(home, "hr")
            assert (shown["breaker"], shown["state"], shown["breaker_reason"]) == (
                "closed",
                "ok",
                "",
            )
