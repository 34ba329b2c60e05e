"""Who may read and who may write: the read token, a node's certificate, the admin token.

"read" takes the read token, either as ``Authorization: Bearer T``
(huggingface_hub sends HF_TOKEN so, agents and peers too) or as Basic auth
with T as the password (pip, from ``https://llmgw:T@host/simple/``), or a
client certificate the cluster CA signed (TLS verified it before the request
reached us). "admin" takes the mirror's admin token only, and the admin
token reads nothing: each token does its one job, so a read token that leaks
changes nothing and an admin token is never sent where a read would do. No
credential is 401 with ``WWW-Authenticate``; a wrong one 403. Tokens are
compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass
from typing import Literal

from mirrord.http.messages import Request

Need = Literal["read", "admin"]
Grant = Literal["admin", "read", "none", "wrong"]

REALM = "llmgw-mirror"


@dataclass
class Refused(Exception):
    """A request without the credential it needs: 401 (none given) or 403 (not enough)."""

    status: int
    code: str
    message: str
    hint: str = ""

    @property
    def challenge(self) -> list[tuple[str, str]]:
        if self.status != 401:
            return []
        return [
            ("WWW-Authenticate", f'Bearer realm="{REALM}"'),
            ("WWW-Authenticate", f'Basic realm="{REALM}"'),
        ]


def presented_token(req: Request) -> str | None:
    """The token in ``Authorization`` (Bearer, or Basic's password), or None."""
    value = req.header("authorization").strip()
    if not value:
        return None
    scheme, _, rest = value.partition(" ")
    scheme = scheme.lower()
    rest = rest.strip()
    if scheme == "bearer":
        return rest
    if scheme == "basic":
        try:
            user, _, password = base64.b64decode(rest, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return ""
        # pip puts the token where the password goes; some tools put it as the user.
        return password or user
    return ""


def _same(given: str, token: str) -> bool:
    return bool(token) and hmac.compare_digest(given.encode(), token.encode())


class Auth:
    """The mirror's credentials; ``check(req, need)`` raises Refused or returns the grant."""

    def __init__(self, read_token: str, admin_token: str) -> None:
        self.read_token = read_token
        self.admin_token = admin_token

    def grant(self, req: Request) -> Grant:
        token = presented_token(req)
        if token is not None:
            if _same(token, self.admin_token):
                return "admin"
            if _same(token, self.read_token):
                return "read"
            # A certificate still reads when a stale token travels with it.
            return "read" if req.peer_cert else "wrong"
        return "read" if req.peer_cert else "none"

    def check(self, req: Request, need: Need) -> Grant:
        grant = self.grant(req)
        if grant == need:
            return grant
        if grant == "admin" and need == "read":
            # Guards: the cluster's admin token was sent on reads when the read
            # token's file was missing, so it travelled to every mirror read.
            raise Refused(
                403,
                "forbidden",
                "the mirror's admin token only writes; reads take the read token",
                hint="send the mirror's read token (<secrets>/mirror-read-token) or a "
                "node certificate the cluster CA signed",
            )
        if grant == "none":
            raise Refused(
                401,
                "unauthorized",
                "the mirror needs a credential",
                hint=(
                    "send the mirror's read token as `Authorization: Bearer <token>` "
                    "(HF_TOKEN for huggingface_hub; it is in <secrets>/mirror-read-token), "
                    "or a node certificate the cluster CA signed"
                    if need == "read"
                    else "writes take the mirror's admin token as `Authorization: Bearer "
                    "<token>` (<secrets>/mirror-admin-token)"
                ),
            )
        if grant == "wrong":
            raise Refused(
                403,
                "forbidden",
                "the mirror refused the token given",
                hint="reads take the mirror's read token (<secrets>/mirror-read-token), writes "
                "its admin token (<secrets>/mirror-admin-token)",
            )
        raise Refused(
            403,
            "forbidden",
            "this needs the mirror's admin token; the read token and certificates only read",
            hint="run it through `llmgw ctl mirror …`, which holds the admin token",
        )
