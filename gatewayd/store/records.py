"""What the store keeps, as plain pydantic records (no proto, no SQL)."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class NodeRecord(BaseModel):
    """One node as the control plane remembers it across restarts."""

    node_id: str
    hostname: str = ""
    version: str = ""
    address: str = ""
    # registering, ready, not_ready or gone.
    state: str = "registering"
    reason: str = ""
    state_since: datetime
    cordoned: bool = False
    draining: bool = False
    # The Register message's host facts and GPUs, as JSON-able dicts.
    host: dict[str, Any] = Field(default_factory=dict)
    gpus: list[dict[str, Any]] = Field(default_factory=list)
    installable_engines: list[str] = Field(default_factory=list)
    # What the node's agent.yaml says (from Register; replaced on each registration).
    labels: dict[str, str] = Field(default_factory=dict)
    # What an operator set (ctl node label): kept across registrations, wins over ``labels``.
    operator_labels: dict[str, str] = Field(default_factory=dict)
    registered_at: datetime
    last_heartbeat_at: datetime | None = None
    heartbeat_seq: int = 0


class HeartbeatRow(BaseModel):
    """The latest heartbeat of one node, written in batches."""

    node_id: str
    at: datetime
    seq: int
    # The heartbeat's GPU samples, disk and memory, as a JSON-able dict.
    sample: dict[str, Any] = Field(default_factory=dict)


class ModelRecord(BaseModel):
    """A catalog entry: the model's spec as the admin API gave it (a JSON-able dict)."""

    name: str
    spec: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class ReplicaRecord(BaseModel):
    """One replica of a model: where it is placed, its state and its history (JSON-able)."""

    replica_id: str
    model: str
    doc: dict[str, Any]
    updated_at: datetime


class KeyRecord(BaseModel):
    """An API key as stored: a hash of its secret, never the secret."""

    key_id: str
    # The project's id (ten_…): what the key belongs to, whatever the project is called.
    project_id: str = ""
    # The project's path as the store read it (its last path, if it was removed);
    # for people only: written, it is ignored.
    project: str = ""
    name: str = ""
    secret_sha256: str
    prefix: str
    models: list[str] = Field(default_factory=list)
    # {"rpm": n, "tpm": n}; a missing or null field is unlimited.
    limits: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None
    # The admission band its requests wait in ("": the default band).
    band: str = ""
    # "service" (made by ctl keys create) or "rotated" (replaced; works until expires_at).
    kind: str = "service"
    # The key this one replaced, or that replaced it ("" when none).
    rotated_from: str = ""
    rotated_to: str = ""


def new_tenant_id() -> str:
    """A fresh tenant id: ``ten_`` and 16 hex digits, never reused."""
    return "ten_" + secrets.token_hex(8)


class TenantRecord(BaseModel):
    """An organization, team or project: its id, its path (``Acme/ml/search``) and its own limits.

    The id never changes: everything that belongs to a level refers to it, so a
    rename changes only ``path``, and a level made again under an old path is a
    new id that sees nothing of the old one."""

    kind: str  # org, team or project
    path: str
    id: str = Field(default_factory=new_tenant_id)
    # Limits of this level: {"rpm", "tpm", "budget_day_micros", "budget_month_micros"}.
    limits: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime
