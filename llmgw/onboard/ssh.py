"""The SSH connection to a node, and the one runner every remote command goes through.

asyncssh with the operator's own setup: keys and agent, ~/.ssh/config,
known_hosts. An unknown host key is refused unless the operator accepts new
ones (then it is recorded); a changed one is always refused. Commands run as
root, through ``sudo -n`` when the login user is not root. Files travel over
SFTP, created 0600 in a private staging folder, never on a command line.
"""

from __future__ import annotations

import hashlib
import logging
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from llmgw.errors import ExitCode
from llmgw.onboard.events import OnboardError

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 20.0
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


@dataclass(frozen=True)
class SshTarget:
    """How to reach a node; empty fields come from ~/.ssh/config and asyncssh's defaults."""

    host: str
    port: int = 0
    user: str = ""
    identity: str = ""
    known_hosts: str = ""
    accept_new_host_key: bool = False
    # The command that logs in, as the words of what to run again say it.
    command: str = "node add"

    def where(self) -> str:
        at = f"{self.user}@{self.host}" if self.user else self.host
        return f"{at}:{self.port}" if self.port else at

    @property
    def known_hosts_file(self) -> Path:
        return Path(self.known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()


@dataclass
class Ran:
    """What one remote command did."""

    argv: list[str]
    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def output(self) -> str:
        """stderr and stdout, trimmed, for messages."""
        return "\n".join(s.strip() for s in (self.stderr, self.stdout) if s.strip())


@dataclass
class NodeShell:
    """A connected node: run commands (as root) and put files there."""

    conn: asyncssh.SSHClientConnection
    target: SshTarget
    uid: int = -1
    staging: str = ""
    # Every command run, as sent (for the operator's log and for tests).
    history: list[str] = field(default_factory=list)
    host_key_recorded: str = ""

    @property
    def is_root(self) -> bool:
        return self.uid == 0

    async def run(
        self,
        argv: list[str],
        *,
        sudo: bool = True,
        env: dict[str, str] | None = None,
        timeout_s: float | None = 600.0,
    ) -> Ran:
        """Run ``argv`` on the node. ``env`` must hold no secret: it is on the command line."""
        words = [str(a) for a in argv]
        if env:
            words = ["env", *(f"{k}={v}" for k, v in env.items()), *words]
        if sudo and not self.is_root:
            words = ["sudo", "-n", "--", *words]
        command = shlex.join(words)
        self.history.append(command)
        log.debug("on %s: %s", self.target.host, command)
        try:
            res = await self.conn.run(command, check=False, timeout=timeout_s)
        except asyncssh.TimeoutError as e:
            raise OnboardError(
                f"{shlex.join(argv)} did not finish within {timeout_s:g} s on {self.target.host}",
                hint="log in and look at what it waits for",
            ) from e
        except (asyncssh.Error, OSError) as e:
            raise OnboardError(
                f"the SSH connection to {self.target.host} broke: {e}",
                hint=f"run {self.target.command} again: every step it completed is kept",
                exit_code=ExitCode.UNREACHABLE,
            ) from e
        status = res.exit_status if res.exit_status is not None else 255
        return Ran(list(argv), status, _text(res.stdout), _text(res.stderr))

    async def put(self, data: bytes, name: str) -> str:
        """Write ``data`` into the staging folder as ``name`` (0600 from creation); its path."""
        path = f"{self.staging}/{name}"
        try:
            async with self.conn.start_sftp_client() as sftp:
                attrs = asyncssh.SFTPAttrs(permissions=0o600)
                async with sftp.open(path, "wb", attrs) as f:
                    await f.write(data)
        except (asyncssh.Error, OSError) as e:
            raise OnboardError(
                f"could not copy {name} to {self.target.host} over SFTP: {e}",
                hint="check that the node's sshd allows SFTP (Subsystem sftp in sshd_config)",
            ) from e
        return path

    async def put_files(self, files: list[Path], folder: str) -> None:
        """Copy local files into ``folder`` (made under staging) over SFTP, 0600."""
        try:
            async with self.conn.start_sftp_client() as sftp:
                await sftp.makedirs(folder, exist_ok=True)
                for f in files:
                    attrs = asyncssh.SFTPAttrs(permissions=0o600)
                    async with sftp.open(f"{folder}/{f.name}", "wb", attrs) as out:
                        await out.write(f.read_bytes())
        except (asyncssh.Error, OSError) as e:
            raise OnboardError(
                f"could not copy files to {self.target.host} over SFTP: {e}",
                hint="check the node's free space in /tmp and that sshd allows SFTP",
            ) from e

    async def close(self) -> None:
        if self.staging:
            try:
                await self.run(["rm", "-rf", "--", self.staging], sudo=False, timeout_s=30)
            except OnboardError:
                pass
        self.conn.close()
        await self.conn.wait_closed()


async def connect(target: SshTarget) -> NodeShell:
    """Log in to the node and check root or passwordless sudo; errors say what to do."""
    conn = await _open(target)
    shell = NodeShell(conn, target)
    try:
        shell.host_key_recorded = getattr(conn, "_llmgw_recorded", "")
        ran = await shell.run(["id", "-u"], sudo=False, timeout_s=30)
        if not ran.ok or not ran.stdout.strip().isdigit():
            raise OnboardError(
                f"`id -u` failed on {target.host}: {ran.output or 'no output'}",
                hint="the login user needs a POSIX shell on the node",
            )
        shell.uid = int(ran.stdout.strip())
        if not shell.is_root:
            sudo = await shell.run(["sudo", "-n", "true"], sudo=False, timeout_s=30)
            if not sudo.ok:
                user = target.user or "the login user"
                raise OnboardError(
                    f"{user} on {target.host} is not root and cannot use sudo without a "
                    f"password ({sudo.output or 'sudo -n true failed'})",
                    hint=f"log in as root (--user root), or let {user} use sudo without a "
                    f"password: echo '{user} ALL=(ALL) NOPASSWD: ALL' | sudo tee "
                    f"/etc/sudoers.d/llmgw-{user} && sudo chmod 0440 /etc/sudoers.d/llmgw-{user}",
                    exit_code=ExitCode.UNAUTHENTICATED,
                )
        made = await shell.run(
            ["mktemp", "-d", "/tmp/llmgw-onboard.XXXXXXXX"], sudo=False, timeout_s=30
        )
        if not made.ok:
            raise OnboardError(
                f"could not make a staging folder in /tmp on {target.host}: {made.output}",
                hint="check that /tmp on the node exists and is writable",
            )
        shell.staging = made.stdout.strip()
    except BaseException:
        conn.close()
        raise
    return shell


async def _open(target: SshTarget) -> asyncssh.SSHClientConnection:
    known_file = target.known_hosts_file
    known = _read_known_hosts(known_file)
    options: dict = {"connect_timeout": CONNECT_TIMEOUT_S}
    if target.port:
        options["port"] = target.port
    if target.user:
        options["username"] = target.user
    if target.identity:
        # Only that key, as ssh -o IdentitiesOnly=yes -i does.
        options["client_keys"] = [str(Path(target.identity).expanduser())]
        options["agent_path"] = None
    try:
        return await asyncssh.connect(target.host, known_hosts=known, **options)
    except asyncssh.HostKeyNotVerifiable as e:
        if _has_key_for(known, target):
            raise OnboardError(
                f"the host key of {target.host} is not the one recorded in {known_file}: "
                "the machine was reinstalled, or something is in the way",
                hint=f"if it was reinstalled, forget the old key (ssh-keygen -R {target.host} "
                f"-f {known_file}) and run {target.command} again with --accept-new-host-key",
                exit_code=ExitCode.UNAUTHENTICATED,
            ) from e
        if not target.accept_new_host_key:
            port = f"-p {target.port} " if target.port else ""
            raise OnboardError(
                f"the host key of {target.host} is unknown (not in {known_file})",
                hint=f"check its fingerprint (ssh-keyscan {port}{target.host} | ssh-keygen -lf -) "
                "against the machine's own (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), "
                "then run again with --accept-new-host-key to record it",
                exit_code=ExitCode.UNAUTHENTICATED,
            ) from e
    except Exception as e:
        raise _connect_error(target, e) from e
    # A new host, and the operator accepts new keys: connect, then record the key.
    try:
        conn = await asyncssh.connect(target.host, known_hosts=None, **options)
    except Exception as e:
        raise _connect_error(target, e) from e
    key = conn.get_server_host_key()
    if key is not None:
        line = _known_hosts_line(target, key)
        known_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with known_file.open("a") as f:
            f.write(line + "\n")
        conn._llmgw_recorded = _fingerprint(key)  # type: ignore[attr-defined]
    return conn


def _connect_error(target: SshTarget, e: BaseException) -> OnboardError:
    where = target.where()
    if isinstance(e, asyncssh.PermissionDenied):
        key = f"the key {target.identity}" if target.identity else "your SSH keys and agent"
        user = target.user or "your user"
        return OnboardError(
            f"{target.host} refused to let {user} log in with {key}",
            hint=f"add the public key to ~{user}/.ssh/authorized_keys on the node "
            f"(ssh-copy-id {'-i ' + target.identity + ' ' if target.identity else ''}{where}), "
            "or name the right one with --identity and --user",
            exit_code=ExitCode.UNAUTHENTICATED,
        )
    if isinstance(e, (OSError, TimeoutError, asyncssh.ConnectionLost)):
        why = getattr(e, "strerror", None) or str(e) or e.__class__.__name__
        return OnboardError(
            f"cannot reach {where} over SSH: {why}",
            hint="check the name or address, that sshd runs there, and the port (--port)",
            exit_code=ExitCode.UNREACHABLE,
        )
    if isinstance(e, (asyncssh.Error, asyncssh.KeyImportError, ValueError)):
        return OnboardError(
            f"SSH to {where} failed: {e}",
            hint="try `ssh` with the same user, port and key to see what the node says",
            exit_code=ExitCode.UNREACHABLE,
        )
    return OnboardError(f"SSH to {where} failed: {e!r}")


def _read_known_hosts(path: Path) -> asyncssh.SSHKnownHosts:
    try:
        return asyncssh.import_known_hosts(path.read_text())
    except FileNotFoundError:
        return asyncssh.import_known_hosts("")
    except (OSError, ValueError) as e:
        raise OnboardError(
            f"cannot read {path}: {e}", hint="fix or move the file, or give --known-hosts FILE"
        ) from e


def _has_key_for(known: asyncssh.SSHKnownHosts, target: SshTarget) -> bool:
    keys, ca_keys, *_ = known.match(target.host, "", target.port or None)
    return bool(keys or ca_keys)


def _known_hosts_line(target: SshTarget, key: asyncssh.SSHKey) -> str:
    name = target.host if target.port in (0, 22) else f"[{target.host}]:{target.port}"
    alg, blob = key.export_public_key("openssh").decode().split()[:2]
    return f"{name} {alg} {blob}"


def _fingerprint(key: asyncssh.SSHKey) -> str:
    return key.get_fingerprint("sha256")


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
