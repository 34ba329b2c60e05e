"""The supervisor: starts, watches, stops and adopts a node's engine processes.

It reports every change of a shard as a ShardEvent and decides nothing
itself: an engine that exits is reported "failed", and whether it is started
again is the control plane's call. The agent's own restart is not an
engine's: ``close()`` leaves engines running and the next agent's
``adopt_all()`` takes them back from their state files, restarting none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from agentd.supervisor import access, gpu_hold, health, ownership, process, scrub, state, users
from agentd.supervisor.model import (
    LaunchSpec,
    ShardEvent,
    ShardInfo,
    ShardRecord,
    ShardState,
    SupervisorError,
)
from agentd.supervisor.output import (
    LOG_LINES,
    MAX_OUTPUT_BYTES,
    LogRing,
    OutputFollower,
    open_output,
)
from agentd.supervisor.shard import Shard
from agentd.supervisor.users import resolve_engine_user
from llmgw.errors import NotFoundError

log = logging.getLogger(__name__)

EXITED_WHILE_DOWN = "the engine exited while the agent was down"
# Output lines quoted in a failure's reason: enough for the error, short
# enough for a table cell.
REASON_LINES = 5
# An adopted engine that does not answer at once has at least this long:
# one that answered before the agent's restart has only hiccuped.
ADOPTED_MIN_DEADLINE_S = 30.0
# Grace given to an engine that missed its startup deadline before SIGKILL.
DEADLINE_STOP_GRACE_S = 5.0
# How often an engine that answers is looked at again until it holds its cards.
HOLD_CHECK_INITIAL_S = 0.2
HOLD_CHECK_MAX_S = 2.0


class Supervisor:
    """Runs engine processes for replica shards and reports on them through ``on_event``."""

    def __init__(
        self,
        state_dir: Path,
        output_dir: Path,
        on_event: Callable[[ShardEvent], None],
        *,
        run_as: str | None = None,
        log_lines: int = LOG_LINES,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        poll_interval_s: float = 0.2,
        gpu_processes: gpu_hold.ReadProcesses | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.output_dir = Path(output_dir)
        self._on_event = on_event
        self._run_as = run_as
        self._log_lines = log_lines
        self._max_output_bytes = max_output_bytes
        # How often output files are read (and, without a pidfd, processes polled).
        self._poll_interval_s = poll_interval_s
        self._shards: dict[str, Shard] = {}
        self._launching: set[str] = set()
        # The probe's processes per unit (blocking). A shard given units is
        # ready only once its processes hold memory on exactly those; None:
        # nothing can tell, so answering is enough.
        self.gpu_processes = gpu_processes

    # -- asking -------------------------------------------------------------

    def running(self) -> list[ShardInfo]:
        """The shards whose engine runs now (starting or ready)."""
        return [s.info() for s in self._shards.values() if s.live]

    def get(self, shard_id: str) -> ShardInfo | None:
        """A shard this supervisor knows, running or ended; None otherwise."""
        shard = self._shards.get(shard_id)
        return shard.info() if shard else None

    def log_tail(self, shard_id: str, lines: int = LOG_LINES) -> list[str]:
        """The last ``lines`` lines of a shard's output, kept after it ends."""
        shard = self._shards.get(shard_id)
        if shard is None:
            raise NotFoundError(
                f"no shard {shard_id} on this node", hint="Check it: llmgw ctl replicas"
            )
        return shard.ring.tail(lines)

    async def owners(self, pids: Iterable[int]) -> dict[int, str]:
        """The running shard each of ``pids`` (GPU processes) belongs to; others left out."""
        live = {s.shard_id: (s.record.pid, s.record.pgid) for s in self._shards.values() if s.live}
        return await ownership.owners(pids, live)

    def share_gid(self) -> int | None:
        """The group weights and engine installs are shared with (None: engines run as us)."""
        return users.share_gid(self._run_as)

    # -- starting -----------------------------------------------------------

    async def start(self, spec: LaunchSpec) -> ShardInfo:
        """Start an engine for ``spec``; its progress arrives as events.

        A shard already running the same command line is left as it is (a
        control plane repeating itself after a reconnect restarts nothing);
        one running another command line is refused. A start that fails —
        no such program, no engine user — is reported as a "failed" event.
        """
        sid = spec.shard_id
        current = self._shards.get(sid)
        if current is not None and current.live:
            if current.record.argv_hash == spec.argv_hash:
                return current.info()
            raise SupervisorError(
                f"shard {sid} already runs another command (pid {current.record.pid})",
                hint="stop it first",
            )
        if sid in self._launching:
            raise SupervisorError(f"shard {sid} is being started already")
        self._launching.add(sid)
        try:
            return await self._launch(spec)
        finally:
            self._launching.discard(sid)

    async def _launch(self, spec: LaunchSpec) -> ShardInfo:
        out_path = self.output_dir / f"shard-{spec.shard_id}.log"
        # pid 0 until there is one: a start that fails has no process.
        record = ShardRecord.model_construct(
            version=1, shard_id=spec.shard_id, replica_id=spec.replica_id, pid=0, pgid=0,
            start_time=0.0, port=spec.port, argv_hash=spec.argv_hash, output_file=str(out_path),
            health_url=spec.health_url, started_at=time.time(),
            startup_deadline_s=spec.startup_deadline_s, user="",
            gpu_indexes=list(spec.gpu_indexes), weights_path=spec.weights_path,
        )  # fmt: skip
        shard = Shard(record, LogRing(self._log_lines), adopted=False)
        self._shards[spec.shard_id] = shard
        try:
            user = resolve_engine_user(self._run_as)
            env = process.engine_env(spec.env, user)
            if why := await asyncio.to_thread(access.first_blocked, spec.argv, env, user):
                raise SupervisorError(f"{why} ({access.share_hint(user)})")
            self.output_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = open_output(out_path)
            try:
                shard.popen = await asyncio.to_thread(process.spawn, spec, user, fd)
            finally:
                os.close(fd)  # the engine holds its own copy
            # What it was given to keep secret never reaches its log (scrub.py).
            shard.follower = OutputFollower(
                out_path, shard.ring, max_bytes=self._max_output_bytes,
                secrets=scrub.secrets_of(env, spec.secret_env),
            )  # fmt: skip
        except (SupervisorError, OSError, subprocess.SubprocessError) as e:
            reason = f"could not start {spec.argv[0]}: {getattr(e, 'strerror', None) or e}"
            shard.ring.add(reason)
            out_path.unlink(missing_ok=True)
            self._end(shard, "failed", reason, None)
            return shard.info()
        pid = shard.popen.pid
        started = await asyncio.to_thread(process.start_time, pid)
        # start_new_session: the engine leads a group whose id is its pid.
        shard.record = ShardRecord.model_validate(
            record.model_dump()
            | {"pid": pid, "pgid": pid, "start_time": started or 0.0, "user": user.name}
        )
        # Written before anything else can go wrong, so an agent that dies
        # from here on leaves an engine the next agent finds.
        try:
            await asyncio.to_thread(state.write_record, self.state_dir, shard.record)
        except OSError as e:
            # An engine no later agent could find is one nobody could stop.
            process.signal_group(pid, signal.SIGKILL)
            await process.wait_child(shard.popen, self._poll_interval_s)
            self._end(shard, "failed", f"could not write its state file: {e}", None)
            return shard.info()
        reason = f"started {Path(spec.argv[0]).name} (pid {pid}) as {user.name}"
        if user.note:
            reason += f"; {user.note}"
        self._set(shard, "starting", f"{reason}; waiting for {spec.health_url} to answer")
        self._watch(shard, spec.startup_deadline_s)
        return shard.info()

    # -- adopting -----------------------------------------------------------

    async def adopt_all(self) -> list[str]:
        """Take back the engines an earlier agent left running; the shard ids adopted.

        A shard whose engine is gone (or whose pid now belongs to another
        process) is reported failed, with its last output as context.
        """
        records, unreadable = await asyncio.to_thread(state.read_records, self.state_dir)
        for shard_id, why in unreadable.items():
            # Kept aside for whoever looks into it, out of the next agent's way.
            path = self.state_dir / f"{shard_id}.json"
            with contextlib.suppress(OSError):
                path.rename(path.with_name(f"{path.name}.unreadable"))
            self._on_event(ShardEvent(shard_id, "failed", f"{why}; its engine is not watched"))
        adopted = []
        for record in records:
            known = self._shards.get(record.shard_id)
            if known is not None and known.live:
                continue
            if await self._adopt(record):
                adopted.append(record.shard_id)
        return adopted

    async def _adopt(self, record: ShardRecord) -> bool:
        shard = Shard(record, LogRing(self._log_lines), adopted=True)
        self._shards[record.shard_id] = shard
        shard.follower = OutputFollower(
            Path(record.output_file), shard.ring, max_bytes=self._max_output_bytes, from_tail=True
        )
        if not await asyncio.to_thread(process.same_process, record.pid, record.start_time):
            reason = EXITED_WHILE_DOWN
            if await asyncio.to_thread(process.start_time, record.pid) is not None:
                reason += f" (pid {record.pid} is another process now)"
            self._end(shard, "failed", self._with_last_lines(shard, reason), None)
            return False
        # Its secrets are in its environment (its record keeps none): read
        # before its first line is.
        env = await asyncio.to_thread(process.environ, record.pid)
        shard.follower.secrets = scrub.secrets_of(env)
        # What it wrote before the restart comes first in its log.
        shard.follower.read_available()
        shard.ring.add("[adopted by a restarted agent]")
        base = f"adopted from a previous agent (pid {record.pid})"
        url = record.health_url
        answers = await health.probe_once(url) is None
        hold = await self._hold(shard) if answers else None
        if answers and (hold is None or hold.ready):
            on_cards = f"; {hold.words}" if hold is not None and hold.words else ""
            self._set(shard, "ready", f"{base}; answers {url}{on_cards}")
            self._watch(shard, None)
        else:
            left_s = record.started_at + record.startup_deadline_s - time.time()
            self._set(shard, "starting", f"{base}; waiting for {url} to answer")
            self._watch(shard, max(left_s, ADOPTED_MIN_DEADLINE_S))
        log.info("adopted shard %s (pid %s)", record.shard_id, record.pid)
        return True

    # -- watching -----------------------------------------------------------

    def _watch(self, shard: Shard, health_deadline_s: float | None) -> None:
        if shard.follower is None:
            shard.follower = OutputFollower(
                Path(shard.record.output_file), shard.ring, max_bytes=self._max_output_bytes
            )
        shard.tasks.append(asyncio.create_task(self._follow(shard)))
        shard.tasks.append(asyncio.create_task(self._wait_exit(shard)))
        if health_deadline_s is not None:
            shard.health_task = asyncio.create_task(self._wait_healthy(shard, health_deadline_s))
            shard.tasks.append(shard.health_task)

    async def _follow(self, shard: Shard) -> None:
        while shard.follower is not None:
            try:
                shard.follower.read_available()
            except OSError as e:
                # The log says why it stops here rather than going quiet.
                shard.ring.add(f"[output no longer readable: {e}]")
                return
            await asyncio.sleep(self._poll_interval_s)

    async def _wait_exit(self, shard: Shard) -> None:
        r = shard.record
        if shard.popen is not None:
            code = await process.wait_child(shard.popen, self._poll_interval_s)
        else:
            code = await process.wait_adopted(r.pid, r.start_time, self._poll_interval_s)
        shard.exit_code = code
        shard.exited.set()
        if shard.stopping or not shard.live:
            return
        # What it started and left behind (workers holding GPU memory) goes
        # with it: the group's id stays reserved while any member lives.
        # No await from here on, so a stop() arriving now finds it ended.
        process.signal_group(r.pgid, signal.SIGKILL)
        self._end(shard, "failed", self._with_last_lines(shard, process.describe_exit(code)), code)

    async def _wait_healthy(self, shard: Shard, deadline_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + deadline_s
        url = shard.record.health_url
        why = await health.wait_healthy(url, deadline_s)
        if not shard.live or shard.stopping:
            return
        if why is not None:
            reason = f"did not answer {url} within {deadline_s:g} s ({why}), so it was stopped"
            await self._fail_starting(shard, reason)
            return
        # It answers; a shard given cards must also be running on them.
        delay_s, said = HOLD_CHECK_INITIAL_S, ""
        while True:
            hold = await self._hold(shard)
            if not shard.live or shard.stopping:
                return
            if hold is None or hold.ready:
                on_cards = f"; {hold.words}" if hold is not None and hold.words else ""
                self._set(shard, "ready", f"answers {url}{on_cards}")
                return
            if hold.wrong:
                await self._fail_starting(shard, f"answers, but {hold.wrong}; it was stopped")
                return
            left_s = deadline - loop.time()
            if left_s <= 0:
                await self._fail_starting(shard, f"answers, but {hold.failed}; it was stopped")
                return
            if hold.waiting != said:  # said once per change, not at every look
                said = hold.waiting
                self._set(shard, "starting", f"answers {url}, but {said}")
            await asyncio.sleep(min(delay_s, left_s))
            delay_s = min(delay_s * 1.5, HOLD_CHECK_MAX_S)

    async def _hold(self, shard: Shard) -> gpu_hold.Hold | None:
        """What the shard holds on its cards; None when it is not to be checked."""
        r = shard.record
        if not r.gpu_indexes or self.gpu_processes is None:
            return None
        return await gpu_hold.look(self.gpu_processes, r.gpu_indexes, r.pid, r.pgid)

    async def _fail_starting(self, shard: Shard, reason: str) -> None:
        """Stop an engine that did not come up as it must, and say why."""
        shard.stopping = True
        await process.terminate_group(shard.record.pgid, shard.exited, DEADLINE_STOP_GRACE_S)
        self._end(shard, "failed", self._with_last_lines(shard, reason), shard.exit_code)

    def _with_last_lines(self, shard: Shard, reason: str) -> str:
        if shard.follower is not None:
            shard.follower.drain()
        last = [line for line in shard.ring.tail(REASON_LINES) if line.strip()]
        return f"{reason}; last output: {' | '.join(last)}" if last else reason

    # -- stopping -----------------------------------------------------------

    async def stop(self, shard_id: str, grace_s: float = 10.0) -> None:
        """Stop a shard's engine: SIGTERM to its group, SIGKILL after ``grace_s``.

        Stopping a shard that is not running does nothing. A caller cancelled
        meanwhile does not cut the stop short: half a stop leaves a process
        holding a GPU.
        """
        shard = self._shards.get(shard_id)
        if shard is None or not shard.live:
            return
        if shard.stop_task is None:
            shard.stop_task = asyncio.create_task(self._stop(shard, grace_s))
        await asyncio.shield(shard.stop_task)

    async def _stop(self, shard: Shard, grace_s: float) -> None:
        shard.stopping = True
        if shard.health_task is not None:
            shard.health_task.cancel()
        how = await process.terminate_group(shard.record.pgid, shard.exited, grace_s)
        self._end(shard, "stopped", f"stopped on request: {how}", shard.exit_code)

    async def close(self, leave_running: bool = True) -> None:
        """Stop watching. The agent's own shutdown leaves its engines running.

        Their state files stay for the next agent to adopt; with
        ``leave_running=False`` every engine is stopped first.
        """
        if not leave_running:
            live = [s.shard_id for s in self._shards.values() if s.live]
            await asyncio.gather(*(self.stop(sid) for sid in live))
        stops = [s.stop_task for s in self._shards.values() if s.stop_task is not None]
        await asyncio.gather(*stops, return_exceptions=True)
        cancelled = [t for s in self._shards.values() for t in s.cancel_tasks()]
        await asyncio.gather(*cancelled, return_exceptions=True)
        for shard in self._shards.values():
            if shard.follower is not None:
                shard.follower.close()
                shard.follower = None

    # -- recording ----------------------------------------------------------

    def _end(self, shard: Shard, final: ShardState, reason: str, exit_code: int | None) -> None:
        """Close a shard's story, once: its watchers, its files, its last event."""
        if shard.state in ("failed", "stopped"):
            return
        shard.cancel_tasks()
        if shard.follower is not None:
            shard.follower.drain()
            shard.follower.close()
            shard.follower = None
        # Its lines are in the ring; the files would only mislead the next agent.
        with contextlib.suppress(OSError):
            state.remove_record(self.state_dir, shard.shard_id)
        with contextlib.suppress(OSError):
            Path(shard.record.output_file).unlink(missing_ok=True)
        if final == "failed":
            log.warning("shard %s failed: %s", shard.shard_id, reason)
        self._set(shard, final, reason, exit_code=exit_code)

    def _set(
        self, shard: Shard, new: ShardState, reason: str, *, exit_code: int | None = None
    ) -> None:
        shard.state, shard.reason = new, reason
        r = shard.record
        pid = r.pid or None
        self._on_event(ShardEvent(r.shard_id, new, reason, pid, r.port, exit_code))
