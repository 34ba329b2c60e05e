"""What can go wrong talking to a company MCP server, in words an operator can act on.

    UpstreamError       no answer: .kind says why
                        "connect"   nothing accepted the connection (refused, unknown host)
                        "http"      it answered with an HTTP status that is not an MCP answer (401 …)
                        "timeout"   no answer within the server's timeout
                        "protocol"  it answered, but not as an MCP server does
                        "closed"    the connection or stream ended before the answer
    UpstreamRpcError    it answered with a JSON-RPC error: relayed to the caller as is

Breakers count UpstreamError only: a JSON-RPC error is the server working as meant.
Messages never name the server (the caller of Upstream knows which one it asked), so the
endpoint can say "hr is not answering (connection refused at http://…)".
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from llmgw.errors import LlmgwError

KINDS = ("connect", "http", "timeout", "protocol", "closed")


class UpstreamError(LlmgwError):
    """No MCP answer could be had from the server; `kind` is one of KINDS."""

    def __init__(self, kind: str, message: str, *, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.kind = kind

    def __repr__(self) -> str:
        return f"UpstreamError({self.kind!r}, {self.message!r})"


class UpstreamRpcError(Exception):
    """The server answered with a JSON-RPC error object: relay `code`, `message`, `data` as they are."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(f"{message} (JSON-RPC error {code})")
        self.code = code
        self.message = message
        self.data = data

    def error(self) -> dict:
        """The JSON-RPC error object, as the server sent it."""
        err: dict = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err

    @classmethod
    def from_error(cls, err: object) -> UpstreamRpcError:
        if not isinstance(err, dict) or not isinstance(err.get("code"), int):
            raise UpstreamError(
                "protocol", f"not an MCP server: its error object is malformed ({_short(err)})"
            )
        return cls(err["code"], str(err.get("message", "")), err.get("data"))


def timeout_error(timeout_s: float) -> UpstreamError:
    return UpstreamError("timeout", f"no answer within {timeout_s:g} s")


def http_status_error(status: int, body: bytes = b"") -> UpstreamError:
    if status in (401, 403):
        return UpstreamError(
            "http",
            f"the server answered {status}: its credential was refused",
            hint="replace it: llmgw ctl mcp change NAME --bearer-file FILE (or --header-file)",
        )
    text = describe_body(body)
    return UpstreamError("http", f"the server answered {status}" + (f": {text}" if text else ""))


def describe_body(body: bytes) -> str:
    """A refusal's body in a few words: a JSON-RPC error's message, else the start of the text."""
    try:
        err = json.loads(body).get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:200]
    except (ValueError, AttributeError):
        pass
    text = body[:200].decode("utf-8", "replace").strip()
    return text if len(body) <= 200 else text + "…"


def transport_error(exc: BaseException, url: str) -> UpstreamError:
    """An aiohttp or socket failure as an UpstreamError in plain words."""
    if isinstance(exc, UpstreamError):
        return exc
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        if isinstance(os_error, ConnectionRefusedError):
            return UpstreamError("connect", f"connection refused at {url}")
        if isinstance(exc, aiohttp.ClientConnectorDNSError):
            return UpstreamError("connect", f"the address of {url} could not be resolved")
        return UpstreamError(
            "connect", f"could not connect to {url}: {os_error.strerror or os_error}"
        )
    if isinstance(
        exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | ConnectionResetError
    ):
        return UpstreamError(
            "closed", f"the server at {url} closed the connection before answering"
        )
    if isinstance(exc, aiohttp.InvalidURL):
        return UpstreamError("connect", f"{url} is not an address that can be reached")
    if isinstance(exc, aiohttp.ClientResponseError | aiohttp.ClientOSError | OSError):
        return UpstreamError("closed", f"the connection to {url} failed: {exc}")
    if isinstance(exc, asyncio.TimeoutError):
        return UpstreamError("timeout", f"no answer from {url}")
    return UpstreamError("protocol", f"the exchange with {url} failed: {exc!r}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
