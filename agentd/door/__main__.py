"""One engine's door as a process of its own: ``python -m agentd.door RECORD --host H [TLS files]``.

Started by the agent (agentd/door/keeper.py) in a session of its own, so
that, like the engine behind it, it outlives an agent that is killed or
restarted: a replica keeps answering while its agent is away. It prints its
port once, then serves. Its record (``RECORD``, 0600, written by the agent)
is read again on SIGHUP and every second: the keys it takes, the engine's
pid. It ends on SIGTERM, when its record is removed, or once its engine has
been gone for ``ENGINE_GONE_S`` (an engine the supervisor restarts is given
a new pid in the record well within that).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import sys
from pathlib import Path

from agentd.door.door import Door, door_context, read_record

RELOAD_EVERY_S = 1.0
ENGINE_GONE_S = 15.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _raise_open_files() -> None:
    """Every connection holds two files (the gateway's and the engine's): take all there are."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(args: argparse.Namespace) -> int:
    _raise_open_files()
    path = Path(args.record)
    record = read_record(path)
    if record is None:
        print(f"no door record at {path}", file=sys.stderr)
        return 2
    # The signals first: the agent may signal the door (SIGHUP: read the record
    # again) the moment it has its port, and SIGHUP's default would end it.
    loop = asyncio.get_running_loop()
    stop, reload = asyncio.Event(), asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload.set)
    tls = door_context(Path(args.ca), Path(args.cert), Path(args.key)) if args.cert else None
    door = Door(record, args.host, tls, plain_over_loopback=True)
    port = await door.open()
    print(port, flush=True)
    sys.stdout.close()
    gone_since: float | None = None
    mine = record
    try:
        while not stop.is_set():
            try:
                await asyncio.wait_for(reload.wait(), RELOAD_EVERY_S)
            except TimeoutError:
                pass
            reload.clear()
            if not path.exists():
                print("door: its record is gone: ending", file=sys.stderr, flush=True)
                return 0  # closed by the agent
            now = read_record(path)
            # Not readable this time (out of files under load), or a newer door's (a new
            # start of the shard, while this one's answers finish): the last one of ours holds.
            ours = now is not None and (
                now.pid == os.getpid() or (not now.pid and now.engine_key == mine.engine_key)
            )
            if ours and now is not None:
                door.set_keys(now.keys)
                mine = now
            elif now is not None and (not mine.engine_pid or not _alive(mine.engine_pid)):
                # A newer start of the shard has its own door, and this one's engine is gone.
                print("door: superseded, its engine gone: ending", file=sys.stderr, flush=True)
                return 0
            if mine.engine_pid and not _alive(mine.engine_pid):
                gone_since = gone_since if gone_since is not None else loop.time()
                if loop.time() - gone_since > ENGINE_GONE_S:
                    print(f"door: engine {mine.engine_pid} gone: ending", file=sys.stderr, flush=True)
                    return 0
            else:
                gone_since = None
        print("door: stopped (SIGTERM)", file=sys.stderr, flush=True)
        return 0
    finally:
        await door.close()


def main() -> None:
    # A SIGHUP before the loop's handler is in (the agent's first "read it again")
    # must not end the door: ignored until then.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    p = argparse.ArgumentParser(prog="python -m agentd.door", description=__doc__.splitlines()[0])
    p.add_argument("record")
    p.add_argument("--host", required=True)
    p.add_argument("--ca", default="")
    p.add_argument("--cert", default="")
    p.add_argument("--key", default="")
    sys.exit(asyncio.run(serve(p.parse_args())))


if __name__ == "__main__":
    main()
