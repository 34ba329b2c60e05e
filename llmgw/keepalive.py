"""HTTP/2 keepalive for the agent stream, the same on both ends.

8 s to notice a half-open stream: a ping after 5 s without traffic, 3 s for
its answer. A frozen or unplugged peer is then dropped and the agent dials
again, instead of both sides waiting on a TCP timeout of minutes.
"""

from __future__ import annotations

from grpclib.config import Configuration

KEEPALIVE_TIME_S = 5.0
KEEPALIVE_TIMEOUT_S = 3.0


def keepalive_config() -> Configuration:
    abort_unanswered_connections()
    return Configuration(
        _keepalive_time=KEEPALIVE_TIME_S,
        _keepalive_timeout=KEEPALIVE_TIMEOUT_S,
        _keepalive_permit_without_calls=True,
        # Keep pinging a silent connection: silence is what we want to catch.
        _http2_max_pings_without_data=0,
        _http2_min_sent_ping_interval_without_data=KEEPALIVE_TIME_S,
    )


_installed = False


def abort_unanswered_connections() -> None:
    """Make a keepalive timeout drop the connection at once, TLS included.

    grpclib closes a connection whose ping went unanswered with
    ``transport.close()``. On a TLS transport that starts a polite shutdown
    which waits up to 30 s for the silent peer's close_notify — so a frozen
    peer was noticed after 38 s, not 8. A peer that has not answered a ping
    for the whole keepalive timeout will not answer a close_notify either:
    abort the transport instead. Other closes are left as they are.
    """
    global _installed
    if _installed:
        return
    import time

    from grpclib.protocol import Connection

    original_close = Connection.close

    def close(self) -> None:
        transport = getattr(self, "_transport", None)
        pending = self._close_by_ping_handler is not None and self.last_ping_sent is not None
        unanswered = pending and (
            time.monotonic() - self.last_ping_sent >= self._config._keepalive_timeout - 0.05
        )
        original_close(self)
        if unanswered and transport is not None:
            transport.abort()

    Connection.close = close
    _installed = True
