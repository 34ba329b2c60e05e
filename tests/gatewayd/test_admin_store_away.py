"""The admin API while the store is away: every method answers UNAVAILABLE in the store's words.

Guards a StoreError reaching grpclib: an "Application error" traceback in
gatewayd's log and "UNKNOWN: Internal Server Error" to the operator (seen in
the fault suite, ``ctl config get`` on a control plane cut from its store).
"""

from __future__ import annotations

import logging

import pytest

from llmgw.errors import AdminUnreachable


async def test_a_method_that_cannot_reach_the_store_says_so_in_words(cluster, caplog):
    async with cluster.admin() as admin:
        assert (await admin.get_settings()).version.version >= 1
        # The store goes away under a running control plane.
        await cluster.server.store.close()
        with caplog.at_level(logging.ERROR, logger="grpclib.server"):
            with pytest.raises(AdminUnreachable) as away:
                await admin.get_settings()
            with pytest.raises(AdminUnreachable):
                await admin.settings_history()
    assert "store is not open" in away.value.message
    assert not [r for r in caplog.records if r.name == "grpclib.server"]
