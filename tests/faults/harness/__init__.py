"""The fault suite's harness: real etcd, Patroni, PostgreSQL and HAProxy on loopback.

Async context managers, each starting the deploy/ file of its server with
loopback addresses, yielding once the server is usable, and stopping every
process it started (process groups, SIGKILL last) however the test ends:

- ``etcd_server(root)`` → ``Etcd`` (``hosts`` for Patroni)
- ``patroni_cluster(root, etcd, members=2)`` → ``PatroniCluster``: ``dsn()`` (every
  member, the writable one wanted), ``member_dsns()``, ``primary_name()``,
  ``wait_primary()``, ``switchover()``, ``stop_primary(kill=False)``,
  ``stop_member()``, ``start_member()``, ``wait_replicas_streaming()``
- ``haproxy(root, backends, check_path="/ready", proxy_protocol=True)`` → ``HAProxy``:
  ``url`` (client front), ``leader_url``, ``server_states()``, ``wait_servers_up()``; it
  sends PROXY v2 headers from ``PROXY_SOURCE``, which ``behind_haproxy(cfg)`` trusts
- ``wait_until(condition, timeout_s=…)``: the only way the suite waits.

tests/faults/conftest.py makes module-wide fixtures of them (``ha_root``,
``etcd``, ``patroni``).
"""

from tests.faults.harness.etcd import Etcd, etcd_server
from tests.faults.harness.haproxy import HAProxy, haproxy
from tests.faults.harness.patroni import Member, PatroniCluster, patroni_cluster
from tests.faults.harness.procs import HarnessError, Proc, free_port, wait_until

__all__ = [
    "Etcd",
    "HAProxy",
    "HarnessError",
    "Member",
    "PatroniCluster",
    "Proc",
    "etcd_server",
    "free_port",
    "haproxy",
    "patroni_cluster",
    "wait_until",
]
