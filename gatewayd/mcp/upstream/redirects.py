"""Every HTTP exchange with a company MCP server, and the one rule for its redirects.

A request to a company server carries its sealed credentials and, for a
tools/call, the caller's arguments. aiohttp's own redirect following strips
only ``Authorization`` and ``Cookie`` when the redirect leaves the origin: an
``X-Api-Key`` went along to whatever host a ``307`` named, with the body. So
aiohttp follows nothing here, and this module follows a redirect only where
the credentials already are: a ``307`` or ``308`` (method and body kept, as
sent) to the same origin (scheme, host and port) as the server's address, as
a server behind Starlette answers ``…/mcp/`` with ``/mcp``. Any other
redirect is an UpstreamError naming where it pointed (docs/decisions.md,
"Credentials stay with their origin").
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from urllib.parse import urljoin, urlsplit

import aiohttp

from gatewayd.mcp.upstream.errors import UpstreamError
from gatewayd.mcp.upstream.events import NO_AIOHTTP_TIMEOUT
from llmgw.mcp.names import McpNameRefused, origin_of

# Redirects that keep the method and the body, and so may be followed within the origin.
FOLLOWED = frozenset({307, 308})
# Hops followed within the origin before giving up (a loop, or a server misconfigured).
MAX_HOPS = 3
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HINT = (
    "if the server has moved there, give its new address and its credentials for it:"
    " llmgw ctl mcp change NAME --url URL --bearer-file FILE (or --header-file NAME=FILE)"
)


async def send(
    http: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    data: bytes | None = None,
) -> aiohttp.ClientResponse:
    """The answer to one request, after redirects within the origin of ``url``.

    The caller releases it (``exchange`` does, for a request read to its end).
    """
    home = origin_of(url)
    at = url
    for _ in range(MAX_HOPS + 1):
        resp = await http.request(
            method,
            at,
            data=data,
            headers=headers,
            allow_redirects=False,
            timeout=NO_AIOHTTP_TIMEOUT,
        )
        if resp.status not in _REDIRECTS:
            return resp
        resp.release()
        location = resp.headers.get("Location", "")
        if not location:
            raise UpstreamError("http", f"the server answered {resp.status} naming no address")
        target = urljoin(at, location)
        if resp.status not in FOLLOWED or _origin(target) != home:
            raise redirect_refused(resp.status, target, home)
        at = target
    raise UpstreamError(
        "http", f"the server redirected more than {MAX_HOPS} times (last to {_shown(at)})"
    )


@contextlib.asynccontextmanager
async def exchange(
    http: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    data: bytes | None = None,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """``async with`` one request (see ``send``): the answer is released at the end."""
    resp = await send(http, method, url, headers=headers, data=data)
    try:
        yield resp
    finally:
        resp.release()


def redirect_refused(status: int, target: str, home: str) -> UpstreamError:
    """A redirect not followed, in words naming where it pointed."""
    shown = _shown(target)
    if _origin(target) != home:
        why = (
            f"another origin than the server's ({home}); the gateway follows no redirect"
            " there: it would take the server's credentials and the call's arguments along"
        )
    else:
        why = (
            f"only {' and '.join(map(str, sorted(FOLLOWED)))} are followed (they keep the request)"
        )
    return UpstreamError(
        "http", f"the server answered {status}, redirecting to {shown}: {why}", hint=_HINT
    )


def _origin(url: str) -> str:
    try:
        return origin_of(url)
    except McpNameRefused:
        return ""  # no origin the server's could be


def _shown(url: str) -> str:
    """An address a server named, without its query (a server may put a token there)."""
    parts = urlsplit(url)
    query = "?…" if parts.query else ""
    host = parts.netloc.rpartition("@")[2]  # never a user:password a server wrote there
    return f"{parts.scheme}://{host}{parts.path}{query}"
