"""The gateway port behind trusted proxies: connections counted by the client the proxy names.

Behind HAProxy every connection's peer is the proxy: counted by it, one tenant
could fill the 256-connection bound (``connections.max_per_address``) for
everyone. From a peer in ``http.trusted_proxies`` (and only there: anyone else
could name any address) the real client is taken from

- a **PROXY protocol header** (v1 or v2, ``http.proxy_protocol: true``;
  HAProxy's ``send-proxy-v2``): read before httptools sees a byte, the bytes
  after it handed on (over HTTPS it comes before the TLS handshake and is read
  there, tls_accept.py). A header that does not parse resets the connection
  (``proxy_header``); one slow to come is late for ``header_timeout`` as any
  request's headers are. ``LOCAL``/``UNKNOWN`` headers (the proxy's health
  checks) leave the connection the proxy's.
- **X-Forwarded-For** otherwise, read at each request's headers: the first
  request's client is the one the connection is counted as from then on; each
  request's own is its ``scope["client"]`` (a proxy may carry several clients'
  requests on one kept-alive connection).

Either way the connection is first held as the proxy's without the per-address
bound (the proxy carries everyone's connections), then counted as the client's
against it: past the client's bound it is reset and counted as ``per_address``,
while other clients' connections through the same proxy go on. uvicorn's
``scope["client"]`` is the real client, so whatever logs or records clients
sees them.

A PROXY line from an untrusted peer is no header: it reaches httptools as the
bad HTTP request it is. With no proxy trusted (the default) this protocol is
not used at all (``PortGuard.http_protocol``).
"""

from __future__ import annotations

import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gatewayd.http.guard import GuardedHttpProtocol, client_key, reset
from gatewayd.http.realaddr import (
    ProxyHeaderError,
    client_from_forwarded_for,
    parse_proxy_header,
)

log = logging.getLogger(__name__)

_data_received = HttpToolsProtocol.data_received
_on_headers_complete = HttpToolsProtocol.on_headers_complete


class _NoEvent:
    def set(self) -> None:
        pass


class _Refused:
    """The cycle of a request whose client was past its bound: what httptools still
    parses of it goes nowhere (uvicorn's callbacks stop at a complete response)."""

    response_complete = True
    more_body = False
    disconnected = True
    message_event = _NoEvent()


_REFUSED = _Refused()


class ProxiedHttpProtocol(GuardedHttpProtocol):
    """``GuardedHttpProtocol`` that believes a trusted proxy's word on the client."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # The PROXY header's bytes so far while it is awaited; None otherwise.
        self._pending: bytes | None = None
        # From a trusted proxy without PROXY headers: X-Forwarded-For names the client.
        self._xff = False
        # The connection is counted as the client X-Forwarded-For named (first request).
        self._xff_keyed = False

    def _admit(self, transport) -> str | None:
        guard = self.guard
        peer = transport.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else None
        if not guard.trusted.trusts(host):
            return guard.admit(transport)
        key = client_key(peer)
        reason = guard.take(key, bounded=False)
        if reason is not None:
            reset(transport)
            guard.count(reason, key)
            return None
        if guard.proxy_protocol:
            self._pending = b""
        else:
            self._xff = True
        return key

    def data_received(self, data: bytes) -> None:
        if self._pending is None:
            _data_received(self, data)
            return
        buf = self._pending + data
        try:
            parsed = parse_proxy_header(buf)
        except ProxyHeaderError as e:
            log.debug("http port: %s from the proxy %s", e, self._key)
            self.guard.count("proxy_header", self._key or "")
            reset(self.transport)
            return
        if parsed is None:
            self._pending = buf
            return
        source, used = parsed
        self._pending = None
        if source is not None:
            if not self._count_as(client_key(source)):
                return
            self.client = source
        if len(buf) > used:
            _data_received(self, buf[used:])

    def header_before_tls(self, source: tuple[str, int] | None) -> None:
        """Over HTTPS the PROXY header came before the handshake, read by the listener
        (tls_accept.py): the client it named (None: the proxy's own, a health check)."""
        if self._pending is None:
            return  # not waiting for one: not from a trusted proxy, or no PROXY protocol
        self._pending = None
        if source is not None and self._count_as(client_key(source)):
            self.client = source

    def on_headers_complete(self) -> None:
        if self._xff:
            if self.transport.is_closing():
                self.cycle = _REFUSED  # type: ignore[assignment]
                return
            header = None
            for name, value in self.headers:
                if name == b"x-forwarded-for":
                    text = value.decode("latin-1")
                    header = text if header is None else f"{header},{text}"
            peer = self.client[0] if self.client else None
            client = client_from_forwarded_for(peer, header, self.guard.trusted)
            if client is not None:
                if not self._xff_keyed:
                    self._xff_keyed = True
                    if not self._count_as(client_key((client, 0))):
                        self.cycle = _REFUSED  # type: ignore[assignment]
                        return
                self.scope["client"] = (client, 0)
        _on_headers_complete(self)

    def _count_as(self, key: str) -> bool:
        """Count this connection as ``key``'s from now on; reset it (False) past its bound."""
        guard, held = self.guard, self._key or ""
        if guard.rekey(held, key):
            self._key = key
            return True
        guard.count("per_address", key)
        reset(self.transport)
        return False
