"""Stored responses and each project's retention, on SQLite and on a real PostgreSQL alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gatewayd.store import Store, TenantRecord
from gatewayd.store.response_records import StoredResponse

T0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
# Responses and retention belong to a project's id, not its path.
PROJECT, OTHER = "ten_0000000000000001", "ten_0000000000000002"
PATHS = {PROJECT: "Acme/ml/search", OTHER: OTHER}


async def _project(store: Store, tenant_id: str = PROJECT) -> None:
    rec = TenantRecord(id=tenant_id, path=PATHS[tenant_id], kind="project", created_at=T0)
    await store.create_tenant(rec)


def _response(response_id: str = "resp_1", project: str = PROJECT, **changes) -> StoredResponse:
    fields = {
        "id": response_id,
        "project_id": project,
        "key_id": "k1",
        "created_at": T0,
        "expires_at": T0 + timedelta(hours=24),
        "response": {"id": response_id, "object": "response", "output": [{"type": "message"}]},
        "input_items": [{"type": "message", "role": "user", "content": "hi"}],
        "history": [{"type": "message", "role": "user", "content": "before"}],
    }
    return StoredResponse(**(fields | changes))


async def test_a_project_keeps_no_responses_until_retention_is_set(store: Store):
    await _project(store)

    assert await store.retention_of(PROJECT) == 0
    assert await store.set_retention(PROJECT, 86400) is True
    assert await store.retention_of(PROJECT) == 86400
    assert await store.retentions() == {PROJECT: 86400}


async def test_setting_the_retention_of_an_unknown_project_returns_false(store: Store):
    assert await store.set_retention("ten_nosuchproject", 3600) is False
    assert await store.retention_of("ten_nosuchproject") == 0


async def test_a_stored_response_comes_back_whole_to_its_own_project_only(store: Store):
    await _project(store)
    await store.put_response(_response())

    got = await store.get_response(PROJECT, "resp_1", T0)

    assert got is not None
    assert got.response["output"] == [{"type": "message"}]
    assert got.input_items == [{"type": "message", "role": "user", "content": "hi"}]
    assert got.history[0]["content"] == "before"
    assert got.created_at == T0 and got.key_id == "k1" and got.project == PATHS[PROJECT]
    assert await store.get_response(OTHER, "resp_1", T0) is None


async def test_an_expired_response_is_not_read_and_is_forgotten(store: Store):
    await _project(store)
    await store.put_response(_response("resp_old", expires_at=T0 + timedelta(minutes=1)))
    await store.put_response(_response("resp_new"))
    later = T0 + timedelta(minutes=2)

    assert await store.get_response(PROJECT, "resp_old", later) is None
    assert await store.expire_responses(later) == 1
    assert await store.get_response(PROJECT, "resp_new", later) is not None


async def test_deleting_a_response_is_only_for_its_own_project(store: Store):
    await _project(store)
    await store.put_response(_response())

    assert await store.delete_response(OTHER, "resp_1") is False
    assert await store.delete_response(PROJECT, "resp_1") is True
    assert await store.delete_response(PROJECT, "resp_1") is False


async def test_turning_retention_off_forgets_the_projects_responses(store: Store):
    await _project(store)
    await _project(store, OTHER)
    await store.set_retention(PROJECT, 3600)
    await store.put_response(_response())
    await store.put_response(_response("resp_2", project=OTHER))

    assert await store.set_retention(PROJECT, 0) is True

    assert await store.get_response(PROJECT, "resp_1", T0) is None
    assert await store.get_response(OTHER, "resp_2", T0) is not None
    assert await store.retentions() == {}
