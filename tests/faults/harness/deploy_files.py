"""The files of deploy/, read by the harness so that what it runs is what docs/ha.md tells."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def deploy_file(relative: str) -> Path:
    path = DEPLOY / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the harness runs deploy/'s own files")
    return path


def load_yaml(relative: str) -> dict[str, Any]:
    return yaml.safe_load(deploy_file(relative).read_text())


def write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# The program path a system install's units start (node add installs llmgw there).
SYSTEM_LLMGW = "/opt/llmgw/venv/bin/llmgw"
# A DSN of the kind docs/ha.md writes: every Patroni member, the writable one wanted.
EXAMPLE_DSN = (
    "postgresql://llmgw@10.0.0.11:5432,10.0.0.12:5432/llmgw?target_session_attrs=read-write"
)


def llmgw_units() -> dict[str, str]:
    """The units llmgw writes on a system install, by file name, rendered by llmgw's own code
    (deploy/systemd/ holds these; a test keeps the two the same)."""
    from llmgw.config import ServerConfig, StoreConfig
    from llmgw.onboard.join import unit_text as agent_unit_text
    from llmgw.onboard.layout import UNIT_NAME as AGENT_UNIT_NAME
    from llmgw.onboard.layout import NodeLayout
    from llmgw.paths import Paths
    from llmgw.setup.mirror_init import MIRROR_UNIT_NAME, llmgw_program
    from llmgw.setup.mirror_init import unit_text as mirror_unit_text
    from llmgw.setup.server_unit import SERVER_UNIT_NAME, server_unit_text

    paths = Paths.system()
    # The server and mirror units name the llmgw that wrote them: here, the test's.
    here = " ".join(llmgw_program())
    server = ServerConfig(store=StoreConfig(dsn=EXAMPLE_DSN))
    return {
        SERVER_UNIT_NAME: server_unit_text(paths, server).replace(here, SYSTEM_LLMGW),
        AGENT_UNIT_NAME: agent_unit_text(NodeLayout.for_root()),
        MIRROR_UNIT_NAME: mirror_unit_text(paths).replace(here, SYSTEM_LLMGW),
    }
