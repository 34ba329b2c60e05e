"""The setup plan's Gateway part: :8080's own TLS and the proxies in front of it.

The same choices as ``server init --http-tls | --http-cert/--http-key``,
``--trusted-proxy`` and ``--proxy-protocol`` (llmgw/setup/http_init.py), checked
by the same rules as server.yaml's ``http:`` (llmgw/config.py ``HttpConfig``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from llmgw.connbounds import TrustedProxies


class GatewayPart(BaseModel):
    """The gateway port: HTTPS of its own, and whose word on the client is believed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    on: bool = False
    # HTTPS with a certificate from the cluster CA for this machine's names.
    tls: bool = True
    # Or the operator's own PEM files (both).
    cert: str = ""
    key: str = ""
    trusted_proxies: tuple[str, ...] = ()
    proxy_protocol: bool = False

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        named = tuple(p.strip() for p in v if p.strip())
        TrustedProxies(named)  # names a bad entry
        return named

    @model_validator(mode="after")
    def _together(self) -> GatewayPart:
        if bool(self.cert.strip()) != bool(self.key.strip()):
            raise ValueError("the certificate and its key go together: give both")
        if self.proxy_protocol and not self.trusted_proxies:
            raise ValueError("PROXY headers are read from trusted proxies only: name them")
        if self.proxy_protocol and self.https:
            raise ValueError(
                "PROXY headers come before TLS: with HTTPS here, leave PROXY headers off "
                "(X-Forwarded-For names the client)"
            )
        return self

    @property
    def own_cert(self) -> bool:
        return bool(self.cert.strip())

    @property
    def https(self) -> bool:
        return self.tls or self.own_cert


def gateway_flags(part: GatewayPart) -> list[str]:
    """``server init``'s flags for the part."""
    if not part.on:
        return []
    argv: list[str] = []
    if part.own_cert:
        argv += ["--http-cert", part.cert.strip(), "--http-key", part.key.strip()]
    elif part.tls:
        argv.append("--http-tls")
    for proxy in part.trusted_proxies:
        argv += ["--trusted-proxy", proxy]
    if part.proxy_protocol:
        argv.append("--proxy-protocol")
    return argv


def describe_gateway(part: GatewayPart) -> str:
    """One line: what the part does as set."""
    if not part.on:
        return "plain HTTP on :8080; clients counted by the address they connect from"
    served = (
        "HTTPS with your certificate"
        if part.own_cert
        else "HTTPS, certificate from the cluster CA"
        if part.tls
        else "plain HTTP"
    )
    if not part.trusted_proxies:
        return f"{served}; no proxy trusted"
    how = "PROXY headers" if part.proxy_protocol else "X-Forwarded-For"
    return f"{served}; clients named by {', '.join(part.trusted_proxies)} ({how})"
