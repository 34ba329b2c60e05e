"""``llmgw mirror serve``: run a model mirror (mirrord) on this machine.

Its settings come from mirror.yaml (``--config``, default the machine's),
and every key is also a flag that wins over the file. What the flags make is
checked as mirror.yaml would be, so a bad flag is said in the same words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from llmgw import pidfile
from llmgw.errors import ConfigError, LlmgwError, UsageError
from llmgw.mirror.config import MirrorServeConfig, load_mirror_config
from llmgw.paths import Paths, resolve
from llmgw.present import output
from llmgw.setup.mirror_init import parse_bytes

app = typer.Typer(help="The model mirror: weights and engine builds for the cluster.")


def serve_config(
    base: MirrorServeConfig,
    *,
    listen: str = "",
    data_dir: str = "",
    upstream: str | None = None,
    upstream_token_file: str = "",
    peers: list[str] | None = None,
    max_bytes: str = "",
    read_token_file: str = "",
    admin_token_file: str = "",
    peer_token_file: str = "",
    sync_interval_s: float | None = None,
    tls_cert: str = "",
    tls_key: str = "",
    client_ca: str = "",
    plain_http: bool = False,
) -> MirrorServeConfig:
    """mirror.yaml's settings with the flags given put over them (peers: the flags' list)."""
    data = base.model_dump(mode="json")
    given = {
        "listen": listen,
        "data_dir": data_dir,
        "upstream_token_file": upstream_token_file,
        "read_token_file": read_token_file,
        "admin_token_file": admin_token_file,
        "peer_token_file": peer_token_file,
    }
    data.update({k: v for k, v in given.items() if v})
    if upstream is not None:
        # "" is a setting of its own: an offline mirror with no upstream.
        data["upstream"] = upstream
    if peers:
        data["peers"] = peers
    if max_bytes:
        data["max_bytes"] = parse_bytes(max_bytes)
    if sync_interval_s is not None:
        data["sync_interval_s"] = sync_interval_s
    tls = {"cert": tls_cert, "key": tls_key, "client_ca": client_ca}
    data["tls"].update({k: v for k, v in tls.items() if v})
    if plain_http:
        data["plain_http"] = True
    try:
        cfg = MirrorServeConfig.model_validate(data)
    except ValidationError as e:
        words = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg'].removeprefix('Value error, ')}"
            for err in e.errors()
        )
        raise UsageError(words, hint="see llmgw mirror serve --help") from e
    if bool(cfg.tls.cert) != bool(cfg.tls.key):
        raise UsageError(
            "HTTPS needs both a certificate and its key",
            hint="give --tls-cert and --tls-key together (or tls: cert and key in mirror.yaml)",
        )
    if cfg.tls.client_ca and not cfg.tls.cert:
        raise UsageError(
            "client certificates are checked over HTTPS only",
            hint="give --tls-cert and --tls-key with --client-ca",
        )
    return cfg


def check_files(cfg: MirrorServeConfig, paths: Paths) -> None:
    """The files the settings name exist: said before the daemon starts, with the way out."""
    read = Path(cfg.read_token_file or paths.mirror_read_token_file)
    if not read.exists():
        raise ConfigError(
            f"the mirror's read token {read} does not exist",
            hint="make it with llmgw server init --mirror (or llmgw up --mirror), "
            "or name one with --read-token-file",
        )
    named = {
        "--upstream-token-file": cfg.upstream_token_file,
        "--peer-token-file": cfg.peer_token_file,
        "--admin-token-file": cfg.admin_token_file,
        "--tls-cert": cfg.tls.cert,
        "--tls-key": cfg.tls.key,
        "--client-ca": cfg.tls.client_ca,
    }
    for flag, name in named.items():
        if name and not Path(name).exists():
            raise ConfigError(f"{name} ({flag}) does not exist")


@app.command("serve")
def serve(
    config: Annotated[
        Path | None,
        typer.Option("--config", help="mirror.yaml to use (default: the machine's)."),
    ] = None,
    listen: Annotated[
        str, typer.Option("--listen", help="HOST:PORT to serve on (default 0.0.0.0:7080).")
    ] = "",
    data_dir: Annotated[
        str,
        typer.Option(
            "--data-dir", help="Where blobs and snapshots live (default /var/lib/llmgw-mirror)."
        ),
    ] = "",
    upstream: Annotated[
        str | None,
        typer.Option(
            "--upstream",
            help="The hub hf: sources are pulled from (default https://huggingface.co; "
            "'' for none: an offline mirror).",
        ),
    ] = None,
    upstream_token_file: Annotated[
        str, typer.Option("--upstream-token-file", help="A file holding the upstream's token.")
    ] = "",
    peer: Annotated[
        list[str] | None,
        typer.Option(
            "--peer",
            help="Another mirror to replicate with, http(s)://HOST:PORT (repeat for each).",
        ),
    ] = None,
    max_bytes: Annotated[
        str, typer.Option("--max-bytes", help="A quota: bytes, or 100G, 2T (default: the disk).")
    ] = "",
    read_token_file: Annotated[
        str,
        typer.Option(
            "--read-token-file", help="The token reads take (default <secrets>/mirror-read-token)."
        ),
    ] = "",
    admin_token_file: Annotated[
        str,
        typer.Option(
            "--admin-token-file",
            help="The token writes take: the mirror's own (default <secrets>/mirror-admin-token).",
        ),
    ] = "",
    peer_token_file: Annotated[
        str,
        typer.Option(
            "--peer-token-file", help="The token shown to peers (default the read token)."
        ),
    ] = "",
    sync_interval: Annotated[
        float | None,
        typer.Option("--sync-interval", min=0.001, help="Seconds between peer syncs (default 30)."),
    ] = None,
    tls_cert: Annotated[
        str,
        typer.Option(
            "--tls-cert", help="The HTTPS certificate (default <pki>/mirror.crt, the cluster CA's)."
        ),
    ] = "",
    tls_key: Annotated[
        str, typer.Option("--tls-key", help="The certificate's key (default <pki>/mirror.key).")
    ] = "",
    client_ca: Annotated[
        str,
        typer.Option(
            "--client-ca",
            help="Let clients with a certificate this CA signed read (default the cluster CA: "
            "its nodes).",
        ),
    ] = "",
    plain_http: Annotated[
        bool,
        typer.Option(
            "--plain-http",
            help="Serve plain HTTP, not HTTPS: only behind a proxy that does the TLS.",
        ),
    ] = False,
) -> None:
    """Run a model mirror until Ctrl-C or SIGTERM."""
    paths = resolve()
    try:
        if config is not None and not config.exists():
            raise ConfigError(f"{config} does not exist", hint="give the mirror.yaml to use")
        base = load_mirror_config(config or paths.mirror_yaml)
        cfg = serve_config(
            base,
            listen=listen,
            data_dir=data_dir,
            upstream=upstream,
            upstream_token_file=upstream_token_file,
            peers=peer,
            max_bytes=max_bytes,
            read_token_file=read_token_file,
            admin_token_file=admin_token_file,
            peer_token_file=peer_token_file,
            sync_interval_s=sync_interval,
            tls_cert=tls_cert,
            tls_key=tls_key,
            client_ca=client_ca,
            plain_http=plain_http,
        )
        check_files(cfg, paths)
        from mirrord.main import run, serving_config

        cfg = serving_config(cfg, paths)

        with pidfile.held(paths.mirror_pid_file):
            run(cfg, paths)
    except KeyboardInterrupt:
        pass
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None


@app.command("cert")
def cert(
    host: Annotated[
        list[str] | None,
        typer.Option(
            "--host",
            help="A DNS name or IP address the mirror is reached at (repeat for each).",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Issue a certificate from the cluster CA for a mirror on another machine (run it on the
    control plane; a mirror set up with server init --mirror has its own already)."""
    from llmgw.setup.mirror_init import issue_mirror_bundle

    paths = resolve()
    try:
        bundle = issue_mirror_bundle(paths, host or [])
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    if json_output:
        typer.echo(bundle.model_dump_json(indent=2))
        return
    typer.echo(f"Issued the mirror's certificate in {bundle.dir}:")
    typer.echo(f"  for {', '.join(bundle.hosts)}, until {bundle.not_after:%Y-%m-%d}")
    typer.echo(f"  SHA-256 {bundle.fingerprint_sha256}")
    typer.echo(
        "Copy mirror.crt, mirror.key and ca.crt to the mirror's machine with its tokens "
        f"({paths.mirror_read_token_file.name}, {paths.mirror_admin_token_file.name} from "
        f"{paths.secrets_dir}), then start it: llmgw mirror serve --tls-cert mirror.crt "
        "--tls-key mirror.key --client-ca ca.crt --read-token-file mirror-read-token "
        "--admin-token-file mirror-admin-token"
    )
