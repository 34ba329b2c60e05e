"""Sealing company MCP servers' credentials before they reach the store.

A credential (a bearer token, an API key header) is sealed with AES-256-GCM
under a 32-byte key that lives only on the control plane's disk
(``secrets/mcp-seal.key``, 0600), so a copy of the store (a backup, a
PostgreSQL another team runs) holds no usable credential. The secret's ref
(``mcp/hr/3f9a…``) and the origin of the server's address
(``https://hr.internal:443``, llmgw.mcp.names.origin_of) are bound in as
associated data: a sealed value moved to another ref, another server, or the
same server pointed somewhere else (its address edited in the store) does not
open. A blob is nonce ‖ ciphertext.

Values sealed before the origin was bound (associated data: the ref alone)
are sealed again for their server's origin when gatewayd starts
(gatewayd.mcp.rebind); ``open_unbound`` exists for that alone.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from llmgw.errors import LlmgwError
from llmgw.paths import Paths

KEY_FILE_NAME = "mcp-seal.key"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12  # GCM's standard nonce; random per seal
TAG_BYTES = 16

_RESEAL_HINT = (
    "put back the mcp-seal.key this store was sealed with (every control plane sharing"
    " one store needs the same file), or set the credential again:"
    " llmgw ctl mcp change SERVER --bearer-file FILE (or --header-file NAME=FILE)"
)


class SealError(LlmgwError):
    """A sealed credential cannot be opened, or the seal key cannot be used."""


def _bound(ref: str, origin: str) -> bytes:
    """The associated data of a value sealed as ``ref`` for ``origin``: neither holds a
    newline (a ref is ``mcp/NAME/HEX``, an origin ``scheme://host:port``)."""
    return f"{ref}\n{origin}".encode()


def new_ref(server: str) -> str:
    """A fresh ref for one sealed value of ``server``: ``mcp/SERVER/<16 hex>``.

    Every new value gets a new ref, so a ref's plaintext never changes and may
    be cached by ref.
    """
    return f"mcp/{server}/{secrets.token_hex(8)}"


class Sealer:
    """Seals and opens credentials with the key in ``key_path``, made on first use."""

    def __init__(self, key_path: Path) -> None:
        self.key_path = Path(key_path)
        self._aead: AESGCM | None = None

    @classmethod
    def for_paths(cls, paths: Paths) -> Sealer:
        return cls(paths.secrets_dir / KEY_FILE_NAME)

    new_ref = staticmethod(new_ref)

    def seal(self, value: str, ref: str, origin: str) -> bytes:
        """``value`` sealed for the server whose address has ``origin`` (origin_of)."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._cipher().encrypt(nonce, value.encode(), _bound(ref, origin))

    def open(self, blob: bytes, ref: str, origin: str) -> str:
        """The value sealed as ``ref`` for ``origin``; SealError for any other origin."""
        return self._open(
            blob,
            ref,
            _bound(ref, origin),
            f"the sealed credential {ref} does not open for {origin} with the key in"
            f" {self.key_path}: the server's address was moved to {origin} in the store"
            " without new credentials, the key was replaced, or the store was sealed by"
            " another control plane",
        )

    def open_unbound(self, blob: bytes, ref: str) -> str:
        """A value sealed before origins were bound (its ref alone as associated data)."""
        return self._open(
            blob,
            ref,
            ref.encode(),
            f"the sealed credential {ref} does not open with the key in {self.key_path}:"
            " the key was replaced, or the store was sealed by another control plane",
        )

    def _open(self, blob: bytes, ref: str, aad: bytes, refused: str) -> str:
        if len(blob) < NONCE_BYTES + TAG_BYTES:
            raise SealError(
                f"the sealed credential {ref} is {len(blob)} bytes: too short to be one",
                hint=_RESEAL_HINT,
            )
        nonce, sealed = blob[:NONCE_BYTES], blob[NONCE_BYTES:]
        try:
            plain = self._cipher().decrypt(nonce, sealed, aad)
        except InvalidTag as e:
            raise SealError(refused, hint=_RESEAL_HINT) from e
        return plain.decode()

    def _cipher(self) -> AESGCM:
        if self._aead is None:
            self._aead = AESGCM(self._load_or_make_key())
        return self._aead

    def _load_or_make_key(self) -> bytes:
        path = self.key_path
        try:
            key = path.read_bytes()
        except FileNotFoundError:
            key = self._make_key()
        except OSError as e:
            raise SealError(
                f"cannot read the MCP seal key {path}: {e.strerror}",
                hint="gatewayd must run as the user that owns the secrets dir",
            ) from e
        if len(key) != KEY_BYTES:
            raise SealError(
                f"the MCP seal key {path} holds {len(key)} bytes, not the {KEY_BYTES}"
                " of an AES-256 key",
                hint="restore it from a backup; " + _RESEAL_HINT,
            )
        return key

    def _make_key(self) -> bytes:
        """Write a new random key, unless another process got there first (then read its)."""
        path = self.key_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        except OSError as e:
            raise SealError(
                f"cannot create the MCP seal key in {path.parent}: {e.strerror}",
                hint="gatewayd must be able to write its secrets dir",
            ) from e
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(KEY_BYTES))
                f.flush()
                os.fsync(f.fileno())
            # A link, not a rename: it never replaces a key another gatewayd
            # made a moment ago, whose seals would then no longer open.
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return path.read_bytes()
