"""The checks a machine being made a control plane gets (``llmgw server add``'s doctor step).

The probe is node add's (llmgw/onboard/probe.py), run the same way; the
checks are those that matter to a control plane: its OS and Python, room
for its usage journal, its clock, whether systemd runs it, and above all
whether it reaches the shared PostgreSQL store. No GPU, driver or package
checks: a control plane runs no engine.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import parse_qs, urlsplit

from llmgw.onboard.checks import NodeFacts, Reach, check_clock
from llmgw.setup.doctor_checks import GIB, Check, check_os, check_python

# The usage journal and the files clients upload live in the data dir; 1 GiB
# holds days of usage rows, 10 GiB leaves room for uploaded batch files.
DISK_FAIL_BYTES = 1 * GIB
DISK_WARN_BYTES = 10 * GIB
POSTGRES_PORT = 5432


def store_address(dsn: str) -> str:
    """HOST:PORT of a PostgreSQL DSN, as the probe dials it; "" for a unix socket or none.

    A DSN naming loopback or a socket directory is this machine's store, which
    another machine cannot reach under that name: "" tells the caller so.
    """
    try:
        parts = urlsplit(dsn)
        host = parts.hostname or ""
        port = parts.port or POSTGRES_PORT
    except ValueError:
        return ""
    query_host = parse_qs(parts.query).get("host", [""])[0]
    if query_host and not query_host.startswith("/"):
        host = query_host
    if not host or _loopback(host) or query_host.startswith("/"):
        return ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def server_checks(facts: NodeFacts) -> list[Check]:
    """Every check for a machine becoming a control plane, in the order they are shown.

    ``facts.reach`` holds the store's address (the probe dialled it from there).
    """
    host = facts.host()
    checks = [
        check_os(host),
        check_python(facts.python_version or [0, 0, 0]),
        check_disk(facts),
        check_clock(facts.clock_offset_s),
        check_systemd(facts),
    ]
    checks.extend(check_store_reach(r) for r in facts.reach)
    return checks


def check_disk(facts: NodeFacts) -> Check:
    free = facts.disk_free_bytes
    detail = f"{free / GIB:.1f} GiB free for {facts.data_dir or facts.disk_path}"
    fix = "free space on that disk: the usage journal and uploaded batch files are kept there"
    if free < DISK_FAIL_BYTES:
        return Check(name="disk", status="fail", detail=f"{detail} (needs 1 GiB)", fix=fix)
    if free < DISK_WARN_BYTES:
        return Check(name="disk", status="warn", detail=f"{detail} (10 GiB advised)", fix=fix)
    return Check(name="disk", status="ok", detail=detail)


def check_systemd(facts: NodeFacts) -> Check:
    if facts.systemd:
        return Check(
            name="systemd", status="ok", detail="the control plane runs as llmgw-server.service"
        )
    return Check(
        name="systemd",
        status="warn",
        detail="no systemd here (no /run/systemd/system): the control plane is started "
        "detached with a pidfile, and nothing starts it again after a crash or a reboot",
        fix="start it from the machine's own init system at boot (llmgw start); "
        "server add starts it again",
    )


def check_store_reach(r: Reach) -> Check:
    if r.ok:
        return Check(name="store", status="ok", detail=f"PostgreSQL at {r.address} reachable")
    host, _, port = r.address.rpartition(":")
    return Check(
        name="store",
        status="fail",
        detail=f"the machine cannot reach the store (PostgreSQL) at {r.address} ({r.error})",
        fix=f"let it reach TCP port {port} on {host.strip('[]')} (firewall, listen_addresses "
        "and pg_hba.conf on the database), or give the address it reaches: --store-dsn "
        "postgresql://…",
    )
