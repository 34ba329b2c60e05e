"""Entry point of ``llmgw mirror serve``: read the tokens, run the mirror until SIGTERM or Ctrl-C.

It runs on asyncio's own event loop, not uvloop: uvloop has no sendfile, and
files sent by the kernel are what the mirror is for.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

from llmgw.errors import ConfigError
from llmgw.mirror.config import MirrorServeConfig, with_machine_tls
from llmgw.paths import Paths
from mirrord.daemon import MirrorDaemon, data_dir_of

log = logging.getLogger(__name__)


def _read(path: Path) -> str:
    return path.read_text().strip()


def read_tokens(cfg: MirrorServeConfig, paths: Paths) -> dict[str, str]:
    """The tokens mirror.yaml names (or the machine's), as MirrorDaemon takes them.

    The admin token is the mirror's own: the cluster's admin token (which
    opens the whole admin API) is refused as one, as is the read token
    (every node holds it).
    """
    read_file = Path(cfg.read_token_file or paths.mirror_read_token_file)
    if not read_file.is_file() or not _read(read_file):
        raise ConfigError(
            f"the mirror's read token {read_file} does not exist or is empty",
            hint="make it with `llmgw server init --mirror` (or `llmgw up --mirror`), "
            "or name one with --read-token-file",
        )
    read_token = _read(read_file)
    admin_file = Path(cfg.admin_token_file or paths.mirror_admin_token_file)
    admin_token = _read(admin_file) if admin_file.is_file() else ""
    if not admin_token:
        log.warning(
            "no admin token at %s: this mirror only serves (adds, removals and peers are "
            "refused); name one with --admin-token-file",
            admin_file,
        )
    elif admin_token == _cluster_admin_token(paths):
        raise ConfigError(
            f"the mirror's admin token {admin_file} is the cluster's admin token",
            hint="give the mirror one of its own: `llmgw server init --mirror` makes "
            f"{paths.mirror_admin_token_file}; name it with --admin-token-file",
        )
    elif admin_token == read_token:
        raise ConfigError(
            f"the mirror's admin token {admin_file} is its read token, which every node holds",
            hint=f"give it one of its own (`llmgw server init --mirror` makes "
            f"{paths.mirror_admin_token_file})",
        )
    tokens = {"read_token": read_token, "admin_token": admin_token}
    for key, name in (
        ("upstream_token", cfg.upstream_token_file),
        ("peer_token", cfg.peer_token_file),
    ):
        if name:
            if not Path(name).is_file():
                raise ConfigError(f"{name} ({key.replace('_', ' ')} file) does not exist")
            tokens[key] = _read(Path(name))
    return tokens


def _cluster_admin_token(paths: Paths) -> str:
    """This machine's cluster admin token, or "" (a mirror on a machine of its own)."""
    try:
        return _read(paths.admin_token_file)
    except OSError:
        return ""


def serving_config(cfg: MirrorServeConfig, paths: Paths) -> MirrorServeConfig:
    """``cfg`` as it is served: HTTPS with the machine's certificate unless plain_http,
    every TLS file there (said with the way to make it before anything binds)."""
    if cfg.plain_http:
        log.warning(
            "serving plain HTTP (plain_http): tokens and files travel in clear unless a "
            "proxy in front of this mirror does TLS"
        )
        return cfg
    cfg = with_machine_tls(cfg, paths)
    for what, name in (("certificate", cfg.tls.cert), ("key", cfg.tls.key)):
        if not Path(name).is_file():
            raise ConfigError(
                f"the mirror serves HTTPS and its {what} {name} does not exist",
                hint="issue it from the cluster CA: `llmgw server init --mirror` on the control "
                "plane (or `llmgw mirror cert --host NAME` there, for a mirror elsewhere); "
                "or set plain_http: true for a mirror behind a TLS proxy",
            )
    if cfg.tls.client_ca and not Path(cfg.tls.client_ca).is_file():
        raise ConfigError(f"the CA {cfg.tls.client_ca} (tls.client_ca) does not exist")
    return cfg


def run(cfg: MirrorServeConfig, paths: Paths) -> None:
    """Serve ``cfg`` (as serving_config made it) until SIGTERM or SIGINT (blocking)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s mirrord %(name)s: %(message)s"
        )
    tokens = read_tokens(cfg, paths)
    data_dir = data_dir_of(cfg, paths)
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
    data_dir.chmod(0o750)

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        daemon = MirrorDaemon(cfg, paths, **tokens)
        await daemon.start()
        try:
            await stop.wait()
        finally:
            await daemon.stop()

    asyncio.run(_main())
