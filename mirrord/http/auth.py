"""Who may read and who may write: the read token, the admin token, a node's certificate.

"read" takes the read token or the admin token, either as ``Authorization:
Bearer T`` (huggingface_hub sends HF_TOKEN so, agents and peers too) or as
Basic auth with T as the password (pip, from
``http://llmgw:T@host/simple/``), or a client certificate the cluster CA
signed (TLS verified it before the request reached us). "admin" takes the
admin token only. No credential is 401 with ``WWW-Authenticate``; a wrong
one 403. Tokens are compared in constant time.
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
        if grant == "admin" or (grant == "read" and need == "read"):
            return grant
        if grant == "none":
            raise Refused(
                401,
                "unauthorized",
                "the mirror needs a credential",
                hint=(
                    "send the mirror's read token as `Authorization: Bearer <token>` "
                    "(HF_TOKEN for huggingface_hub; it is in <secrets>/mirror-read-token)"
                    if need == "read"
                    else "writes take the admin token as `Authorization: Bearer <token>`"
                ),
            )
        if grant == "wrong":
            raise Refused(
                403,
                "forbidden",
                "the mirror refused the token given",
                hint="use the mirror's read token (<secrets>/mirror-read-token) or the admin token",
            )
        raise Refused(
            403,
            "forbidden",
            "this needs the mirror's admin token; the read token only reads",
            hint="run it through `llmgw ctl mirror …`, which holds the admin token",
        )
