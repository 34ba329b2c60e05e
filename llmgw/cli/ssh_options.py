"""The options every command that logs in to another machine over SSH takes, said once.

``llmgw node add HOST`` and ``llmgw server add HOST`` reach the machine the same
way and install llmgw there the same way; their help reads the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmgw.onboard import SshTarget

Host = Annotated[str, typer.Argument(help="The machine: a name or address SSH reaches.")]
User = Annotated[
    str, typer.Option("--user", help="SSH login (default: ~/.ssh/config, then yours).")
]
Port = Annotated[
    int,
    typer.Option(
        "--port",
        min=0,
        max=65535,
        show_default=False,
        help="SSH port (default: ~/.ssh/config, then 22).",
    ),
]
Identity = Annotated[
    str, typer.Option("--identity", help="Private key to log in with (only that key).")
]
AcceptNewHostKey = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-key",
        help="Trust and record the host key of a host not yet in known_hosts.",
    ),
]
KnownHosts = Annotated[
    str, typer.Option("--known-hosts", help="known_hosts file (default ~/.ssh/known_hosts).")
]
Wheelhouse = Annotated[
    str,
    typer.Option(
        "--wheelhouse",
        help="Install dependencies from this folder of wheels, not PyPI (default: the "
        "cluster's mirror, where server.yaml names one; else PyPI).",
    ),
]


def target(
    host: str, user: str, port: int, identity: str, known_hosts: str, accept_new_host_key: bool
) -> SshTarget:
    return SshTarget(
        host=host,
        port=port,
        user=user,
        identity=identity,
        known_hosts=known_hosts,
        accept_new_host_key=accept_new_host_key,
    )


def wheelhouse_problem(wheelhouse: str) -> str:
    """Why ``--wheelhouse`` cannot be used ("" when it can)."""
    if wheelhouse and not Path(wheelhouse).is_dir():
        return f"--wheelhouse {wheelhouse} is not a folder"
    return ""
