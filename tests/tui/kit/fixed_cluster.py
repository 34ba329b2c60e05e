"""A cluster with fixed data: ``FixedAdmin`` answers as ``AdminClient`` does, always the same.

Four nodes (one not ready, one cordoned), three models and their replicas, a
project with keys, a day of usage, two warnings, three batches: what the cluster console's
snapshots and docs/console.md show. Its ``watch`` never sends anything, so
nothing changes while a screen is drawn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from proto.llmgw.v1 import (
    AgentSettingsState,
    BatchCounts,
    BatchView,
    CachedWeights,
    CardNeed,
    EngineView,
    Gpu,
    GpuSample,
    HostFacts,
    KeyView,
    Layout,
    LimitsView,
    ListBatchesReply,
    ListEnginesReply,
    ListKeysReply,
    ListMcpGrantsReply,
    ListMcpServersReply,
    ListMirrorsReply,
    ListModelsReply,
    ListNodesReply,
    ListReplicasReply,
    ListTenantsReply,
    ListWeightsReply,
    McpGrantView,
    McpServerView,
    MirrorDuReply,
    MirrorPeersReply,
    MirrorPeerView,
    MirrorPullView,
    MirrorRevisionView,
    MirrorView,
    ModelFacts,
    ModelProfile,
    ModelSpec,
    ModelView,
    NodeReason,
    NodeView,
    NodeWeights,
    PlacementChoice,
    PlacementReply,
    PlanModelRequest,
    PlanReply,
    ReplicaEvent,
    ReplicaLogsReply,
    ReplicaView,
    SettingChange,
    SettingsDiffReply,
    SettingsHistoryReply,
    SettingsInForce,
    SettingsReply,
    SettingsVersionView,
    StatusReply,
    TenantView,
    UsageGroup,
    UsageReply,
    WarningsReply,
    WarningView,
    WatchEvent,
    WeightsReport,
)

GIB = 2**30
ADDRESS = "cp-1.lab:7702"
DAY = "2025-03-02"


def _at(time_of_day: str) -> str:
    return f"{DAY}T{time_of_day}+00:00"


# -- the cluster -----------------------------------------------------------------------


def _node(node_id: str, *, gpus: int, state: str = "ready", reason: str = "", **kw) -> NodeView:
    return NodeView(
        node_id=node_id,
        hostname=f"{node_id}.lab",
        state=state,
        reason=reason,
        state_since=_at("09:12:40"),
        version="0.1.0",
        address="10.0.0.7" if gpus else "10.0.0.9",
        registered_at=_at("09:12:38"),
        last_heartbeat_at=_at("14:03:05"),
        host=HostFacts(
            hostname=f"{node_id}.lab",
            os_id="ubuntu",
            os_id_like=["debian"],
            os_version_id="22.04",
            arch="x86_64",
            cpu_count=64 if gpus else 16,
            memory_total_bytes=(512 if gpus else 64) * GIB,
            disk_free_bytes=1800 * GIB,
            nvidia_driver_version="550.54.15" if gpus else "",
            gpu_note="" if gpus else "no NVIDIA driver",
            avx2=True,
            probe="nvml" if gpus else "none",
        ),
        gpus=[
            Gpu(
                index=i,
                uuid=f"GPU-{node_id}-{i}",
                name="NVIDIA H100 80GB HBM3",
                memory_total_bytes=80 * GIB,
                compute_capability="9.0",
                pci_bus_id=f"0000:{0x18 + i:02x}:00.0",
            )
            for i in range(gpus)
        ],
        **kw,
    )


NODES = [
    _node("cpu-01", gpus=0),
    # What gpu-01 measured on its cards: the two llama replicas' weights and cache.
    _node(
        "gpu-01",
        gpus=8,
        gpu_samples=[
            GpuSample(index=i, memory_used_bytes=9 * GIB if i < 2 else 0) for i in range(8)
        ],
    ),
    _node("gpu-02", gpus=8, cordoned=True),
    _node("gpu-03", gpus=4, state="not_ready", reason="no heartbeat for 31 s"),
]


def _model(name: str, source: str, engine: str, *, replicas: int, ready: int, state: str, **kw):
    return ModelView(
        spec=ModelSpec(
            name=name,
            source=source,
            profiles=[ModelProfile(name="default", engine=engine)],
            replicas_min=replicas,
            replicas_max=replicas,
        ),
        replicas_desired=replicas,
        replicas_ready=ready,
        state=state,
        created_at=_at("09:20:00"),
        updated_at=_at("13:58:10"),
        **kw,
    )


MODELS = [
    _model(
        "llama-3.1-8b",
        "hf:meta-llama/Llama-3.1-8B-Instruct-GGUF:q4_k_m.gguf",
        "llama.cpp",
        replicas=2,
        ready=2,
        state="serving",
    ),
    _model(
        "qwen2.5-72b",
        "hf:Qwen/Qwen2.5-72B-Instruct",
        "vllm",
        replicas=1,
        ready=0,
        state="starting",
        reason="1 replica fetching weights",
    ),
    _model(
        "embed-small",
        "/models/bge-small-en.gguf",
        "llama.cpp",
        replicas=1,
        ready=1,
        state="serving",
    ),
]


def _history(*steps: tuple[str, str, str]) -> list[ReplicaEvent]:
    return [ReplicaEvent(at=_at(t), state=s, reason=r) for t, s, r in steps]


REPLICAS = [
    ReplicaView(
        replica_id="llama-3.1-8b-7c1f",
        model="llama-3.1-8b",
        profile="default",
        node_id="gpu-01",
        gpu_indexes=[0],
        state="ready",
        since=_at("09:21:14"),
        port=41201,
        pid=20311,
        endpoint="http://10.0.0.7:41201",
        history=_history(
            ("09:20:01", "pending", "new"),
            ("09:20:01", "placed", "gpu-01 GPUs [0]"),
            ("09:20:02", "fetching", "weights to the node's cache"),
            ("09:20:58", "starting", "llama-server on port 41201"),
            ("09:21:14", "ready", "health check passed"),
        ),
    ),
    ReplicaView(
        replica_id="llama-3.1-8b-a93e",
        model="llama-3.1-8b",
        profile="default",
        node_id="gpu-01",
        gpu_indexes=[1],
        state="ready",
        since=_at("09:21:16"),
        port=41202,
        pid=20340,
        restarts=1,
        endpoint="http://10.0.0.7:41202",
        history=_history(("09:20:01", "pending", "new"), ("09:21:16", "ready", "")),
    ),
    ReplicaView(
        replica_id="qwen2.5-72b-05d2",
        model="qwen2.5-72b",
        profile="default",
        node_id="gpu-02",
        gpu_indexes=[0, 1, 2, 3],
        state="fetching",
        since=_at("13:58:10"),
        deadline=_at("14:28:10"),
        fetch=None,
        history=_history(("13:58:09", "pending", "new"), ("13:58:10", "fetching", "")),
    ),
    ReplicaView(
        replica_id="embed-small-e410",
        model="embed-small",
        profile="default",
        node_id="cpu-01",
        state="ready",
        since=_at("09:20:31"),
        port=41100,
        pid=9120,
        endpoint="http://10.0.0.9:41100",
        history=_history(("09:20:01", "pending", "new"), ("09:20:31", "ready", "")),
    ),
]

# gpu-01's weights cache: (key, source, size, hours since its last use, in use by).
WEIGHTS = [
    (
        "llama-3.1-8b",
        "hf:bartowski/Meta-Llama-3.1-8B-Instruct-GGUF@bf5b95e9:Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        4_920_739_232,
        5,
        ["llama-3.1-8b-7c1f", "llama-3.1-8b-a93e"],
    ),
    (
        "hf/Qwen/Qwen2.5-7B-Instruct/a09a3545",
        "hf:Qwen/Qwen2.5-7B-Instruct@a09a3545",
        15_231_272_128,
        50,
        [],
    ),
    (
        "mistral-7b",
        "https://models.lab/mistral-7b-instruct-v0.3.Q5_K_M.gguf",
        5_136_147_104,
        170,
        [],
    ),
]


def weights_of(node_id: str) -> NodeWeights:
    """gpu-01's cache as its last report had it; last uses counted back from now."""
    now_ms = int(time.time() * 1000)
    entries = [
        CachedWeights(
            key=key,
            source=source,
            size_bytes=size,
            last_used_unix_ms=now_ms - hours * 3_600_000 - 60_000,
            used_by=used_by,
        )
        for key, source, size, hours, used_by in (WEIGHTS if node_id == "gpu-01" else [])
    ]
    report = WeightsReport(
        entries=entries,
        limit_bytes=540 * GIB,
        total_bytes=sum(e.size_bytes for e in entries),
        disk_free_bytes=1200 * GIB,
        limit_percent=30,
        disk_total_bytes=1800 * GIB,
    )
    return NodeWeights(node_id=node_id, report=report, reported_at=_at("14:02:41"), connected=True)


LOG_TAIL = [
    "llama_model_loader: loaded meta data with 29 key-value pairs",
    "llm_load_tensors: offloaded 33/33 layers to GPU",
    "main: server is listening on http://10.0.0.7:41201 - starting the main loop",
    "srv  update_slots: all slots are idle",
]

PLAN = PlanReply(
    facts=ModelFacts(
        format="gguf",
        architecture="llama",
        layers=32,
        quantisation="Q4_K_M",
        weights_bytes=4_920_000_000,
        trained_context=131072,
    ),
    context=8192,
    kv_bytes_per_token=131072,
    layouts=[
        Layout(
            kind="gpu",
            gpus=1,
            tensor_parallel=1,
            per_card=CardNeed(weights_bytes=4_920_000_000, kv_bytes=GIB, overhead_bytes=GIB),
            context=8192,
            tokens_per_s=118,
            card_name="NVIDIA H100 80GB HBM3",
        ),
        Layout(
            kind="cpu",
            host_memory_bytes=7 * GIB,
            context=8192,
            tokens_per_s=9,
            notes=["CPU only: slow"],
        ),
    ],
)

PLACEMENT = PlacementReply(
    model="llama-3.1-8b",
    placement=PlacementChoice(node_id="gpu-01", gpu_indexes=[2], host_memory_bytes=0),
    reasons=[
        NodeReason(node_id="cpu-01", reason="no GPU: the profile needs 1"),
        NodeReason(node_id="gpu-02", reason="cordoned"),
        NodeReason(node_id="gpu-03", reason="not ready: no heartbeat for 31 s"),
    ],
)

SEARCH = "Acme/ml/search"
TENANTS = [
    TenantView(kind="org", path="Acme", created_at=_at("09:00:00"), keys=3),
    TenantView(kind="team", path="Acme/ml", created_at=_at("09:00:00"), keys=3),
    TenantView(
        kind="project",
        path=SEARCH,
        created_at=_at("09:00:00"),
        keys=2,
        limits=LimitsView(scope=SEARCH, rpm=600),
    ),
    TenantView(kind="project", path="Acme/ml/chat", created_at=_at("09:00:00"), keys=1),
    TenantView(kind="org", path="Beta", created_at=_at("10:30:00"), keys=0),
]
KEYS = [
    KeyView(
        key_id="key_3fa81c",
        project=SEARCH,
        name="web",
        prefix="sk-llmgw-3fa8",
        kind="service",
        created_at=_at("09:01:00"),
        last_used_at=_at("14:02:59"),
        limits=LimitsView(scope="key_3fa81c", rpm=60, tpm=100_000),
    ),
    KeyView(
        key_id="key_77d0e2",
        project=SEARCH,
        name="batch",
        prefix="sk-llmgw-77d0",
        kind="service",
        models=["llama-3.1-8b"],
        created_at=_at("09:02:00"),
        limits=LimitsView(scope="key_77d0e2", budget_month_micros=25_000_000),
    ),
    KeyView(
        key_id="key_c01a44",
        project="Acme/ml/chat",
        name="old-bot",
        prefix="sk-llmgw-c01a",
        kind="service",
        created_at=_at("09:03:00"),
        revoked_at=_at("11:40:00"),
    ),
]

USAGE = UsageReply(
    from_="2025-03-01T14:03:00+00:00",
    to="2025-03-02T14:03:00+00:00",
    series_step_s=3600,
    series=[3, 5, 2, 0, 0, 1, 4, 9, 14, 22, 31, 28, 30, 26, 24, 19, 17, 12, 8, 6, 4, 3, 2, 1],
    groups=[
        UsageGroup(
            group={"project": SEARCH},
            requests=241,
            errors=3,
            prompt_tokens=182_400,
            cached_tokens=40_100,
            completion_tokens=51_230,
            cost_micros=1_260_000,
            latency_ms_avg=840.0,
            ttft_ms_avg=110.0,
        ),
        UsageGroup(
            group={"project": "Acme/ml/chat"},
            requests=31,
            errors=1,
            prompt_tokens=12_300,
            completion_tokens=8_100,
            cost_micros=95_000,
            latency_ms_avg=1_520.0,
            ttft_ms_avg=190.0,
        ),
    ],
)

ENGINES = [
    EngineView(node_id="cpu-01", engine="llama.cpp", version="b4604", state="installed"),
    EngineView(node_id="gpu-01", engine="llama.cpp", version="b4604", state="installed"),
    EngineView(node_id="gpu-01", engine="vllm", version="0.8.4", state="installed"),
    EngineView(node_id="gpu-02", engine="vllm", state="installing", message="downloading"),
]

WARNINGS = WarningsReply(
    since=_at("13:03:07"),
    warnings=[
        WarningView(
            at=_at("14:02:34"),
            severity="error",
            kind="node",
            subject="gpu-03",
            message="no heartbeat for 31 s",
            hint="is its agent running? see: llmgw ctl node show gpu-03",
            current=True,
        ),
        WarningView(
            at=_at("13:41:10"),
            severity="warning",
            kind="replica",
            subject="llama-3.1-8b-a93e",
            message="exited with code 1; restarted",
            hint="its log: llmgw ctl logs llama-3.1-8b-a93e",
            current=False,
        ),
    ],
)

STATUS = StatusReply(
    version="0.1.0",
    cluster_name="lab",
    leader=True,
    store_backend="sqlite",
    started_at=_at("09:00:00"),
    agent_listen="0.0.0.0:7701",
    http_listen="0.0.0.0:8080",
    nodes_total=4,
    nodes_ready=3,
    nodes_not_ready=1,
    gateway_url="http://cp-1.lab:8080/v1",
    requests_total=272,
    errors_total=4,
)


def _batch(batch_id: str, endpoint: str, status: str, total: int, done: int, failed: int, **at):
    return BatchView(
        id=batch_id,
        project="Acme/ml/search",
        key_id="key_7Hq2",
        endpoint=endpoint,
        status=status,
        input_file_id=f"file-{batch_id[6:12]}in",
        output_file_id=f"file-{batch_id[6:12]}out" if done else "",
        error_file_id=f"file-{batch_id[6:12]}err" if failed else "",
        completion_window="24h",
        request_counts=BatchCounts(total=total, completed=done - failed, failed=failed),
        models=["llama-3.1-8b"] if endpoint != "/v1/embeddings" else ["bge-m3"],
        metadata={"job": "nightly-eval"} if status == "in_progress" else {},
        **{k: _at(v) for k, v in at.items()},
    )


BATCHES = ListBatchesReply(
    batches=[
        _batch(
            "batch_9f2c41d07a",
            "/v1/chat/completions",
            "in_progress",
            10_000,
            6_430,
            12,
            created_at="13:40:02",
            in_progress_at="13:40:03",
            expires_at="23:59:59",
        ),
        _batch(
            "batch_51aa0e9b3c",
            "/v1/embeddings",
            "completed",
            200,
            200,
            0,
            created_at="11:02:15",
            in_progress_at="11:02:15",
            finalizing_at="11:03:40",
            completed_at="11:03:41",
        ),
        _batch(
            "batch_07d3be22f1",
            "/v1/chat/completions",
            "cancelled",
            500,
            81,
            0,
            created_at="09:15:30",
            in_progress_at="09:15:31",
            cancelling_at="09:16:02",
            cancelled_at="09:16:05",
        ),
    ]
)


MIRROR_URL = "http://mirror-1.lab:7080"
_GB = 10**9


def _held(repo: str, commit: str, size: float, files: int, at: str, **kw) -> MirrorRevisionView:
    return MirrorRevisionView(
        kind=kw.pop("kind", "model"),
        repo=repo,
        commit=commit,
        refs=kw.pop("refs", ["main"]),
        size_bytes=int(size * _GB),
        files=files,
        added_at=_at(at),
        source=kw.pop("source", f"hf:{repo}@main via https://huggingface.co"),
        **kw,
    )


HELD = [
    _held(
        "meta-llama/Llama-3.1-8B-Instruct",
        "0e9e39f249a16976918f6564b8830bc894c89659",
        16.1,
        11,
        "10:41:07",
    ),
    _held("BAAI/bge-m3", "5617a9f61b028005a4858fdac845db406aefb181", 2.27, 9, "10:12:55"),
    _held(
        "google/gemma-3-270m-gguf", "8d7b4a5e1a6f37c0ee6fc7f1c9c4d3b2a1f0e9d8", 0.253, 3, "09:30:20"
    ),
    _held(
        "llama-b6043-bin-ubuntu-x64.zip",
        "1c1e7e5f0d5cf0b7a6e2d8a9e3b0f6c4d2a1b9e8f7c6d5e4b3a2f1e0d9c8b7a6",
        0.021,
        1,
        "09:05:44",
        kind="engine",
        refs=[],
        source="https://github.com/ggml-org/llama.cpp/releases/download/b6043/…",
    ),
]
MIRRORS = ListMirrorsReply(
    mirrors=[
        MirrorView(
            url=MIRROR_URL,
            state="up",
            version="0.1.0",
            mirror_id="m-7f3a",
            checked_at=_at("13:59:50"),
            used_bytes=int(18.6 * _GB),
            max_bytes=500 * _GB,
            free_disk_bytes=int(1210 * _GB),
            revisions=4,
        ),
        MirrorView(
            url="http://mirror-2.lab:7080",
            state="down",
            reason="connection refused",
            checked_at=_at("13:59:50"),
        ),
    ],
    served_by=MIRROR_URL,
    revisions=HELD,
    pulls=[
        MirrorPullView(
            pull_id="pull-3c1d",
            source="hf:Qwen/Qwen3-8B@main",
            repo="Qwen/Qwen3-8B",
            commit="9c925d64d72725edaf899c6cb9c377fd0709d9c5",
            state="fetching",
            file="model-00003-of-00005.safetensors",
            bytes_done=int(7.2 * _GB),
            bytes_total=int(16.4 * _GB),
            rate_bytes_s=112_000_000,
            eta_s=82,
            files_done=8,
            files_total=14,
            started_at=_at("13:58:40"),
        ),
    ],
)
MIRROR_DU = MirrorDuReply(
    served_by=MIRROR_URL,
    used_bytes=int(18.6 * _GB),
    max_bytes=500 * _GB,
    free_disk_bytes=int(1210 * _GB),
    unreferenced_bytes=41_000_000,
    revisions=sorted(HELD, key=lambda r: -r.size_bytes),
)
MIRROR_PEERS = MirrorPeersReply(
    served_by=MIRROR_URL,
    peers=[
        MirrorPeerView(
            url="http://mirror-2.lab:7080",
            state="down",
            lag_s=1840,
            behind=0,
            last_sync_at=_at("13:29:10"),
            reason="connection refused",
        ),
        MirrorPeerView(
            url="https://mirror.dc2.lab:7080",
            state="in_step",
            lag_s=0.4,
            behind=0,
            last_sync_at=_at("13:59:58"),
        ),
    ],
)


# The MCP gateway: llmgw:admin, hr answering, wiki's breaker open; two grants.
MCP_GRANTS = [
    McpGrantView(scope="project:Acme/ml/search", target="hr", created_at=_at("10:02:11")),
    McpGrantView(scope="team:Acme/ml", target="llmgw:admin.list_nodes", created_at=_at("10:05:40")),
]
MCP_SERVERS = ListMcpServersReply(
    endpoint="http://cp-1.lab:8080/mcp",
    servers=[
        McpServerView(name="llmgw:admin", builtin=True, enabled=True, state="ok"),
        McpServerView(
            name="hr",
            url="http://hr.lab:9100/mcp",
            transport="streamable_http",
            description="the staff directory",
            enabled=True,
            header_names=["X-Team"],
            sealed_header_names=["Authorization"],
            rate_per_minute=60,
            breaker="closed",
            state="ok",
            tools=["lookup", "slow"],
            grants=MCP_GRANTS[:1],
        ),
        McpServerView(
            name="wiki",
            url="http://wiki.lab:9200/sse",
            transport="sse",
            enabled=True,
            timeout_s=10,
            breaker="open",
            breaker_reason="connection refused",
            state="failing",
        ),
    ],
)


# -- the kept settings: three versions, the newest in force here and on two nodes --------


def _settings_yaml() -> str:
    from llmgw.settings import ClusterSettings, dump_document

    doc = ClusterSettings().as_dict()
    doc["router"]["admission"]["bands"] = [
        {"name": "gold", "priority": 300, "saturation_ceiling": 0.85},
        {
            "name": "bulk",
            "priority": 50,
            "saturation_ceiling": 0.3,
            "queue_ttl": 300,
            "max_queue": 200,
        },
    ]
    doc["router"]["admission"]["default_band"] = "gold"
    doc["agents"]["nodes"] = {"gpu-2": {"log_level": "debug"}}
    return dump_document(ClusterSettings.model_validate(doc))


SETTINGS_VERSIONS = [
    SettingsVersionView(
        version=3,
        author="alice",
        at=_at("10:41:07"),
        comment="gpu-2 logs more while its fan is looked at",
        parent_version=2,
        changed_keys=["agents.nodes.gpu-2.log_level"],
    ),
    SettingsVersionView(
        version=2,
        author="bob",
        at=_at("09:12:30"),
        comment="a bulk band for the import",
        parent_version=1,
        changed_keys=[
            "router.admission.bands[0].name",
            "router.admission.bands[0].priority",
            "router.admission.bands[1].name",
            "router.admission.default_band",
        ],
    ),
    SettingsVersionView(
        version=1, author="server.yaml", at=_at("08:00:00"), comment="from server.yaml"
    ),
]
SETTINGS_IN_FORCE = SettingsInForce(
    control_plane="cp-1",
    version=3,
    since=_at("10:41:08"),
    agents=[
        AgentSettingsState(node_id="gpu-1", version=3, ok=True, at=_at("10:41:08")),
        AgentSettingsState(node_id="gpu-2", version=3, ok=True, at=_at("10:41:08")),
    ],
)
SETTINGS = SettingsReply(
    version=SETTINGS_VERSIONS[0],
    value_yaml=_settings_yaml(),
    value_json="{}",
    in_force=SETTINGS_IN_FORCE,
    latest_version=3,
)
SETTINGS_DIFF = SettingsDiffReply(
    from_version=2,
    to_version=3,
    changes=[SettingChange(key="agents.nodes.gpu-2.log_level", kind="added", new_yaml="debug")],
)


class FixedAdmin:
    """Answers as ``AdminClient`` does, always with the replies above; changes nothing."""

    address = ADDRESS

    def __init__(self) -> None:
        self.nodes = {n.node_id: n for n in NODES}
        self.models = {m.spec.name: m for m in MODELS}

    async def status(self) -> StatusReply:
        return STATUS

    async def list_nodes(self) -> ListNodesReply:
        return ListNodesReply(nodes=list(self.nodes.values()))

    async def get_node(self, node_id: str) -> NodeView:
        return self.nodes[node_id]

    async def list_models(self) -> ListModelsReply:
        return ListModelsReply(models=list(self.models.values()))

    async def get_model(self, name: str) -> ModelView:
        return self.models[name]

    async def plan_model(self, request: PlanModelRequest) -> PlanReply:
        return PLAN

    async def explain_placement(self, name: str) -> PlacementReply:
        return PlacementReply(
            model=name,
            placement=PLACEMENT.placement,
            reasons=PLACEMENT.reasons,
            refused=PLACEMENT.refused,
        )

    async def list_replicas(self, model: str = "") -> ListReplicasReply:
        return ListReplicasReply(replicas=[r for r in REPLICAS if not model or r.model == model])

    async def replica_logs(self, replica_id: str, lines: int = 100) -> ReplicaLogsReply:
        return ReplicaLogsReply(replica_id=replica_id, lines=LOG_TAIL[-lines:])

    async def list_engines(self) -> ListEnginesReply:
        return ListEnginesReply(engines=ENGINES)

    async def warnings(self, since_s: int = 0) -> WarningsReply:
        return WARNINGS

    async def list_tenants(self, kind: str = "", under: str = "") -> ListTenantsReply:
        return ListTenantsReply(tenants=[t for t in TENANTS if not kind or t.kind == kind])

    async def list_keys(self, project: str = "") -> ListKeysReply:
        return ListKeysReply(keys=[k for k in KEYS if not project or k.project == project])

    async def usage(self, by: list[str], *, from_: str = "", to: str = "", **kw) -> UsageReply:
        return USAGE

    async def list_batches(self, *, project: str = "", status: str = "", limit: int = 0):
        return BATCHES

    async def get_batch(self, batch_id: str) -> BatchView:
        return next(b for b in BATCHES.batches if b.id == batch_id)

    async def list_mirrors(self) -> ListMirrorsReply:
        return MIRRORS

    async def mirror_disk_usage(self) -> MirrorDuReply:
        return MIRROR_DU

    async def list_mirror_peers(self) -> MirrorPeersReply:
        return MIRROR_PEERS

    async def list_mcp_servers(self) -> ListMcpServersReply:
        return MCP_SERVERS

    async def list_mcp_grants(self, who: str = "", server: str = "") -> ListMcpGrantsReply:
        return ListMcpGrantsReply(grants=MCP_GRANTS)

    async def get_settings(self, key: str = "", *, version: int = 0) -> SettingsReply:
        return SETTINGS

    async def settings_history(self, limit: int = 0) -> SettingsHistoryReply:
        return SettingsHistoryReply(versions=SETTINGS_VERSIONS, in_force_version=3)

    async def settings_diff(self, from_version: int = 0, to_version: int = 0) -> SettingsDiffReply:
        return SETTINGS_DIFF

    async def list_weights(self, node_id: str = "") -> ListWeightsReply:
        return ListWeightsReply(nodes=[weights_of(n) for n in self.nodes if n in (node_id, "")])

    async def watch(self, topics: list[str], *, opened: bool = False) -> AsyncIterator[WatchEvent]:
        await asyncio.Event().wait()  # nothing changes in a fixed cluster
        yield WatchEvent()

    def close(self) -> None:
        pass
