"""Where llmgw's files go on a node: the system layout, or everything under --install-root.

Under an install root the node's files lie exactly as ``Paths.under(ROOT)``
lays them out (the agent runs with LLMGW_HOME=ROOT), with the venv at
ROOT/opt/venv and the service unit and pidfile under ROOT as well, so a test
leaves /opt and /etc untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from llmgw.paths import ENV_HOME, Paths

UNIT_NAME = "llmgw-agent.service"
SYSTEM_VENV = "/opt/llmgw/venv"
SYSTEM_UNIT_DIR = "/etc/systemd/system"


@dataclass(frozen=True)
class NodeLayout:
    """Every path ``node add`` writes on the node."""

    paths: Paths
    venv: str
    unit_file: str
    pidfile: str
    log_file: str
    install_root: str = ""

    @classmethod
    def for_root(cls, install_root: str = "") -> NodeLayout:
        if not install_root:
            paths = Paths.system()
            return cls(
                paths=paths,
                venv=SYSTEM_VENV,
                unit_file=f"{SYSTEM_UNIT_DIR}/{UNIT_NAME}",
                pidfile=str(paths.run_dir / "llmgw-agent.pid"),
                log_file="/var/log/llmgw-agent.log",
            )
        root = PurePosixPath(install_root)
        paths = Paths.under(Path(root))
        return cls(
            paths=paths,
            venv=str(root / "opt" / "venv"),
            # Outside systemd's search path: `systemctl link` makes it known.
            unit_file=str(paths.config_dir / "systemd" / UNIT_NAME),
            pidfile=str(paths.run_dir / "llmgw-agent.pid"),
            log_file=str(paths.log_dir / "agent.log"),
            install_root=str(root),
        )

    @property
    def llmgw(self) -> str:
        return f"{self.venv}/bin/llmgw"

    @property
    def wheel_marker(self) -> str:
        """The sha256 of the llmgw wheel installed in the venv (re-runs compare it)."""
        return f"{self.venv}/.llmgw-wheel.sha256"

    @property
    def agent_env(self) -> dict[str, str]:
        return {ENV_HOME: self.install_root} if self.install_root else {}

    @property
    def node_crt(self) -> str:
        return str(self.paths.pki_dir / "node.crt")

    @property
    def node_key(self) -> str:
        return str(self.paths.pki_dir / "node.key")

    @property
    def ca_crt(self) -> str:
        return str(self.paths.ca_cert)
