"""``llmgw up --mirror``: a model mirror beside gatewayd, set up at its first start and supervised."""

from __future__ import annotations

import signal
import ssl

import httpx
import psutil
import yaml

from tests.e2e.helpers import init_on_free_ports, start, wait_until


def _child(up: psutil.Process, *tail: str) -> psutil.Process | None:
    """up's child whose command line ends in ``tail``."""
    for c in up.children():
        try:
            if c.cmdline()[-len(tail) :] == list(tail):
                return c
        except psutil.Error:  # exited (a zombie until `up` reaps it)
            continue
    return None


def _mirror_child(up: psutil.Process) -> psutil.Process | None:
    return _child(up, "mirror", "serve")


def _healthy(url: str, verify: ssl.SSLContext | bool = True) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2, verify=verify).status_code == 200
    except httpx.HTTPError:
        return False


def test_up_with_a_mirror_sets_it_up_names_it_to_the_cluster_and_restarts_it_when_killed(
    tmp_path,
):
    home = tmp_path / "home"
    init_on_free_ports(home, "--no-node", "--no-starter", "--no-project")
    up = start(home, "up", "--mirror")
    proc = psutil.Process(up.pid)
    try:
        mirror_yaml = home / "etc" / "mirror.yaml"
        wait_until(mirror_yaml.exists, timeout_s=30)
        listen = yaml.safe_load(mirror_yaml.read_text())["listen"]
        # HTTPS, its certificate from the cluster CA, which every client checks it against.
        url = f"https://127.0.0.1:{listen.rsplit(':', 1)[1]}"
        ca = ssl.create_default_context(cafile=str(home / "etc" / "pki" / "ca.crt"))
        wait_until(lambda: _healthy(url, ca), timeout_s=60)
        server = yaml.safe_load((home / "etc" / "server.yaml").read_text())
        assert server["mirror"]["urls"] == [url]

        # Reads need the read token up made; nothing is served without it.
        secrets = home / "etc" / "secrets"
        token = (secrets / "mirror-read-token").read_text().strip()
        assert httpx.get(f"{url}/v1/info", timeout=5, verify=ca).status_code == 401
        info = httpx.get(f"{url}/v1/info", headers={"Authorization": f"Bearer {token}"}, verify=ca)
        assert info.status_code == 200, info.text
        # The mirror's admin token is its own; the cluster's writes nothing there.
        cluster = (secrets / "admin-token").read_text().strip()
        assert (secrets / "mirror-admin-token").read_text().strip() != cluster
        du = httpx.get(f"{url}/v1/du", headers={"Authorization": f"Bearer {cluster}"}, verify=ca)
        assert du.status_code == 403

        # Killed once up is past starting it (gatewayd comes next: a mirror that dies
        # while up waits for it to answer is a failed start), it is started again,
        # as its service would be.
        wait_until(lambda: _child(proc, "server"), timeout_s=30)
        first = wait_until(lambda: _mirror_child(proc), timeout_s=30)
        first.send_signal(signal.SIGKILL)
        try:
            again = wait_until(
                lambda: (
                    (c := _mirror_child(proc)) and c.pid != first.pid and _healthy(url, ca) and c
                ),
                timeout_s=60,
            )
        except AssertionError as e:
            log = (home / "run" / "log" / "mirror.log").read_text(errors="replace")
            children = []
            for c in proc.children():
                try:
                    children.append((c.pid, c.status(), c.cmdline()[-3:]))
                except psutil.Error as gone:
                    children.append((c.pid, type(gone).__name__))
            alive = up.poll() is None
            up.send_signal(signal.SIGTERM)
            out, _ = up.communicate(timeout=60)
            gw_log = home / "run" / "log" / "gatewayd.log"
            gw = gw_log.read_text(errors="replace") if gw_log.exists() else "(none)"
            raise AssertionError(
                f"{e}; up alive {alive}, exit {up.returncode}; its children {children}\n"
                f"up said:\n{out[-3000:]}\nmirror.log:\n{log[-3000:]}\ngatewayd.log:\n{gw[-2000:]}"
            ) from None
        assert again.is_running()
        assert (home / "run" / "log" / "mirror.log").stat().st_size > 0
    finally:
        up.send_signal(signal.SIGTERM)
        out, _ = up.communicate(timeout=60)
    assert up.returncode == 0, out
    assert f"mirror     {url}" in out
    assert not _healthy(url, ca)
