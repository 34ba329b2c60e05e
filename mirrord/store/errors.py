"""What the mirror's store refuses, each with the management API's error code."""

from __future__ import annotations

from llmgw.errors import LlmgwError


class StoreError(LlmgwError):
    """The store could not do what was asked (a disk or a file out of place)."""

    code = "internal"


class NotHeld(StoreError):
    """The repository, revision or file is not in this mirror."""

    code = "not_found"


class QuotaExceeded(StoreError):
    """An add would pass the mirror's quota or the disk's free space."""

    code = "quota"


class Incomplete(StoreError):
    """A revision names a blob the store does not hold (yet)."""

    code = "conflict"
