"""The schemas of server.yaml and agent.yaml, and their loading.

Both refuse unknown or ill-typed keys, naming the file, the key and what is
expected, so a typo never silently falls back to a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from llmgw.connbounds import MAX_PER_ADDRESS, TrustedProxies
from llmgw.errors import ConfigError
from llmgw.mcp.config import McpConfig
from llmgw.mirror.config import MirrorsConfig
from llmgw.paths import Paths
from llmgw.scaling import Classes, OnDemandConfig, ScalingConfig, default_classes

DEFAULT_AGENT_PORT = 7070
DEFAULT_ADMIN_PORT = 9090
DEFAULT_HTTP_PORT = 8080
DEFAULT_METRICS_PORT = 9091


HF_HUB_URL = "https://huggingface.co"


def check_hub_url(v: str) -> str:
    """A hub URL: http(s)://host[:port][/path], no trailing slash, no credentials."""
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"hub_url {v!r} must be http(s)://host[:port], e.g. {HF_HUB_URL}")
    if parts.username or parts.password or parts.query:
        raise ValueError(f"hub_url {v!r} must carry no credentials or query")
    return v.rstrip("/")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ListenConfig(_Strict):
    """Addresses gatewayd listens on, as HOST:PORT."""

    agent: str = f"0.0.0.0:{DEFAULT_AGENT_PORT}"
    admin: str = f"127.0.0.1:{DEFAULT_ADMIN_PORT}"
    http: str = f"0.0.0.0:{DEFAULT_HTTP_PORT}"
    metrics: str = f"0.0.0.0:{DEFAULT_METRICS_PORT}"

    @field_validator("agent", "admin", "http", "metrics")
    @classmethod
    def _host_port(cls, v: str) -> str:
        split_host_port(v)
        return v

    @field_validator("admin")
    @classmethod
    def _admin_loopback(cls, v: str) -> str:
        # The admin port serves the whole cluster to whoever holds the token;
        # it is never exposed beyond this machine.
        host, _ = split_host_port(v)
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the admin API listens on 127.0.0.1 only")
        return v


class StoreConfig(_Strict):
    """Where the control plane keeps its state.

    ``dsn`` empty means the embedded SQLite file under the data dir;
    ``postgresql://…`` uses PostgreSQL; ``sqlite:///path`` a SQLite file elsewhere.
    ``dsn_file`` reads the DSN from a secrets file instead (it may hold a password).
    """

    dsn: str = ""
    dsn_file: str = ""

    @field_validator("dsn")
    @classmethod
    def _scheme(cls, v: str) -> str:
        if v and not v.startswith(("postgresql://", "postgres://", "sqlite://")):
            raise ValueError("expected postgresql://… or sqlite:///path (or empty for the default)")
        return v


class NodesConfig(_Strict):
    """How the control plane judges node liveness."""

    heartbeat_interval_s: Annotated[float, Field(gt=0, le=60)] = 2.0
    # A node silent for this long is not_ready; its replicas stay where they are.
    not_ready_grace_s: Annotated[float, Field(gt=0, le=3600)] = 15.0
    # Heartbeats are kept in memory and written to the store at this pace.
    heartbeat_flush_interval_s: Annotated[float, Field(gt=0, le=300)] = 5.0
    # A node gone this long has its replicas placed elsewhere: long enough
    # that a reboot or a network blip never moves a whole node's work.
    lost_grace_s: Annotated[float, Field(gt=0, le=86400)] = 300.0


class EngineRelease(_Strict):
    """An engine version every node that can run it should have installed.

    ``source: archive`` downloads ``url`` and checks ``sha256`` (a llama.cpp
    release, or a mirror of it); ``source: wheel`` takes llama-server from
    the PyPI wheel installed beside the agent; ``source: pyenv`` (vLLM,
    SGLang) is a recipe for uv: when the version was ``released`` on the
    index, hashed ``requirements`` per CUDA build (``cu129: |`` lines of
    ``name==version --hash=sha256:…``), the ``index_url`` ("" for PyPI) and
    the ``python`` version. See llmgw/engines/recipes.py.
    """

    engine: Literal["llama.cpp", "vllm", "sglang"]
    version: str
    variant: str = ""
    source: Literal["archive", "wheel", "pyenv"] = "archive"
    url: str = ""
    sha256: str = ""
    released: str = ""
    requirements: dict[str, str] = Field(default_factory=dict)
    index_url: str = ""
    python: str = "3.12"

    @model_validator(mode="after")
    def _recipe(self) -> EngineRelease:
        from llmgw.engines.recipes import check_release

        check_release(self)
        return self

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str) -> str:
        import re

        if v and not re.fullmatch(r"[0-9a-fA-F]{64}", v):
            raise ValueError("sha256 must be 64 hex digits")
        return v.lower()


class ServerPki(_Strict):
    ca_cert: str = ""
    server_cert: str = ""
    server_key: str = ""


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_s(value: Any) -> float:
    """Seconds from a number or a text like 30s, 5m, 2h or 1d."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a text like 30s, 5m, 2h")  # noqa: TRY004 (pydantic reports ValueError)
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    unit = _DURATION_UNITS.get(text[-1:].lower())
    number = text[:-1] if unit else text
    try:
        return float(number) * (unit or 1)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration: write it like 30s, 5m, 2h or 1d") from None


class BandConfig(_Strict):
    """An admission band: its rank, how full it lets a model's replicas get, how long it waits."""

    name: Annotated[str, Field(min_length=1, max_length=63)]
    priority: int = 100
    # Requests in flight, every band together, as a share of the model's
    # slots (its ready replicas' parallel slots), above which this band waits.
    saturation_ceiling: Annotated[float, Field(gt=0, le=100)] = 1.0
    # How long a request of this band may wait for room (504 after).
    queue_ttl: Annotated[float, Field(gt=0)] = 30.0
    max_queue: Annotated[int, Field(ge=0)] = 1000

    @field_validator("queue_ttl", mode="before")
    @classmethod
    def _ttl(cls, v: Any) -> float:
        return duration_s(v)


class AdmissionConfig(_Strict):
    bands: list[BandConfig] = Field(
        default_factory=lambda: [BandConfig(name="default", priority=100)]
    )
    # The band of keys that name none.
    default_band: str = "default"

    @field_validator("bands")
    @classmethod
    def _bands(cls, v: list[BandConfig]) -> list[BandConfig]:
        if not v:
            raise ValueError("at least one band is needed")
        names = [b.name for b in v]
        if len(set(names)) != len(names):
            raise ValueError("two bands share a name")
        return v


class RouterConfig(_Strict):
    admission: AdmissionConfig = AdmissionConfig()


# The project a fresh cluster is given, so that a key can be made at once.
DEFAULT_PROJECT = "local/default/default"


class SetupConfig(_Strict):
    """What ``llmgw server init`` was asked for beyond its files; ``llmgw up`` acts on it.

    ``node``: ``llmgw up`` runs this machine's agent beside the control plane.
    ``starter``: the starter model is served on a cluster with no models.
    ``project``: made, with these limits, at the first start of a cluster with
    no projects ("" makes none). ``admin_group``: the group that may read the
    admin token besides its owner ("" for none).
    """

    node: bool = True
    starter: bool = True
    project: str = DEFAULT_PROJECT
    rpm: Annotated[int | None, Field(ge=1)] = None
    tpm: Annotated[int | None, Field(ge=1)] = None
    budget_month_micros: Annotated[int | None, Field(ge=0)] = None
    admin_group: str = ""

    @field_validator("project")
    @classmethod
    def _project(cls, v: str) -> str:
        if v:
            parts = v.split("/")
            if len(parts) != 3:
                raise ValueError(f"project {v!r} is not ORG/TEAM/PROJECT")
            for part in parts:
                check_name(part, what="each part of a project path")
        return v


def size_bytes(value: Any) -> int:
    """A size as written in server.yaml: 512, 64KiB, 200MB, 2GiB."""
    if isinstance(value, bool):
        raise ValueError("a size is a number of bytes, or like 200MB or 2GiB")  # noqa: TRY004 (pydantic reports ValueError)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    units = {
        "": 1,
        "b": 1,
        "kb": 10**3,
        "mb": 10**6,
        "gb": 10**9,
        "kib": 2**10,
        "mib": 2**20,
        "gib": 2**30,
    }
    number = text.rstrip("bBkKmMgGiI")
    unit = text[len(number) :].strip().lower()
    try:
        return int(float(number) * units[unit])
    except (ValueError, KeyError):
        raise ValueError(
            f"{text!r} is not a size: write it like 512, 64KiB, 200MB or 2GiB"
        ) from None


class ConnectionsConfig(_Strict):
    """How gatewayd's public ports (HTTP, metrics, agent) bound their connections.

    No client can hold a port down (gatewayd/http/guard.py).
    """

    # A request's headers must be whole this long after the connection opened
    # (or after the previous answer on a kept-alive one); the connection is reset after.
    header_timeout: Annotated[float, Field(gt=0)] = 10.0
    # Each read of a request body must bring bytes within this long.
    body_read_timeout: Annotated[float, Field(gt=0)] = 30.0
    # A kept-alive connection with no request is closed after this long.
    keepalive_timeout: Annotated[float, Field(gt=0)] = 5.0
    # Open connections one client may hold on each port (an IPv6 client counts by
    # its /64), and all clients of every port together; past either a new connection
    # is reset at once (llmgw_connections_refused_total). The total is lowered at
    # start where the open-files limit could not hold it beside the gateway's own
    # descriptors (each client's request in flight holds an engine connection too).
    max_per_address: Annotated[int, Field(ge=1)] = MAX_PER_ADDRESS
    max_total: Annotated[int, Field(ge=1)] = 10_000
    # TLS handshakes on the agent port must finish within this long.
    tls_handshake_timeout: Annotated[float, Field(gt=0)] = 10.0

    @field_validator(
        "header_timeout",
        "body_read_timeout",
        "keepalive_timeout",
        "tls_handshake_timeout",
        mode="before",
    )
    @classmethod
    def _durations(cls, v: Any) -> float:
        return duration_s(v)


class HttpConfig(_Strict):
    """The gateway port (:8080): its own TLS, and the proxies whose word on the client is taken.

    Behind HAProxy every connection comes from the proxy, so the per-address
    bound (``connections.max_per_address``) would count all clients as one;
    from a peer in ``trusted_proxies`` the PROXY protocol header (with
    ``proxy_protocol``) or ``X-Forwarded-For`` names the real client, who is
    then counted, bounded and recorded (gatewayd/http/proxied.py).
    """

    # PEM files: with both, :8080 serves HTTPS only (``server init --http-tls``
    # issues one from the cluster CA; ``--http-cert/--http-key`` take the operator's).
    tls_cert: str = ""
    tls_key: str = ""
    # Addresses or CIDRs of the proxies in front of :8080. Nobody else's PROXY
    # header or X-Forwarded-For is believed: anyone could name any address.
    trusted_proxies: list[str] = []
    # Connections from a trusted proxy start with a PROXY protocol header (v1 or
    # v2; HAProxy's send-proxy-v2). Off: X-Forwarded-For names the client.
    proxy_protocol: bool = False

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies(cls, v: list[str]) -> list[str]:
        TrustedProxies(v)  # names a bad entry
        return [p.strip() for p in v]

    @model_validator(mode="after")
    def _pair(self) -> HttpConfig:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("http.tls_cert and http.tls_key go together: give both, or neither")
        if self.proxy_protocol and not self.trusted_proxies:
            raise ValueError(
                "http.proxy_protocol needs http.trusted_proxies: the proxies whose header is read"
            )
        return self

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


class FilesConfig(_Strict):
    """Files clients upload for batches (``/v1/files``), kept in the store (every control
    plane serves them)."""

    # The largest file one upload may be.
    max_bytes: Annotated[int, Field(gt=0)] = 200 * 10**6
    # All files of one project together.
    max_project_bytes: Annotated[int, Field(gt=0)] = 10 * 10**9
    # A file is deleted this long after it was uploaded (or written, for outputs).
    expire_after: Annotated[float, Field(gt=0)] = 30 * 86400.0

    @field_validator("max_bytes", "max_project_bytes", mode="before")
    @classmethod
    def _sizes(cls, v: Any) -> int:
        return size_bytes(v)

    @field_validator("expire_after", mode="before")
    @classmethod
    def _expiry(cls, v: Any) -> float:
        return duration_s(v)


class BatchesConfig(_Strict):
    """OpenAI's Batch API: requests run in the lowest admission band as replicas have room."""

    # Requests of all batches in flight at once, at most.
    max_in_flight: Annotated[int, Field(ge=1)] = 64
    # Requests one batch may hold.
    max_requests: Annotated[int, Field(ge=1)] = 50_000
    # Free slots a batch leaves to clients' requests yet to come, in standard
    # deviations of their number in flight (gatewayd/batches/headroom.py):
    # 0 gives a batch every slot clients do not hold this instant.
    headroom_sigmas: Annotated[float, Field(ge=0, le=10)] = 3.0
    # Batches of one project not yet ended (validating, in progress, finalizing,
    # cancelling), at most: one more is refused with a 429 naming this.
    max_active_per_project: Annotated[int, Field(ge=1)] = 100
    # The input files of one project's batches not yet ended, in bytes together
    # (ten inputs at files.max_bytes): one more past it is refused with a 429.
    max_queued_bytes_per_project: Annotated[int, Field(gt=0)] = 2 * 10**9

    @field_validator("max_queued_bytes_per_project", mode="before")
    @classmethod
    def _queued(cls, v: Any) -> int:
        return size_bytes(v)


class ClusterConfig(_Strict):
    """More than one control plane on one store: the leader lease and how others reach this one.

    10 s: the lease a leader renews; a crashed leader's place is taken within
    it (plus a second's try), and agents notice a silent control plane within
    8 s (keepalive), so they reach the new leader inside the lease's length.
    """

    lease_ttl_s: Annotated[float, Field(ge=1, le=120)] = 10.0
    # The name or address other machines reach this control plane by (agents
    # dial it, a front sends clients to it); default: this machine's hostname.
    advertise_host: str = ""


class ServerConfig(_Strict):
    """server.yaml: the control plane's settings."""

    cluster_name: str = "llmgw"
    listen: ListenConfig = ListenConfig()
    store: StoreConfig = StoreConfig()
    nodes: NodesConfig = NodesConfig()
    pki: ServerPki = ServerPki()
    # Engines the nodes should converge to; shards also install what they need.
    engines: list[EngineRelease] = []
    router: RouterConfig = RouterConfig()
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    setup: SetupConfig = SetupConfig()
    connections: ConnectionsConfig = ConnectionsConfig()
    # The gateway port's TLS and trusted proxies.
    http: HttpConfig = HttpConfig()
    files: FilesConfig = FilesConfig()
    batches: BatchesConfig = BatchesConfig()
    # The cluster's model mirrors (llmgw mirror serve), tried in order.
    mirror: MirrorsConfig = MirrorsConfig()
    # The MCP gateway: /mcp on the gateway port (llmgw/mcp/config.py).
    mcp: McpConfig = McpConfig()
    # Several control planes on one PostgreSQL: the leader lease.
    cluster: ClusterConfig = ClusterConfig()
    # Models between their min and max replicas, by load (llmgw/scaling.py).
    scaling: ScalingConfig = ScalingConfig()
    # Models at min 0: started by a request, stopped when idle.
    on_demand: OnDemandConfig = OnDemandConfig()
    # Priority classes: a model of a higher one takes a lower one's cards.
    classes: Classes = Field(default_factory=default_classes)

    # The Hugging Face hub (or a mirror laid out like it) hf: sources are
    # pinned and planned from: config.json and safetensors headers, never weights.
    hub_url: str = HF_HUB_URL

    @field_validator("hub_url")
    @classmethod
    def _hub(cls, v: str) -> str:
        return check_hub_url(v)

    @field_validator("router")
    @classmethod
    def _default_band(cls, v: RouterConfig) -> RouterConfig:
        names = [b.name for b in v.admission.bands]
        if v.admission.default_band not in names:
            raise ValueError(
                f"default_band {v.admission.default_band!r} is not one of the bands: "
                + ", ".join(names)
            )
        return v


class AgentPki(_Strict):
    ca_cert: str = ""
    cert: str = ""
    key: str = ""


class HardwareConfig(_Strict):
    """Where the agent's hardware facts come from.

    ``probe: real`` reads this machine (NVML, /proc, /etc/os-release).
    ``probe: fake`` reports a recorded inventory instead (``fixture``: a name
    in tests/fixtures/hardware or a path to a JSON file); such a node says it
    is fake everywhere it is shown. For tests and demos only.
    """

    probe: Literal["real", "fake"] = "real"
    fixture: str = ""


class AgentConfig(_Strict):
    """agent.yaml: bootstrap settings of one node's agent."""

    node_id: str
    # Tried in turn; the agent fails over to the next when one is unreachable.
    control_planes: list[str]
    pki: AgentPki = AgentPki()
    data_dir: str = ""
    hardware: HardwareConfig = HardwareConfig()
    # The user engines run as, never root. Empty: as root, llmgw-engine
    # (the agent makes it where missing); otherwise the agent's own user.
    # `llmgw up` run by an ordinary user sets that user here.
    engine_user: str = ""
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # What the node says of itself (zone, rack, llmgw.role: judge): sent in
    # Register; labels an operator sets with `llmgw ctl node label` win over these.
    labels: dict[str, str] = Field(default_factory=dict)
    # Where hf: weights are fetched from (a StartShard's mirror_url wins).
    hub_url: str = HF_HUB_URL
    # The address engines listen on. "" : loopback when every control plane
    # is on this machine (`llmgw up`), else every interface — the gateway
    # reaches a replica at the node's address, and each engine takes only
    # requests carrying its engine key.
    engine_host: str = ""
    # The weights cache's share of the disk it is on, in percent, and a cap in
    # bytes (0: none); unused weights past the lower of the two are removed,
    # oldest first. None: the cluster's agents settings, else 50 % and no cap.
    weights_cache_percent: Annotated[int | None, Field(ge=1, le=100)] = None
    weights_cache_max_bytes: Annotated[int | None, Field(ge=0)] = None

    @property
    def engines_listen(self) -> str:
        if self.engine_host:
            return self.engine_host
        hosts = {split_host_port(a)[0] for a in self.control_planes}
        return "127.0.0.1" if hosts <= {"127.0.0.1", "localhost", "::1"} else "0.0.0.0"

    @field_validator("hub_url")
    @classmethod
    def _hub(cls, v: str) -> str:
        return check_hub_url(v)

    @field_validator("control_planes", mode="before")
    @classmethod
    def _comma_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [p.strip() for p in v.split(",") if p.strip()]
        return v

    @field_validator("control_planes")
    @classmethod
    def _addresses(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("at least one control plane address (HOST:PORT) is needed")
        for a in v:
            split_host_port(a)
        return v

    @field_validator("node_id")
    @classmethod
    def _node_id(cls, v: str) -> str:
        check_name(v, what="node id")
        return v

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, v: Any) -> Any:
        from llmgw.labels import check_labels

        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ValueError("labels is a map of KEY: VALUE (e.g. zone: a)")  # noqa: TRY004 (pydantic reports ValueError)
        return check_labels(v)


def check_name(v: str, *, what: str) -> str:
    """A name from outside that becomes a path element or a certificate CN."""
    import re

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", v or ""):
        raise ValueError(
            f"{what} {v!r} must be 1-63 letters, digits, '.', '_' or '-', not starting with a dot"
        )
    return v


def split_host_port(addr: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[::1]:port"`` into its parts; ValueError when malformed."""
    if addr.startswith("["):
        host, sep, port = addr[1:].partition("]:")
    else:
        host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{addr!r} is not HOST:PORT")
    return host, int(port)


def _describe(err: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    if err["type"] == "extra_forbidden":
        return f"unknown key '{loc}'"
    if err["type"] == "missing":
        return f"missing key '{loc}'"
    msg = err["msg"].removeprefix("Value error, ")
    return f"key '{loc}': {msg} (got {err.get('input')!r})"


def _load(path: Path, model: type[BaseModel], *, hint: str):
    try:
        text = path.read_text()
    except FileNotFoundError as e:
        raise ConfigError(f"{path} does not exist", hint=hint) from e
    except OSError as e:
        raise ConfigError(f"{path} cannot be read: {e.strerror}") from e
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(_describe(err) for err in e.errors())
        allowed = ", ".join(model.model_fields)
        raise ConfigError(
            f"{path}: {problems}",
            hint=f"top-level keys of {path.name} are: {allowed}",
        ) from e


def load_server_config(path: Path) -> ServerConfig:
    return _load(path, ServerConfig, hint="create it with: llmgw server init")


def load_agent_config(path: Path) -> AgentConfig:
    return _load(path, AgentConfig, hint="write it, or let `llmgw up` / `llmgw node add` do so")


def dump_yaml(model: BaseModel) -> str:
    return yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False)


def server_pki_paths(cfg: ServerConfig, paths: Paths) -> tuple[Path, Path, Path]:
    """(ca_cert, server_cert, server_key), defaults from the machine's layout."""
    return (
        Path(cfg.pki.ca_cert or paths.ca_cert),
        Path(cfg.pki.server_cert or paths.server_cert),
        Path(cfg.pki.server_key or paths.server_key),
    )
