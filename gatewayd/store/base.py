"""The one async interface every store backend implements.

Datetimes go in and come out timezone-aware (UTC).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Protocol

from gatewayd.store.batch_records import CHUNK_BYTES, BatchProgress, BatchRecord, FileRecord
from gatewayd.store.cluster_records import ControlPlaneRecord, LeaderChange, LeaseState
from gatewayd.store.counter_records import CounterReading, SharedCounter
from gatewayd.store.mcp_records import McpCallRow, McpGrantRecord, McpServerRecord
from gatewayd.store.records import (
    HeartbeatRow,
    KeyRecord,
    ModelRecord,
    NodeRecord,
    ReplicaRecord,
    TenantRecord,
)
from gatewayd.store.response_records import StoredResponse
from gatewayd.store.revoked_records import RevokedCert
from gatewayd.store.settings_records import SettingsVersion
from gatewayd.store.tenant_records import TenantHoldings, TenantRemoval
from gatewayd.store.usage_records import UsageFields, UsageRecord, UsageSum


class Store(Protocol):
    """The control plane's durable state. SQLite and PostgreSQL implement it."""

    backend: str  # "sqlite" or "postgres"

    async def open(self) -> None:
        """Connect and apply pending migrations, in order."""

    async def close(self) -> None: ...

    async def applied_migrations(self) -> list[str]:
        """Names of the migrations applied, in order ("0001_nodes", …)."""

    async def upsert_node(self, node: NodeRecord) -> None:
        """Insert or replace a node's registration.

        Operator overlays (``cordoned``, ``draining``, ``operator_labels``)
        already stored are kept: a node re-registering does not uncordon
        itself, nor drop the labels an operator gave it.
        """

    async def get_node(self, node_id: str) -> NodeRecord | None: ...

    async def list_nodes(self) -> list[NodeRecord]:
        """All nodes, ordered by node id."""

    async def set_node_state(
        self, node_id: str, state: str, reason: str, since: datetime
    ) -> None: ...

    async def set_node_cordoned(self, node_id: str, cordoned: bool) -> bool:
        """Set the cordon overlay; False when the node does not exist."""

    async def set_node_labels(self, node_id: str, labels: dict[str, str]) -> bool:
        """Replace the operator's labels of a node; False when the node does not exist."""

    async def record_heartbeats(self, rows: list[HeartbeatRow]) -> None:
        """Write a batch of latest heartbeats in one transaction."""

    async def set_node_draining(self, node_id: str, draining: bool) -> bool:
        """Set the drain overlay; False when the node does not exist."""

    async def put_model(self, rec: ModelRecord) -> None:
        """Add or replace a catalog entry; a replacement keeps its created_at."""

    async def get_model(self, name: str) -> ModelRecord | None: ...

    async def list_models(self) -> list[ModelRecord]:
        """Every model, ordered by name."""

    async def delete_model(self, name: str) -> bool: ...

    async def put_replica(self, rec: ReplicaRecord) -> None: ...

    async def list_replicas(self, model: str = "") -> list[ReplicaRecord]:
        """Replicas (of one model when given), ordered by replica id."""

    async def delete_replica(self, replica_id: str) -> bool: ...

    async def put_key(self, rec: KeyRecord) -> None:
        """Add a key, or update its name, models, expiry, revocation and last use."""

    async def list_keys(self, project_id: str = "") -> list[KeyRecord]:
        """Keys (of the project with that id when given), oldest first, each with its
        project's path now (or last)."""

    async def touch_keys(self, used: dict[str, datetime]) -> None:
        """Record when keys were last used, in one batch."""

    # ---- tenancy: organizations, teams, projects -----------------------------

    # Everything a level holds refers to its id (TenantRecord.id), never its path.

    async def put_tenant(self, rec: TenantRecord) -> None:
        """Add an org, team or project, or replace its limits (its id, kind and created_at
        stay)."""

    async def create_tenant(self, rec: TenantRecord) -> bool:
        """Add an org, team or project; False when that path already exists."""

    async def list_tenants(self) -> list[TenantRecord]:
        """Every org, team and project, ordered by path."""

    async def rename_tenant(self, path: str, new_path: str) -> int:
        """Give a level and every level beneath it the new path, in one transaction; what
        they hold follows, as it refers to their ids.

        Returns how many tenants were renamed (0: no such path)."""

    async def tenant_holdings(self, path: str, now: datetime) -> TenantHoldings:
        """What the level and every level beneath it hold (keys working at ``now``)."""

    async def remove_tenant(self, path: str, *, force: bool, now: datetime) -> TenantRemoval | None:
        """In one transaction: remove the level, the levels beneath it and everything they
        hold (keys, MCP grants, batches, stored responses; files expire at ``now``, so the
        sweep deletes their bytes), keeping each level's id and last path for its usage.
        Without ``force`` nothing is removed while it holds anything but spent keys and
        stored responses (``TenantRemoval.removed`` False). None: no such level."""

    async def tenant_path(self, tenant_id: str) -> str:
        """The path the level has, or had last when removed; "" for an unknown id."""

    # ---- usage: a row per request, and its 5-minute, hourly and daily sums ----

    async def record_usage(self, rows: Sequence[UsageFields]) -> int:
        """Write a batch of request rows and add them to the sums, in one transaction.

        A row whose ``row_id`` is stored already is skipped (a journal's row replayed
        after a crash); rows without one are always written. The number written."""

    async def usage_groups(
        self,
        by: Sequence[str],
        start: datetime,
        end: datetime,
        project: str = "",
        key_id: str = "",
    ) -> list[UsageSum]:
        """Totals over [start, end) per value of the dimensions ``by`` (USAGE_DIMENSIONS).

        Read from the coarsest sums that fit and raw rows at the edges; equal
        to summing the rows. ``project`` takes that path and all beneath it
        (an org or team path works). Most requests first; ValueError for an
        unknown dimension.
        """

    async def usage_series(
        self, start: datetime, end: datetime, step_s: int, project: str = "", key_id: str = ""
    ) -> list[int]:
        """Requests per window, oldest first; windows are cut at multiples of ``step_s``
        (a multiple of 300) since the epoch, so the first and last may be partial."""

    def usage_rows(
        self, start: datetime, end: datetime, project: str = "", key_id: str = ""
    ) -> AsyncIterator[UsageRecord]:
        """The rows of [start, end) in time order, read a page at a time."""

    async def usage_first_at(self, project: str = "", key_id: str = "") -> datetime | None:
        """When the first request (of the project or key) was recorded; None if never."""

    # ---- revoked node certificates ---------------------------------------------

    async def revoke_cert(self, rec: RevokedCert) -> bool:
        """Record a revoked certificate; False when its serial was revoked already."""

    async def list_revoked_certs(self) -> list[RevokedCert]:
        """Every revoked certificate, oldest first."""

    # ---- files and batches (OpenAI's Files and Batch APIs) ---------------------

    async def put_file(self, rec: FileRecord) -> None:
        """Record a file (its bytes are in ``file_chunks`` already); again: its size and
        expiry."""

    async def get_file(self, file_id: str) -> FileRecord | None: ...

    async def list_files(
        self,
        project_id: str,
        *,
        purpose: str = "",
        after: str = "",
        limit: int = 10_000,
        ascending: bool = False,
    ) -> list[FileRecord]:
        """The project's files, newest first (ids sort by time), those past ``after``."""

    async def delete_file(self, file_id: str) -> bool:
        """Forget a file and its bytes (those of an input a batch still reads stay until
        the batch ends); False when it was not recorded."""

    async def begin_upload(self, file_id: str, now: datetime) -> None:
        """Note an upload begun: its chunks are kept though no file row names them yet."""

    async def put_file_chunk(self, file_id: str, at: int, data: bytes) -> None:
        """Write ``data`` as the file's bytes from offset ``at`` (chunks of CHUNK_BYTES)."""

    async def finish_upload(self, rec: FileRecord) -> None:
        """In one transaction: the upload's file row written, the upload no longer pending."""

    async def abort_upload(self, file_id: str) -> None:
        """Drop an upload's chunks and its pending mark."""

    async def file_chunks(
        self, file_id: str, start: int = 0, window: int = CHUNK_BYTES
    ) -> list[tuple[int, bytes]]:
        """(offset, bytes) of the file's chunks that begin in [start, start + window), in
        order: at most window + CHUNK_BYTES bytes."""

    async def drop_file_bytes(self, file_id: str) -> int:
        """Drop the file's chunks if nothing wants them now (no file row, no upload, no
        batch not yet ended reading or writing it); the chunks dropped."""

    async def sweep_file_bytes(self, stale_before: datetime) -> int:
        """Forget uploads begun before ``stale_before`` (their control plane died) and drop
        every chunk nothing wants; the chunks dropped."""

    async def expired_files(self, now: datetime, limit: int = 1000) -> list[FileRecord]:
        """Files whose expiry is at or before ``now``, soonest first."""

    async def project_file_bytes(self, project_id: str) -> int:
        """The bytes of all the project's files together."""

    async def create_batch(self, rec: BatchRecord) -> None: ...

    async def update_batch(self, rec: BatchRecord) -> None:
        """Write a batch's status, times, files, total, metadata, errors and models;
        its counts and file ends move only through ``record_batch_progress``."""

    async def get_batch(self, batch_id: str) -> BatchRecord | None: ...

    async def list_batches(
        self, project_id: str = "", *, status: str = "", after: str = "", limit: int = 100
    ) -> list[BatchRecord]:
        """Batches (of the project with that id when given) newest first (ids sort by
        time), those older than ``after``."""

    async def active_batches(self) -> list[BatchRecord]:
        """Batches not yet at an end (validating, in_progress, finalizing, cancelling)."""

    async def batch_done_lines(
        self, batch_id: str, start: int = 0, end: int | None = None
    ) -> set[int]:
        """The batch's input lines (0-based, in [start, end)) whose answer is recorded."""

    async def request_batch_cancel(self, batch_id: str, at: datetime) -> bool:
        """Ask, from any control plane, that a validating or in-progress batch be
        cancelled; False when it is neither or was asked already."""

    async def project_batch_load(self, project_id: str) -> tuple[int, int]:
        """(batches not yet ended, the bytes of their input files) of the project."""

    async def record_batch_progress(
        self, progress: BatchProgress, usage: Sequence[UsageFields]
    ) -> None:
        """In one transaction: the lines marked done, the counts and file ends moved, the
        output and error bytes appended as chunks, and the requests' usage rows written —
        a line is answered and metered once. With ``from_*_bytes`` given and the ends
        moved since (another run committed), nothing is written: BatchMoved."""

    # ---- stored responses (/v1/responses) ---------------------------------------

    async def set_retention(self, tenant_id: str, retain_s: int) -> bool:
        """How long the project keeps stored responses (0: never, and those kept are
        forgotten); False when no such level exists."""

    async def retentions(self) -> dict[str, int]:
        """Project id → seconds, for every project that keeps responses."""

    async def retention_of(self, tenant_id: str) -> int:
        """The project's retention in seconds; 0 when off or no such project."""

    async def put_response(self, rec: StoredResponse) -> None:
        """Keep a response (again: replace it)."""

    async def get_response(
        self, project_id: str, response_id: str, now: datetime
    ) -> StoredResponse | None:
        """The project's response, unless expired by ``now``; another project's is None."""

    async def delete_response(self, project_id: str, response_id: str) -> bool:
        """Forget one of the project's responses; False when it had none by that id."""

    async def expire_responses(self, now: datetime) -> int:
        """Forget every response expired by ``now``; how many."""

    # ---- the MCP gateway: company servers, sealed credentials, grants, calls -----

    async def put_mcp_server(self, rec: McpServerRecord, new_secrets: dict[str, bytes]) -> None:
        """In one transaction: add or replace the server (its created_at stays), add the
        new sealed secrets (ref -> sealed bytes), and delete every sealed secret no
        server refers to any more."""

    async def get_mcp_server(self, name: str) -> McpServerRecord | None: ...

    async def list_mcp_servers(self) -> list[McpServerRecord]:
        """Every company MCP server, ordered by name."""

    async def delete_mcp_server(self, name: str) -> int | None:
        """In one transaction: remove the server, its grants (SERVER and SERVER.TOOL) and
        its sealed secrets; how many grants went (None: no such server)."""

    async def get_sealed_secrets(self, refs: Sequence[str]) -> dict[str, bytes]:
        """Ref -> sealed bytes for those of ``refs`` that are stored."""

    async def list_sealed_secret_refs(self) -> list[str]:
        """Every sealed secret's ref, ordered."""

    async def add_mcp_grant(self, scope: str, target: str, at: datetime) -> bool:
        """Let ``scope`` (``key:key_…``, or a level by path: ``team:Acme/ml``) call ``target``;
        False when that grant was there already, or no such level exists. A level's grant
        is kept by its id: it follows a rename and goes with a removal."""

    async def remove_mcp_grant(self, scope: str, target: str) -> bool:
        """False when there was no such grant."""

    async def list_mcp_grants(self) -> list[McpGrantRecord]:
        """Every grant (a level's scope by its path now), ordered by scope, then target."""

    async def record_mcp_calls(self, rows: Sequence[McpCallRow]) -> None:
        """Write a batch of call rows in one transaction."""

    async def list_mcp_calls(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        server: str = "",
        key_id: str = "",
        project: str = "",
        limit: int = 100_000,
    ) -> list[McpCallRow]:
        """Call rows in [since, until) (either end open when None), of one server or key
        when given, oldest first, at most ``limit``. ``project`` takes that path and all
        beneath it (an org or team path works), as ``usage_groups`` does."""

    # ---- several control planes: the leader lease, its history, the members ----

    async def store_clock(self) -> datetime:
        """The store's clock now (the database's on PostgreSQL; the process's on SQLite)."""

    async def claim_lease(self, name: str, holder: str, ttl_s: float) -> LeaseState:
        """Atomically take or renew lease ``name`` for ``holder`` for ``ttl_s`` from the store's now.

        Taken when free (never taken, lapsed, released): epoch + 1, acquired_at = now, and a
        leader_changes row in the same transaction; renewed when ``holder`` holds it (same
        epoch); left alone when another holds it. Returns the row as it stands after, with
        the store's ``now``: ``held_by(holder)`` says whether the claim won.
        """

    async def release_lease(self, name: str, holder: str) -> bool:
        """End the lease now if ``holder`` holds it (a "released" change); False otherwise."""

    async def get_lease(self, name: str) -> LeaseState | None:
        """The lease's row with the store's now; None when never claimed."""

    async def leader_changes(self, name: str, limit: int = 50) -> list[LeaderChange]:
        """The lease's changes of holder, newest first, at most ``limit``."""

    async def put_control_plane(self, rec: ControlPlaneRecord) -> None:
        """Insert or replace a control plane's row; last_seen_at = the store's now, not stopped."""

    async def list_control_planes(self) -> list[ControlPlaneRecord]:
        """Every control plane the store knows, ordered by id (stopped ones too)."""

    async def mark_control_plane_stopped(self, cp_id: str) -> None:
        """Record a clean stop (stopped_at = the store's now); its next write clears it."""

    async def delete_control_plane(self, cp_id: str) -> bool:
        """Forget a control plane's row; False when there was none."""

    # ---- the cluster's kept settings, versioned (llmgw ctl config) ----------------

    async def latest_settings_version(self) -> int:
        """The newest settings version's number; 0 while none was written."""

    async def get_settings(self, version: int = 0) -> SettingsVersion | None:
        """Settings version ``version`` (0: the newest); None when there is no such version."""

    async def put_settings(
        self,
        document: dict,
        *,
        parent_version: int,
        author: str,
        comment: str,
        at: datetime,
    ) -> SettingsVersion:
        """Write version ``parent_version + 1``; SettingsConflict when another writer made it
        first (the caller made its change from a version since replaced)."""

    async def list_settings_versions(self, *, limit: int = 50) -> list[SettingsVersion]:
        """The newest ``limit`` versions, newest first."""

    # ---- budgets and rate limits shared by the control planes -----------------------

    async def publish_counters(self, counters: Sequence[SharedCounter]) -> None:
        """Insert or replace each counter's row (its amount is the whole total, not an
        increment), ``updated_at`` = the store's now; one statement or transaction."""

    async def read_counters(
        self, *, since: datetime | None = None, exclude_writer: str = ""
    ) -> CounterReading:
        """The rows of every writer but ``exclude_writer`` updated after ``since`` (all of
        them when None), with the store's clock read before them."""

    async def prune_counters(self) -> int:
        """Remove the rows whose ``expires_at`` has passed; how many went."""
