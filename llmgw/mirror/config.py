"""The mirror's settings: server.yaml's ``mirror:`` (the cluster's side) and mirror.yaml.

server.yaml::

    mirror:
      urls: [http://10.0.0.5:7080, http://10.0.0.6:7080]   # tried in order
      read_token_file: ""      # default <secrets>/mirror-read-token
      admin_token_file: ""     # default the cluster's admin token
      probe_interval_s: 15

mirror.yaml (``llmgw mirror serve``; every key is also a flag)::

    listen: 0.0.0.0:7080
    data_dir: ""               # default /var/lib/llmgw-mirror
    upstream: https://huggingface.co    # "" : none (an offline mirror)
    upstream_token_file: ""
    max_bytes: 0               # a quota; 0: the disk is the limit
    peers: [http://10.0.0.6:7080]
    peer_token_file: ""        # presented to peers; default the read token
    read_token_file: ""        # default <secrets>/mirror-read-token
    admin_token_file: ""       # default <secrets>/admin-token
    sync_interval_s: 30
    tls: {cert: "", key: "", client_ca: ""}   # HTTPS; client_ca: node certificates read
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

DEFAULT_MIRROR_PORT = 7080
HF_HUB_URL = "https://huggingface.co"


def check_mirror_url(v: str, what: str = "a mirror URL") -> str:
    """http(s)://host[:port][/path], no credentials, query or trailing slash."""
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{what} {v!r} must be http(s)://host[:port], e.g. http://10.0.0.5:7080")
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


def load_mirror_config(path: Path) -> MirrorServeConfig:
    """mirror.yaml, or the defaults where it does not exist."""
    from llmgw.config import _load

    if not path.exists():
        return MirrorServeConfig()
    return _load(path, MirrorServeConfig, hint="see `llmgw mirror serve --help` for its keys")
