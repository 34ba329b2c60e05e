"""The cluster's kept settings on a running control plane: in force, followed, applied, pushed.

``mount_settings`` wires them into a starting gatewayd: the newest version
is read from the store (a cluster's first start writes version 1 from
server.yaml), applied to the running parts (gatewayd/settings/apply.py),
followed every second, and each connected agent is sent its part
(gatewayd/settings/agents.py). From then on the store wins: server.yaml's
copies of those keys are ignored, with one warning naming the ones that differ.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from gatewayd.settings.agents import AgentSettingsPush
from gatewayd.settings.apply import ServerApply
from gatewayd.settings.runtime import SettingsRuntime
from llmgw.settings import ClusterSettings
from llmgw.settings.keys import diff

log = logging.getLogger(__name__)

# server.yaml keys named in the warning, at most.
WARN_KEYS_MAX = 8


async def mount_settings(server) -> SettingsRuntime:
    """Put the kept settings in force on ``server`` (a starting GatewayServer) and follow them.

    Its tasks (following the store, pushing agents' settings) are appended to
    ``server._tasks``, so ``server.stop()`` ends them. ``server.settings`` is the runtime.
    """
    from_yaml = ClusterSettings.from_server_config(server.cfg)
    push = AgentSettingsPush(server.registry)
    runtime = SettingsRuntime(
        server.store,
        from_yaml,
        ServerApply(server),
        control_plane=getattr(server, "control_plane_id", "") or socket.gethostname(),
        agents=push,
    )
    runtime.listeners.append(push.update)
    server.settings = runtime
    await runtime.start(from_yaml)
    _warn_ignored(from_yaml, runtime)
    server._tasks.append(asyncio.create_task(runtime.run(), name="settings"))
    server._tasks.append(asyncio.create_task(push.run(), name="agent-settings"))
    return runtime


def _warn_ignored(from_yaml: ClusterSettings, runtime: SettingsRuntime) -> None:
    """One warning naming the kept keys whose server.yaml value is not the one in force."""
    if runtime.version == 0:
        return
    keys = [
        c.key
        for c in diff(from_yaml.as_dict(), runtime.in_force.as_dict())
        if not c.key.startswith(("limits", "agents"))  # never in server.yaml
    ]
    if not keys:
        return
    named = ", ".join(keys[:WARN_KEYS_MAX]) + (
        f" and {len(keys) - WARN_KEYS_MAX} more" if len(keys) > WARN_KEYS_MAX else ""
    )
    log.warning(
        "server.yaml's %s are ignored: the cluster's kept settings (version %d) hold them "
        "now; see them with `llmgw ctl config get`, change them with `llmgw ctl config set`",
        named,
        runtime.version,
    )
