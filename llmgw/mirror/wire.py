"""The JSON of the mirror's management API (``/v1/…``), the one shape both sides use.

The mirror daemon answers with these models' ``model_dump(mode="json")``;
the control plane reads answers back with ``model_validate``. Errors are
``{"error": {"code", "message", "hint"}}`` with an HTTP status (ErrorBody).
Times are Unix seconds (floats); sizes are bytes.

Endpoints (every one under the mirror's single port):

    GET    /health                          Health            no credential
    GET    /v1/info                         Info              read
    GET    /v1/revisions                    RevisionList      read   (files left out)
    GET    /v1/repos/{org}/{name}           RevisionList      read   (with files)
    GET    /v1/files/{kind}/{name}          Revision          read   (a wheel or engine)
    DELETE /v1/repos/{org}/{name}[?revision=R]   Removed      admin
    DELETE /v1/files/{kind}/{name}          Removed           admin
    POST   /v1/pulls        PullRequest  -> Pull (202)        admin
    GET    /v1/pulls                        PullList          admin
    GET    /v1/pulls/{id}                   Pull              admin
    GET    /v1/pulls/{id}/follow            NDJSON of Pull, one line at least every
                                            0.5 s while it runs, the last one done/failed
    PUT    /v1/uploads/{upload}/{path…}     FileEntry         admin  (raw body; header
                                            X-Llmgw-Sha256 checked when given)
    POST   /v1/uploads/{upload}/commit  CommitRequest -> Revision   admin
    PUT    /v1/files/{kind}/{name}          Revision          admin  (raw body; wheel or
                                            engine; X-Llmgw-Sha256 required for engine)
    GET    /v1/du                           Du                admin
    GET    /v1/peers                        PeerList          admin
    POST   /v1/peers        PeerRequest  -> PeerList          admin
    DELETE /v1/peers?url=U                  PeerList          admin
    GET    /v1/state                        State             read   (what peers compare)
    POST   /v1/notify                       {}                read   (a peer changed: sync now)

Reads are also the Hugging Face API (``/api/models/…``, ``/{org}/{name}/resolve/…``),
the package index (``/simple/``, ``/files/wheel/{name}``) and blobs by digest
(``/blobs/sha256/{sha256}``). "read" takes the read token or the admin token
(``Authorization: Bearer T``, or Basic with T as the password, for pip), or a
client certificate the cluster CA signed; "admin" takes the admin token only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Kind = Literal["model", "wheel", "engine"]
PullState = Literal["queued", "resolving", "fetching", "done", "failed"]
PeerState = Literal["in_step", "behind", "syncing", "down", "unknown"]


class _Wire(BaseModel):
    # Newer mirrors may add fields; older readers keep what they know.
    model_config = ConfigDict(extra="ignore")


class ErrorDetail(_Wire):
    # "invalid", "not_found", "quota", "refused" (pickle, policy), "unauthorized",
    # "forbidden", "conflict", "unavailable" (upstream down), "internal".
    code: str
    message: str
    hint: str = ""


class ErrorBody(_Wire):
    error: ErrorDetail


class Health(_Wire):
    ok: bool = True
    mirror_id: str
    version: str


class FileEntry(_Wire):
    """One file of a revision (or a wheel or engine archive itself)."""

    path: str
    size: int
    sha256: str
    # The git blob id the hub gives a small file ("" for an LFS file or an upload).
    git_oid: str = ""
    lfs: bool = False
    pickle: bool = False


class Revision(_Wire):
    """A model repository at one commit, or one wheel or engine archive; never changed once held."""

    kind: Kind = "model"
    # org/name; a wheel's or engine archive's file name.
    repo: str
    # The commit (40 hex); for a wheel or engine, its sha256.
    commit: str
    refs: list[str] = Field(default_factory=list)
    size_bytes: int = 0
    file_count: int = 0
    # Left out of listings (GET /v1/revisions); present in /v1/repos/… and /v1/state.
    files: list[FileEntry] | None = None
    added_unix: float = 0.0
    source: str = ""
    has_pickle: bool = False
    allow_pickle: bool = False


class RevisionList(_Wire):
    revisions: list[Revision]


class Removal(_Wire):
    """A tombstone: this revision was removed then, and peers remove it too."""

    kind: Kind = "model"
    repo: str
    commit: str
    removed_unix: float


class Removed(_Wire):
    removed: list[Revision]
    freed_bytes: int = 0


class PullRequest(_Wire):
    # hf:org/name[@rev] (from the upstream hub, or ``upstream``), or an https:// URL
    # of an engine archive (kind "engine", with sha256).
    source: str
    include: list[str] = Field(default_factory=list)
    allow_pickle: bool = False
    kind: Kind = "model"
    sha256: str = ""
    # Another hub or mirror to pull from ("" is the mirror's own upstream).
    upstream: str = ""
    upstream_token: str = ""


class Pull(_Wire):
    pull_id: str
    source: str
    repo: str = ""
    commit: str = ""
    state: PullState = "queued"
    file: str = ""
    bytes_done: int = 0
    bytes_total: int = 0
    rate_bytes_s: float = 0.0
    eta_s: float = 0.0
    files_done: int = 0
    files_total: int = 0
    error: ErrorDetail | None = None
    started_unix: float = 0.0
    finished_unix: float = 0.0
    # Set when done: what is now held.
    revision: Revision | None = None


class PullList(_Wire):
    pulls: list[Pull]


class CommitRequest(_Wire):
    repo: str
    kind: Kind = "model"
    allow_pickle: bool = False
    # A ref to name the new commit by (default "main").
    ref: str = "main"


class Info(_Wire):
    mirror_id: str
    version: str
    used_bytes: int = 0
    max_bytes: int = 0
    free_disk_bytes: int = 0
    revisions: int = 0
    peers: int = 0
    upstream: str = ""


class Du(_Wire):
    used_bytes: int
    max_bytes: int = 0
    free_disk_bytes: int = 0
    unreferenced_bytes: int = 0
    # Largest first; files left out.
    revisions: list[Revision] = Field(default_factory=list)


class Peer(_Wire):
    url: str
    state: PeerState = "unknown"
    # Seconds since everything the peer held was last known here; -1: never.
    lag_s: float = -1.0
    behind: int = 0
    last_sync_unix: float = 0.0
    reason: str = ""


class PeerList(_Wire):
    peers: list[Peer]


class PeerRequest(_Wire):
    url: str


class State(_Wire):
    """What a mirror holds and has removed, for its peers to compare (revisions with files)."""

    mirror_id: str
    revisions: list[Revision]
    removed: list[Removal]
