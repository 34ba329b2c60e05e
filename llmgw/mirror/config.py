"""The mirror's settings: server.yaml's ``mirror:`` (the cluster's side) and mirror.yaml.

server.yaml::

    mirror:
      urls: [https://10.0.0.5:7080, https://10.0.0.6:7080]   # tried in order
      read_token_file: ""      # default <secrets>/mirror-read-token
      admin_token_file: ""     # default <secrets>/mirror-admin-token (never the admin token)
      probe_interval_s: 15

mirror.yaml (``llmgw mirror serve``; every key is also a flag)::

    listen: 0.0.0.0:7080
    data_dir: ""               # default /var/lib/llmgw-mirror
    upstream: https://huggingface.co    # "" : none (an offline mirror)
    upstream_token_file: ""
    max_bytes: 0               # a quota; 0: the disk is the limit
    peers: [https://10.0.0.6:7080]
    peer_token_file: ""        # presented to peers; default the read token
    read_token_file: ""        # default <secrets>/mirror-read-token
    admin_token_file: ""       # default <secrets>/mirror-admin-token
    sync_interval_s: 30
    tls: {cert: "", key: "", client_ca: ""}   # default <pki>/mirror.crt, mirror.key, ca.crt
    plain_http: false          # true: HTTP, for a mirror behind a proxy that does TLS

HTTPS is the default: a mirror.yaml that names no certificate serves the
machine's (``server init --mirror`` issues it from the cluster CA), and node
certificates the cluster CA signed read as the read token does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmgw.paths import Paths

DEFAULT_MIRROR_PORT = 7080
HF_HUB_URL = "https://huggingface.co"


def check_mirror_url(v: str, what: str = "a mirror URL") -> str:
    """http(s)://host[:port][/path], no credentials, query or trailing slash."""
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} {v!r} must be http(s)://host[:port], e.g. https://10.0.0.5:7080")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"{what} {v!r} must carry no credentials, query or fragment")
    return v.rstrip("/")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class MirrorsConfig(_Strict):
    """server.yaml ``mirror:``: the mirrors the cluster uses, in the order they are tried."""

    urls: list[str] = Field(default_factory=list)
    read_token_file: str = ""
    admin_token_file: str = ""
    probe_interval_s: Annotated[float, Field(gt=0, le=3600)] = 15.0

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        out = [check_mirror_url(u) for u in v]
        if len(set(out)) != len(out):
            raise ValueError("a mirror is named twice in mirror.urls")
        return out

    @property
    def enabled(self) -> bool:
        return bool(self.urls)


class MirrorTls(_Strict):
    cert: str = ""
    key: str = ""
    # Client certificates this CA signed (the cluster's nodes) may read.
    client_ca: str = ""


class MirrorServeConfig(_Strict):
    """mirror.yaml: one mirror daemon's settings."""

    listen: str = f"0.0.0.0:{DEFAULT_MIRROR_PORT}"
    data_dir: str = ""
    upstream: str = HF_HUB_URL
    upstream_token_file: str = ""
    max_bytes: Annotated[int, Field(ge=0)] = 0
    peers: list[str] = Field(default_factory=list)
    peer_token_file: str = ""
    read_token_file: str = ""
    admin_token_file: str = ""
    sync_interval_s: Annotated[float, Field(gt=0, le=86400)] = 30.0
    tls: MirrorTls = MirrorTls()
    # Plain HTTP, said so: for a mirror behind a proxy that does its TLS. Never the default.
    plain_http: bool = False

    @property
    def scheme(self) -> str:
        return "http" if self.plain_http else "https"

    @model_validator(mode="after")
    def _tls_or_plain(self) -> MirrorServeConfig:
        if self.plain_http and (self.tls.cert or self.tls.key or self.tls.client_ca):
            raise ValueError("plain_http serves no certificate: leave tls out, or plain_http")
        return self

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, v: str) -> str:
        return check_mirror_url(v, "upstream") if v else ""

    @field_validator("peers")
    @classmethod
    def _peers(cls, v: list[str]) -> list[str]:
        return [check_mirror_url(u, "a peer") for u in v]

    @field_validator("listen")
    @classmethod
    def _listen(cls, v: str) -> str:
        from llmgw.config import split_host_port

        split_host_port(v)
        return v


def with_machine_tls(cfg: MirrorServeConfig, paths: Paths) -> MirrorServeConfig:
    """``cfg`` with the TLS files it leaves out taken from the machine's layout.

    The certificate and key default to <pki>/mirror.crt and mirror.key; the
    CA that client certificates are checked against to the cluster's, where
    this machine holds it. A plain_http mirror is left as it is.
    """
    if cfg.plain_http:
        return cfg
    client_ca = cfg.tls.client_ca or (str(paths.ca_cert) if paths.ca_cert.is_file() else "")
    tls = MirrorTls(
        cert=cfg.tls.cert or str(paths.mirror_cert),
        key=cfg.tls.key or str(paths.mirror_key),
        client_ca=client_ca,
    )
    return cfg.model_copy(update={"tls": tls})


def load_mirror_config(path: Path) -> MirrorServeConfig:
    """mirror.yaml, or the defaults where it does not exist."""
    from llmgw.config import _load

    if not path.exists():
        return MirrorServeConfig()
    return _load(path, MirrorServeConfig, hint="see `llmgw mirror serve --help` for its keys")
