"""The engine process supervisor: one process per replica shard, watched, stopped, adopted.

supervisor.py   Supervisor: start / stop / adopt_all / running / log_tail / close
model.py        LaunchSpec (what to run), ShardEvent (what happened), ShardInfo, ShardRecord
process.py      starting a process in its own group, signalling it, seeing it end
health.py       ready means the health endpoint answered 200
output.py       each process writes its own file (0600, emptied past 64 MiB), followed
                into an in-memory ring of the shard's last lines
scrub.py        the secrets an engine was given (and any named secret) out of its lines
state.py        <state_dir>/<shard_id>.json, what a restarted agent adopts from
users.py        the unprivileged user engines run as, and the group its files are shared with
access.py       whether that user can reach what a command line names, before it starts
ownership.py    which shard a (GPU) process belongs to
"""

from agentd.supervisor.model import (
    LaunchSpec,
    ShardEvent,
    ShardInfo,
    ShardRecord,
    ShardState,
    SupervisorError,
)
from agentd.supervisor.ownership import ProcLink, descends, owner_of, owns, process_table
from agentd.supervisor.process import describe_exit
from agentd.supervisor.supervisor import EXITED_WHILE_DOWN, Supervisor
from agentd.supervisor.users import ENGINE_USER, EngineUser, resolve_engine_user

__all__ = [
    "ENGINE_USER",
    "EXITED_WHILE_DOWN",
    "EngineUser",
    "LaunchSpec",
    "ProcLink",
    "ShardEvent",
    "ShardInfo",
    "ShardRecord",
    "ShardState",
    "Supervisor",
    "SupervisorError",
    "descends",
    "describe_exit",
    "owner_of",
    "owns",
    "process_table",
    "resolve_engine_user",
]
