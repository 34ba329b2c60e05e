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
    return Configuration(
        _keepalive_time=KEEPALIVE_TIME_S,
        _keepalive_timeout=KEEPALIVE_TIMEOUT_S,
        _keepalive_permit_without_calls=True,
        # Keep pinging a silent connection: silence is what we want to catch.
        _http2_max_pings_without_data=0,
        _http2_min_sent_ping_interval_without_data=KEEPALIVE_TIME_S,
    )
