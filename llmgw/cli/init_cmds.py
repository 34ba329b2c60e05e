"""``llmgw server init`` and ``llmgw node cert``: the commands over llmgw.setup.cluster_init.

Plain command functions; the table in llmgw/cli/main.py names them.
"""

import grp
import json
import os
import socket
import sys
from typing import Annotated, Literal, NoReturn

import typer
from pydantic import BaseModel, ValidationError

from llmgw.cli.init_words import (
    print_bundle,
    print_http,
    print_init,
    print_mirror,
    print_server_unit,
    print_setup,
)
from llmgw.cli.server_add_cmds import check_standbys, init_standbys
from llmgw.config import (
    DEFAULT_PROJECT,
    SetupConfig,
    check_name,
    dump_yaml,
    load_agent_config,
    load_server_config,
    split_host_port,
)
from llmgw.errors import LlmgwError, UsageError
from llmgw.fsutil import write_atomic
from llmgw.paths import Paths, resolve
from llmgw.present.keyfmt import parse_money
from llmgw.setup import cluster_init, starter
from llmgw.setup import plan as setup_plan
from llmgw.setup.cluster_init import InitResult
from llmgw.setup.http_init import check_http_flags, init_http
from llmgw.setup.mirror_init import init_mirror, parse_bytes
from llmgw.setup.server_unit import ensure_agent_unit, ensure_server_unit

STORE_DSN_ENV = "LLMGW_STORE_DSN"


def server_init(
    host: Annotated[
        list[str] | None,
        typer.Option(
            "--host",
            help="A DNS name or IP address nodes dial to reach this server (repeat for each). "
            "Given, it replaces the server certificate's hosts; localhost, 127.0.0.1 and ::1 "
            "are always included.",
        ),
    ] = None,
    cluster_name: Annotated[str, typer.Option("--name", help="The cluster's name.")] = "llmgw",
    agent_port: Annotated[
        int | None,
        typer.Option("--agent-port", min=1, max=65535, help="Port agents dial (default 7070)."),
    ] = None,
    admin_port: Annotated[
        int | None,
        typer.Option(
            "--admin-port", min=1, max=65535, help="Admin API port on 127.0.0.1 (default 9090)."
        ),
    ] = None,
    http_port: Annotated[
        int | None,
        typer.Option("--http-port", min=1, max=65535, help="HTTP gateway port (default 8080)."),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option("--metrics-port", min=1, max=65535, help="Metrics port (default 9091)."),
    ] = None,
    store_dsn: Annotated[
        str,
        typer.Option(
            "--store-dsn",
            envvar=STORE_DSN_ENV,
            show_envvar=True,
            help="postgresql://… for a PostgreSQL store (default: embedded SQLite). Prefer the "
            f"{STORE_DSN_ENV} environment variable: a command line is visible to every user.",
        ),
    ] = "",
    node: Annotated[
        bool | None,
        typer.Option(
            "--node/--no-node",
            help="This machine as a node too: --node writes its agent.yaml and certificate now; "
            "--no-node keeps `llmgw up` from running an agent here. Default: `llmgw up` runs one.",
        ),
    ] = None,
    node_id: Annotated[
        str | None,
        typer.Option("--node-id", help="This machine's node id (default: its host name)."),
    ] = None,
    starter_flag: Annotated[
        bool | None,
        typer.Option(
            "--starter/--no-starter",
            help="Serve the starter model on a cluster with no models. Default: when the "
            "starter extra is installed.",
        ),
    ] = None,
    project: Annotated[
        str | None,
        typer.Option(
            "--project",
            help=f"ORG/TEAM/PROJECT made at the first start (default {DEFAULT_PROJECT}).",
        ),
    ] = None,
    no_project: Annotated[
        bool, typer.Option("--no-project", help="Make no project at the first start.")
    ] = False,
    rpm: Annotated[
        int | None, typer.Option("--rpm", min=1, help="The project's requests a minute.")
    ] = None,
    tpm: Annotated[
        int | None, typer.Option("--tpm", min=1, help="The project's tokens a minute.")
    ] = None,
    budget_month: Annotated[
        str | None,
        typer.Option("--budget-month", help="The project's budget a month (e.g. 25 or 0.50)."),
    ] = None,
    admin_group: Annotated[
        str | None,
        typer.Option(
            "--admin-group",
            help="A group that may read the admin token (and so run the console) besides "
            "its owner.",
        ),
    ] = None,
    force_config: Annotated[
        bool, typer.Option("--force-config", help="Write server.yaml again from these flags.")
    ] = False,
    mirror: Annotated[
        bool,
        typer.Option(
            "--mirror",
            help="A model mirror on this machine too: mirror.yaml, its read token, "
            "mirror.urls in server.yaml and a llmgw-mirror.service unit.",
        ),
    ] = False,
    mirror_listen: Annotated[
        str,
        typer.Option(
            "--mirror-listen", help="HOST:PORT the mirror serves on (default 0.0.0.0:7080)."
        ),
    ] = "",
    mirror_max_bytes: Annotated[
        str,
        typer.Option("--mirror-max-bytes", help="The mirror's quota: bytes, or 500G, 2T."),
    ] = "",
    mirror_plain_http: Annotated[
        bool,
        typer.Option(
            "--mirror-plain-http",
            help="The mirror serves plain HTTP, not HTTPS with a certificate from the cluster "
            "CA: only behind a proxy that does its TLS.",
        ),
    ] = False,
    http_tls: Annotated[
        bool,
        typer.Option(
            "--http-tls",
            help="The gateway port serves HTTPS with a certificate from the cluster CA for "
            "this machine's names (written to the pki dir).",
        ),
    ] = False,
    http_cert: Annotated[
        str,
        typer.Option("--http-cert", help="The gateway port serves HTTPS with this PEM cert."),
    ] = "",
    http_key: Annotated[str, typer.Option("--http-key", help="The key of --http-cert (PEM).")] = "",
    trusted_proxies: Annotated[
        list[str] | None,
        typer.Option(
            "--trusted-proxy",
            help="An address or CIDR of a proxy in front of the gateway port whose word on "
            "the client is taken (X-Forwarded-For, or a PROXY header); repeat for each.",
        ),
    ] = None,
    proxy_protocol: Annotated[
        bool,
        typer.Option(
            "--proxy-protocol",
            help="Connections from the trusted proxies start with a PROXY protocol header "
            "(HAProxy's send-proxy-v2).",
        ),
    ] = False,
    standbys: Annotated[
        list[str] | None,
        typer.Option(
            "--standbys",
            help="Other machines made control planes too, standing by (server add's steps, "
            "over SSH; repeat, or comma separated). Needs a PostgreSQL store.",
        ),
    ] = None,
    standby_user: Annotated[str, typer.Option("--standby-user", help="SSH login there.")] = "",
    standby_identity: Annotated[
        str, typer.Option("--standby-identity", help="Private key to log in there with.")
    ] = "",
    accept_new_host_key: Annotated[
        bool,
        typer.Option("--accept-new-host-key", help="Trust and record a standby's new host key."),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Set this machine up as a control plane: CA, server certificate, admin token, server.yaml,
    and llmgw-server.service (enabled on a system install under systemd)."""
    # Read once; child processes started later need not see a password.
    os.environ.pop(STORE_DSN_ENV, None)
    ports = {
        name: port
        for name, port in (
            ("agent", agent_port),
            ("admin", admin_port),
            ("http", http_port),
            ("metrics", metrics_port),
        )
        if port is not None
    }
    paths = resolve()
    code = 0
    try:
        setup = _setup_from_flags(
            node=node,
            starter_flag=starter_flag,
            project=project,
            no_project=no_project,
            rpm=rpm,
            tpm=tpm,
            budget_month=budget_month,
            admin_group=admin_group,
        )
        _admin_gid(setup.admin_group)
        if node_id is not None and node is not True:
            raise UsageError("--node-id is this machine's as a node: give --node too")
        this_node = _node_id_for(node_id)
        if (mirror_listen or mirror_max_bytes or mirror_plain_http) and not mirror:
            raise UsageError(
                "--mirror-listen, --mirror-max-bytes and --mirror-plain-http are the mirror's: "
                "give --mirror"
            )
        mirror_quota = parse_bytes(mirror_max_bytes) if mirror_max_bytes else None
        http_wanted = check_http_flags(
            tls=http_tls,
            cert=http_cert,
            key=http_key,
            trusted_proxies=trusted_proxies or [],
            proxy_protocol=proxy_protocol,
        )
        if standbys:
            check_standbys(paths, standbys, store_dsn, force_config)
        # Refused before anything is written: a machine too small for what it would serve.
        _refuse_what_will_not_fit(
            paths, setup, starter_flag, ports, mirror=mirror, mirror_listen=mirror_listen
        )
        _close_admin_token(paths)
        result = cluster_init.init_server(
            paths,
            hosts=host or [],
            cluster_name=cluster_name,
            ports=ports,
            store_dsn=store_dsn,
            force_config=force_config,
        )
        recorded = _record_setup(
            paths,
            result,
            setup,
            flags_given=_setup_flags_given(
                node, starter_flag, project, no_project, rpm, tpm, budget_month, admin_group
            ),
        )
        agent = _write_node(paths, this_node, result) if node else None
        http_steps = (
            init_http(paths, http_wanted, issue=http_tls) if http_wanted is not None else []
        )
        mirrored = (
            init_mirror(
                paths,
                listen=mirror_listen,
                max_bytes=mirror_quota,
                plain_http=mirror_plain_http,
            )
            if mirror
            else None
        )
        unit = ensure_server_unit(paths, load_server_config(paths.server_yaml))
        # The local node's agent comes back at boot too, after the control plane it dials.
        agent_unit = ensure_agent_unit(paths) if agent else None
        # Every run: init has just put the token back to 0600, as a secret should be
        # unless server.yaml names a group for it.
        gid = _admin_gid(recorded.admin_group)
        if gid is not None:
            _give_admin_group(paths, gid)
    except LlmgwError as err:
        _fail(err)
    if json_output:
        out = result.model_dump(mode="json")
        out["setup"] = recorded.model_dump(mode="json")
        out["node"] = agent.model_dump(mode="json") if agent else None
        out["mirror"] = mirrored.model_dump(mode="json") if mirrored else None
        out["http"] = [s.model_dump(mode="json") for s in http_steps]
        out["server_unit"] = unit.model_dump(mode="json")
        out["agent_unit"] = agent_unit.model_dump(mode="json") if agent_unit else None
        if standbys:
            out["standbys"], code = init_standbys(
                paths, standbys, standby_user, standby_identity, accept_new_host_key, json_output
            )
        typer.echo(json.dumps(out, indent=2))
    else:
        print_init(result)
        print_server_unit(unit)
        if agent_unit is not None:
            print_server_unit(agent_unit)
        print_setup(paths, recorded, agent)
        print_http(http_steps)
        if mirrored is not None:
            print_mirror(paths, mirrored)
        if standbys:
            code = init_standbys(
                paths, standbys, standby_user, standby_identity, accept_new_host_key, json_output
            )[1]
        if unit.enabled and (agent_unit is None or agent_unit.enabled):
            typer.echo("Start it: llmgw start  (it starts at boot from now on)")
        else:
            typer.echo("Start it: llmgw up" if agent else "Start it: llmgw server")
    if code:
        raise typer.Exit(code=code)


def _setup_flags_given(*values) -> bool:
    return any(v not in (None, False) for v in values)


def node_cert(
    node_id: Annotated[str, typer.Argument(help="The node's id: its certificate's common name.")],
    control_plane: Annotated[
        list[str] | None,
        typer.Option(
            "--control-plane",
            help="HOST:PORT the node dials (repeat for each control plane). Default: the "
            "server certificate's first host and the agent port.",
        ),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Issue a node's certificate, signed by the cluster CA, with the CA beside it."""
    try:
        bundle = cluster_init.issue_node_bundle(
            resolve(), node_id, control_planes=control_plane or []
        )
    except LlmgwError as err:
        _fail(err)
    if json_output:
        typer.echo(bundle.model_dump_json(indent=2))
    else:
        print_bundle(bundle)


class LocalNode(BaseModel):
    """The agent.yaml ``server init --node`` wrote (or kept) for this machine."""

    node_id: str
    agent_yaml: str
    cert: str
    control_plane: str
    action: Literal["created", "kept"]


def _setup_from_flags(
    *,
    node: bool | None,
    starter_flag: bool | None,
    project: str | None,
    no_project: bool,
    rpm: int | None,
    tpm: int | None,
    budget_month: str | None,
    admin_group: str | None,
) -> SetupConfig:
    """The ``setup`` section the flags ask for; UsageError before anything is written."""
    if no_project and project is not None:
        raise UsageError("--project and --no-project contradict each other")
    if no_project and (rpm is not None or tpm is not None or budget_month is not None):
        raise UsageError("--rpm, --tpm and --budget-month are a project's: give --project")
    try:
        return SetupConfig(
            node=node is not False,
            starter=starter_flag is not False,
            project="" if no_project else (project or DEFAULT_PROJECT),
            rpm=rpm,
            tpm=tpm,
            budget_month_micros=parse_money(budget_month) if budget_month is not None else None,
            admin_group=admin_group or "",
        )
    except ValidationError as e:
        raise UsageError(setup_plan.validation_text(e)) from e


def _admin_gid(group: str) -> int | None:
    """The group's id, checked to exist and to be one this user may give files to."""
    if not group:
        return None
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise UsageError(
            f"there is no group {group} on this machine", hint=f"make it: groupadd {group}"
        ) from None
    if os.geteuid() != 0 and gid != os.getgid() and gid not in os.getgroups():
        raise UsageError(
            f"only root or a member of {group} may give it the admin token",
            hint="run it with sudo",
        )
    return gid


def _node_id_for(node_id: str | None) -> str:
    chosen = node_id or setup_plan.default_node_id(socket.gethostname())
    try:
        return check_name(chosen, what="node id")
    except ValueError as e:
        raise UsageError(str(e)) from e


def _refuse_what_will_not_fit(
    paths: Paths,
    setup: SetupConfig,
    starter_flag: bool | None,
    ports: dict[str, int],
    *,
    mirror: bool = False,
    mirror_listen: str = "",
) -> None:
    """The plan's own checks (memory above all), before anything is installed."""
    from llmgw.setup.run import this_machine

    plan = setup_plan.SetupPlan(
        control_plane=setup_plan.ControlPlanePart(**{f"{n}_port": p for n, p in ports.items()}),
        node=setup_plan.NodePart(on=setup.node),
        # Not said: served when the starter extra is there, as `llmgw up` does.
        starter=setup_plan.StarterPart(
            on=starter.available() if starter_flag is None else starter_flag
        ),
        admin=setup_plan.AdminPart(on=bool(setup.admin_group), group=setup.admin_group),
        mirror=_mirror_part(mirror, mirror_listen),
    )
    refusals = setup_plan.check(plan, this_machine(paths))
    if refusals:
        flags = [f for r in refusals for f in r.flags]
        hint = "nothing was installed"
        if flags:
            hint += f"; leave it out with {' or '.join(dict.fromkeys(flags))}"
        raise UsageError("; ".join(r.message for r in refusals), hint=hint)


def _mirror_part(on: bool, listen: str) -> setup_plan.MirrorPart:
    try:
        return setup_plan.MirrorPart(on=on, **({"listen": listen} if listen else {}))
    except ValidationError as e:
        raise UsageError(setup_plan.validation_text(e)) from e


def _record_setup(
    paths: Paths, result: InitResult, setup: SetupConfig, *, flags_given: bool
) -> SetupConfig:
    """Write ``setup`` into the server.yaml this run wrote; a kept one keeps its own."""
    step = next(s for s in result.steps if s.item == "server_yaml")
    cfg = load_server_config(paths.server_yaml)
    if step.action == "kept":
        if flags_given and cfg.setup != setup:
            result.notes.append(
                f"{paths.server_yaml} exists, so the setup flags (node, starter, project, "
                "admin group) were not recorded; --force-config writes it again from the flags"
            )
        return cfg.setup
    cfg.setup = setup
    write_atomic(paths.server_yaml, dump_yaml(cfg), mode=0o644)
    return setup


def _write_node(paths: Paths, node_id: str, result: InitResult) -> LocalNode:
    """agent.yaml and a node certificate for this machine's agent, dialing this control plane."""
    _, agent_port = split_host_port(load_server_config(paths.server_yaml).listen.agent)
    existed = paths.agent_yaml.exists()
    plane = f"127.0.0.1:{agent_port}"
    cluster_init.write_local_agent(paths, node_id, [plane])
    cfg = load_agent_config(paths.agent_yaml)
    if existed and cfg.node_id != node_id:
        result.notes.append(
            f"{paths.agent_yaml} exists for node {cfg.node_id}; it was kept (remove it to "
            f"make this machine node {node_id})"
        )
    return LocalNode(
        node_id=cfg.node_id,
        agent_yaml=str(paths.agent_yaml),
        cert=cfg.pki.cert or str(paths.pki_dir / "node.crt"),
        control_plane=", ".join(cfg.control_planes),
        action="kept" if existed else "created",
    )


def _give_admin_group(paths: Paths, gid: int) -> None:
    """The admin token readable by ``gid``: 0640, in a secrets folder it may enter (0750).

    The other secrets in it stay 0600, readable by their owner only.
    """
    try:
        os.chown(paths.secrets_dir, -1, gid)
        os.chmod(paths.secrets_dir, 0o750)
        os.chown(paths.admin_token_file, -1, gid)
        os.chmod(paths.admin_token_file, 0o640)
    except OSError as e:
        raise UsageError(
            f"the admin token could not be given to group {gid}: {e.strerror}",
            hint="run it with sudo",
        ) from e


def _close_admin_token(paths: Paths) -> None:
    """Put a token given to a group back to 0600 before init checks it.

    init warns of a secret readable by others and closes it; a token this
    command gave a group (server.yaml names it) is not such a mistake, and is
    given again after.
    """
    try:
        if not load_server_config(paths.server_yaml).setup.admin_group:
            return
    except LlmgwError:
        return  # no server.yaml yet, or init reports what is wrong with it
    for path, mode in ((paths.admin_token_file, 0o600), (paths.secrets_dir, 0o700)):
        if path.exists() and path.stat().st_mode & 0o077:
            os.chmod(path, mode)


def _fail(err: LlmgwError) -> NoReturn:
    print(f"error: {err.message}", file=sys.stderr)
    if err.hint:
        print(f"hint: {err.hint}", file=sys.stderr)
    raise typer.Exit(code=int(err.exit_code))
