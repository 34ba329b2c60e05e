"""Where llmgw keeps its files on a machine.

The system layout (ARCHITECTURE.md §6) is used by root installs:
``/etc/llmgw``, ``/var/lib/llmgw``, ``/var/lib/llmgw-agent``, ``/opt/llmgw``.
With ``LLMGW_HOME`` set, every one of those lives under that single directory,
which is how tests, ``llmgw up`` and non-root use keep to themselves.

Root's ``llmgw up`` home is ``/var/lib/llmgw-up``, not ``/root/.llmgw``: the
agent runs engines as ``llmgw-engine``, which may not pass through /root
(0700), and everything an engine reads (its program, the weights) and its own
home lie in the agent's home (docs/decisions.md, "root's llmgw up").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_HOME = "LLMGW_HOME"
SYSTEM_CONFIG_DIR = Path("/etc/llmgw")
USER_HOME_DEFAULT = Path("~/.llmgw")
ROOT_UP_HOME = Path("/var/lib/llmgw-up")


@dataclass(frozen=True)
class Paths:
    """Every path llmgw reads or writes on one machine."""

    config_dir: Path
    server_data_dir: Path
    agent_data_dir: Path
    engines_dir: Path
    run_dir: Path
    home: Path | None = None

    @property
    def server_yaml(self) -> Path:
        return self.config_dir / "server.yaml"

    @property
    def agent_yaml(self) -> Path:
        return self.config_dir / "agent.yaml"

    @property
    def pki_dir(self) -> Path:
        return self.config_dir / "pki"

    @property
    def secrets_dir(self) -> Path:
        return self.config_dir / "secrets"

    @property
    def provider_keys_dir(self) -> Path:
        """Where outside providers' API keys live: the only files an external model's
        api_key_files may name (gatewayd reads nothing else of the secrets dir for them)."""
        return self.secrets_dir / "providers"

    @property
    def admin_token_file(self) -> Path:
        return self.secrets_dir / "admin-token"

    @property
    def mirror_read_token_file(self) -> Path:
        """The token the cluster's mirrors take for reads (agents, node add, peers)."""
        return self.secrets_dir / "mirror-read-token"

    @property
    def mirror_admin_token_file(self) -> Path:
        """The token the cluster's mirrors take for writes: their own, never the admin token."""
        return self.secrets_dir / "mirror-admin-token"

    @property
    def mirror_pins_file(self) -> Path:
        """The sha256 of each wheel this control plane put on its mirrors (node add's pins)."""
        return self.server_data_dir / "mirror-pins.json"

    @property
    def mirror_yaml(self) -> Path:
        return self.config_dir / "mirror.yaml"

    @property
    def mirror_data_dir(self) -> Path:
        """A mirror's blobs and snapshots: /var/lib/llmgw-mirror."""
        return self.server_data_dir.parent / "llmgw-mirror"

    @property
    def ca_cert(self) -> Path:
        return self.pki_dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.pki_dir / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.pki_dir / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.pki_dir / "server.key"

    @property
    def mirror_cert(self) -> Path:
        """The mirror's server certificate, signed by the cluster CA (``server init --mirror``)."""
        return self.pki_dir / "mirror.crt"

    @property
    def mirror_key(self) -> Path:
        return self.pki_dir / "mirror.key"

    @property
    def mirror_certs_dir(self) -> Path:
        """Bundles issued by ``llmgw mirror cert`` for mirrors on other machines."""
        return self.pki_dir / "mirrors"

    @property
    def node_certs_dir(self) -> Path:
        """Bundles issued by ``llmgw node cert`` (one folder per node id)."""
        return self.pki_dir / "nodes"

    @property
    def models_dir(self) -> Path:
        """Weights put on this machine for its engines (the starter): beside the engines,
        on the way the engine user is let through, not in the control plane's data dir."""
        return self.engines_dir.parent / "models"

    @property
    def sqlite_file(self) -> Path:
        return self.server_data_dir / "llmgw.db"

    @property
    def log_dir(self) -> Path:
        return self.run_dir / "log"

    @property
    def server_pid_file(self) -> Path:
        """Written by ``llmgw server`` while it runs; ``llmgw stop`` reads it."""
        return self.run_dir / "llmgw-server.pid"

    @property
    def agent_pid_file(self) -> Path:
        """The agent's, by the name ``node add`` gives a detached agent's too."""
        return self.run_dir / "llmgw-agent.pid"

    @property
    def mirror_pid_file(self) -> Path:
        return self.run_dir / "llmgw-mirror.pid"

    @property
    def agent_status_socket(self) -> Path:
        """The agent's read-only status socket, which the node console reads."""
        return self.run_dir / "agent-status.sock"

    @classmethod
    def under(cls, home: Path) -> Paths:
        """The layout with everything under one directory."""
        home = home.expanduser().resolve()
        return cls(
            config_dir=home / "etc",
            server_data_dir=home / "var" / "lib" / "llmgw",
            agent_data_dir=home / "var" / "lib" / "llmgw-agent",
            engines_dir=home / "opt" / "engines",
            run_dir=home / "run",
            home=home,
        )

    @classmethod
    def system(cls) -> Paths:
        """The root layout of ARCHITECTURE.md §6."""
        return cls(
            config_dir=SYSTEM_CONFIG_DIR,
            server_data_dir=Path("/var/lib/llmgw"),
            agent_data_dir=Path("/var/lib/llmgw-agent"),
            engines_dir=Path("/opt/llmgw/engines"),
            run_dir=Path("/run/llmgw"),
        )


def user_home(euid: int | None = None) -> Path:
    """The directory ``llmgw up`` uses when LLMGW_HOME is not set.

    For root, one outside /root, which the engine user may pass through.
    """
    euid = os.geteuid() if euid is None else euid
    return ROOT_UP_HOME if euid == 0 else USER_HOME_DEFAULT.expanduser()


def resolve(env: dict[str, str] | None = None) -> Paths:
    """The paths in force for this process.

    ``LLMGW_HOME`` wins. Without it, a machine set up as root
    (``/etc/llmgw/server.yaml`` or ``agent.yaml`` present) uses the system
    layout; otherwise the home ``llmgw up`` creates (``user_home``).
    """
    env = os.environ if env is None else env
    home = env.get(ENV_HOME)
    if home:
        return Paths.under(Path(home))
    system = Paths.system()
    if system.server_yaml.exists() or system.agent_yaml.exists():
        return system
    if os.geteuid() == 0 and not user_home().exists():
        return system
    return Paths.under(user_home())
