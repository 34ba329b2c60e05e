"""The kept settings through the admin API: read, change, list, compare, roll back.

``llmgw ctl config`` and the console's Settings screen call these. A change
is made on a version (the newest, or the one an editor opened) and checked
as a whole before it is kept; one made on a version since replaced is
refused, naming the version to make it again on. Every version records who
made it (the ``author`` the caller sends: ctl sends the operator's user
name) and when. A version kept here is applied here before the reply; the
other control planes take it from the store within a second or so.
"""

from __future__ import annotations

import json
from typing import Any

from grpclib.const import Status
from grpclib.exceptions import GRPCError

from gatewayd.settings.runtime import SettingsRuntime
from gatewayd.store import Store
from gatewayd.store.settings_records import SettingsConflict, SettingsVersion
from llmgw.errors import UsageError
from llmgw.settings import ClusterSettings, check_document, dump_document, load_document
from llmgw.settings.keys import Change, as_yaml, diff, get_at, parse_assignment, parse_key, set_at
from proto.llmgw.v1 import (
    AgentSettingsState,
    GetSettingsRequest,
    RollbackSettingsRequest,
    SetSettingsRequest,
    SettingChange,
    SettingsDiffReply,
    SettingsDiffRequest,
    SettingsHistoryReply,
    SettingsHistoryRequest,
    SettingsInForce,
    SettingsReply,
    SettingsVersionView,
    SettingsWritten,
)

DEFAULT_AUTHOR = "admin"
HISTORY_LIMIT = 50


def _refused(e: UsageError) -> GRPCError:
    return GRPCError(Status.INVALID_ARGUMENT, f"{e.message}; {e.hint}" if e.hint else e.message)


def _normal(document: dict[str, Any]) -> dict[str, Any]:
    """A stored document with every key present (a version kept before a key existed lacks it)."""
    return ClusterSettings.model_validate(document).as_dict()


def _loaded(v: SettingsVersion) -> dict[str, Any]:
    """``_normal`` of a version, or FAILED_PRECONDITION for one this llmgw cannot load."""
    try:
        return _normal(v.document)
    except ValueError as e:
        raise GRPCError(
            Status.FAILED_PRECONDITION,
            f"settings version {v.version} cannot be loaded by this control plane (written by a"
            f" newer llmgw?): {e}",
        ) from None


def _diff(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """What changed between two stored documents, as each loads here (else as stored)."""
    try:
        return diff(_normal(old), _normal(new))
    except ValueError:
        return diff(old, new)


def _change_view(c: Change) -> SettingChange:
    return SettingChange(
        key=c.key,
        kind=c.kind,
        old_yaml="" if c.kind == "added" else as_yaml(c.old),
        new_yaml="" if c.kind == "removed" else as_yaml(c.new),
    )


def _version_view(v: SettingsVersion, parent: SettingsVersion | None) -> SettingsVersionView:
    changed = [] if parent is None else [c.key for c in _diff(parent.document, v.document)]
    return SettingsVersionView(
        version=v.version,
        author=v.author,
        at=v.at.isoformat(timespec="seconds"),
        comment=v.comment,
        parent_version=v.parent_version,
        changed_keys=changed,
    )


class SettingsAdmin:
    """Mixed into AdminService."""

    _store: Store
    _settings_runtime: SettingsRuntime | None

    def _settings(self) -> SettingsRuntime:
        runtime = self._settings_runtime
        if runtime is None:
            raise GRPCError(Status.UNAVAILABLE, "this control plane keeps no settings")
        return runtime

    async def _version(self, version: int) -> SettingsVersion:
        """Version ``version`` (0: the newest); NOT_FOUND naming the newest there is."""
        found = await self._store.get_settings(version)
        if found is None:
            newest = await self._store.latest_settings_version()
            raise GRPCError(
                Status.NOT_FOUND,
                f"there is no settings version {version}; the newest is {newest}"
                if version
                else "no settings are kept yet",
            )
        return found

    async def _parent(self, v: SettingsVersion) -> SettingsVersion | None:
        return await self._store.get_settings(v.version - 1) if v.version > 1 else None

    def _in_force(self, runtime: SettingsRuntime) -> SettingsInForce:
        agents = []
        if runtime.agents is not None:
            agents = [
                AgentSettingsState(
                    node_id=node_id,
                    version=state.version,
                    ok=state.ok,
                    error=state.error,
                    at=state.at.isoformat(timespec="seconds"),
                )
                for node_id, state in sorted(runtime.agents.states.items())
            ]
        return SettingsInForce(
            control_plane=runtime.control_plane,
            version=runtime.version,
            since=runtime.since.isoformat(timespec="seconds") if runtime.since else "",
            problems=list(runtime.problems),
            agents=agents,
        )

    async def get_settings(self, message: GetSettingsRequest) -> SettingsReply:
        runtime = self._settings()
        shown = await self._version(message.version)
        document = _loaded(shown)
        if message.key:
            try:
                value = get_at(document, parse_key(message.key))
            except UsageError as e:
                raise _refused(e) from None
            text = as_yaml(value)
        else:
            value, text = document, dump_document(ClusterSettings.model_validate(document))
        return SettingsReply(
            version=_version_view(shown, await self._parent(shown)),
            key=message.key,
            value_yaml=text,
            value_json=json.dumps(value),
            in_force=self._in_force(runtime),
            latest_version=await self._store.latest_settings_version(),
        )

    async def set_settings(self, message: SetSettingsRequest) -> SettingsWritten:
        runtime = self._settings()
        base = await self._version(message.parent_version)
        before = _loaded(base)
        try:
            if message.document_yaml.strip():
                new = load_document(message.document_yaml)
            elif message.assignments:
                doc = before
                for text in message.assignments:
                    parts, value = parse_assignment(text)
                    doc = set_at(doc, parts, value)
                new = check_document(doc)
            else:
                raise UsageError(
                    "nothing to change: give KEY=VALUE, or a whole document",
                    hint="e.g. llmgw ctl config set router.admission.bands[0].max_queue=200",
                )
        except UsageError as e:
            raise _refused(e) from None
        return await self._keep(runtime, base, new, author=message.author, comment=message.comment)

    async def rollback_settings(self, message: RollbackSettingsRequest) -> SettingsWritten:
        runtime = self._settings()
        if message.version <= 0:
            raise GRPCError(Status.INVALID_ARGUMENT, "name the version to go back to (1 or more)")
        target = await self._version(message.version)
        newest = await self._version(0)
        try:
            # Checked as it was when it was kept: a rollback is never refused by a rule
            # added since (its cross-key rules applied then).
            settings = ClusterSettings.model_validate(target.document)
        except ValueError as e:
            raise GRPCError(
                Status.FAILED_PRECONDITION,
                f"version {message.version} cannot be loaded by this control plane: {e}",
            ) from None
        comment = message.comment or f"back to version {message.version}"
        return await self._keep(runtime, newest, settings, author=message.author, comment=comment)

    async def _keep(
        self,
        runtime: SettingsRuntime,
        base: SettingsVersion,
        new: ClusterSettings,
        *,
        author: str,
        comment: str,
    ) -> SettingsWritten:
        changes = diff(_loaded(base), new.as_dict())
        if not changes:
            return SettingsWritten(
                version=_version_view(base, await self._parent(base)),
                in_force=self._in_force(runtime),
                unchanged=True,
            )
        try:
            written = await runtime.write(
                new,
                parent_version=base.version,
                author=author or DEFAULT_AUTHOR,
                comment=comment,
            )
        except SettingsConflict as e:
            raise GRPCError(Status.ALREADY_EXISTS, f"{e.message}; {e.hint}") from None
        return SettingsWritten(
            version=_version_view(written, base),
            changes=[_change_view(c) for c in changes],
            in_force=self._in_force(runtime),
        )

    async def settings_history(self, message: SettingsHistoryRequest) -> SettingsHistoryReply:
        runtime = self._settings()
        limit = message.limit if message.limit > 0 else HISTORY_LIMIT
        # One more than shown: the oldest shown one's changes are counted from its parent.
        versions = await self._store.list_settings_versions(limit=limit + 1)
        views = [
            _version_view(v, versions[i + 1] if i + 1 < len(versions) else None)
            for i, v in enumerate(versions[:limit])
        ]
        return SettingsHistoryReply(versions=views, in_force_version=runtime.version)

    async def settings_diff(self, message: SettingsDiffRequest) -> SettingsDiffReply:
        self._settings()
        to = await self._version(message.to_version)
        start = message.from_version if message.from_version else to.version - 1
        old = (await self._version(start)).document if start > 0 else ClusterSettings().as_dict()
        changes = _diff(old, to.document)
        return SettingsDiffReply(
            from_version=start,
            to_version=to.version,
            changes=[_change_view(c) for c in changes],
        )
