"""The admin API's answer while the store is away: UNAVAILABLE, in words, for every method.

A method that needs the store and cannot reach it (a failover under way, the
control plane cut from it) raises StoreError. Left to grpclib, that is an
"Application error" traceback in the log and UNKNOWN "Internal Server Error"
to the operator. Wrapped here once for every method instead of in each.
"""

from __future__ import annotations

from typing import Any

from grpclib import GRPCError, Status

from llmgw.errors import StoreError


def store_unavailable(e: StoreError) -> GRPCError:
    return GRPCError(Status.UNAVAILABLE, f"{e.message} ({e.hint})" if e.hint else e.message)


class StoreErrorsInWords:
    """A grpclib service (anything with ``__mapping__``) whose methods answer StoreError as
    UNAVAILABLE with its words."""

    def __init__(self, service: Any) -> None:
        self.service = service

    def __mapping__(self) -> dict[str, Any]:
        return {
            name: handler._replace(func=_wrapped(handler.func))
            for name, handler in self.service.__mapping__().items()
        }


def _wrapped(func):
    async def call(stream) -> None:
        try:
            await func(stream)
        except StoreError as e:
            raise store_unavailable(e) from None

    return call
