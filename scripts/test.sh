#!/usr/bin/env bash
# Runs every check llmgw has, on a fresh clone or an existing checkout:
# installs what the tests need, checks the generated gRPC code is in step with
# the .proto files, checks the import rules, then runs the test suite.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]"

# The store tests run against a real PostgreSQL; install it where it is missing.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing PostgreSQL for the store tests"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "PostgreSQL is not installed; its tests will be skipped (install the postgresql package)" >&2
  fi
fi

# The console's real-terminal test drives llmgw in tmux; install it where it is missing.
if ! command -v tmux >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing tmux for the console's terminal test"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null
  else
    echo "tmux is not installed; the console's terminal test will be skipped (install the tmux package)" >&2
  fi
fi

# `llmgw node add`'s end-to-end test onboards a real OpenSSH sshd that it runs
# in a network namespace of its own; install the server where it is missing.
# Only its binary is wanted: the package's postinst would start sshd on the
# host's port 22 (invoke-rc.d ssh start), so a policy-rc.d refuses every start
# during the install, and sshd_not_to_be_run keeps the ssh service from ever
# starting here (both the init script and the systemd unit honour it).
if [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing openssh-server for node add's end-to-end test (the ssh service stays off)"
    policy=/usr/sbin/policy-rc.d
    own_policy=
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
    fi
    mkdir -p /etc/ssh && touch /etc/ssh/sshd_not_to_be_run
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null
    if [ -n "$own_policy" ]; then rm -f "$policy"; fi
    if [ -d /run/systemd/system ]; then
      systemctl disable --now -q ssh.service ssh.socket 2>/dev/null || true
    fi
  else
    echo "openssh-server is not installed; node add's end-to-end test will be skipped (install the openssh-server package)" >&2
  fi
fi

# The same test makes its namespace and veth pair with iproute2's ip.
if ! command -v ip >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing iproute2 for node add's end-to-end test"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
  else
    echo "iproute2 is not installed; node add's end-to-end test will be skipped" >&2
  fi
fi

# The mirror's benchmark serves the same file beside nginx; its smoke test needs both.
if ! [ -x /usr/sbin/nginx ] || ! command -v curl >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing nginx-light and curl for the mirror benchmark's smoke test (no service started)"
    policy=/usr/sbin/policy-rc.d
    own_policy=
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light curl >/dev/null
    if [ -n "$own_policy" ]; then rm -f "$policy"; fi
  else
    echo "nginx or curl is missing; the mirror benchmark's smoke test will be skipped" >&2
  fi
fi

# The fault suite (tests/faults) runs etcd, Patroni and HAProxy on loopback with
# files of its own; keepalived's example is checked with keepalived's own checker.
# None of their services is started: a policy-rc.d refuses every start meanwhile.
if ! [ -x /usr/bin/patroni ] || ! [ -x /usr/bin/etcd ] || ! [ -x /usr/sbin/haproxy ] || ! [ -x /usr/sbin/keepalived ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing patroni, etcd-server, haproxy and keepalived for the fault suite (no service started)"
    policy=/usr/sbin/policy-rc.d
    own_policy=
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=1
    fi
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq patroni etcd-server haproxy keepalived >/dev/null
    if [ -n "$own_policy" ]; then rm -f "$policy"; fi
  else
    echo "patroni, etcd-server or haproxy is missing; the fault suite will be skipped" >&2
  fi
fi

echo "== generated code matches proto/*.proto"
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
scripts/gen_proto.sh "$gen" >/dev/null
diff -r -x '*.proto' -x '__pycache__' -x '__init__.py' "$gen" proto
diff "$gen/llmgw/v1/__init__.py" proto/llmgw/v1/__init__.py
echo "ok"

echo "== import rules"
.venv/bin/lint-imports

echo "== lint"
.venv/bin/ruff check .

echo "== tests"
# Most of the suite waits on processes and sockets, not on the CPU, so it runs
# on more workers than the machine has cores (scripts/test_workers.py says how
# many, from the cores and the memory), each given whole test files (a file's
# tests share its fixtures and run in order). The fault suite (tests/faults)
# measures how long a failover takes, so it runs afterwards on a machine it
# has to itself. LLMGW_TEST_WORKERS=N chooses N workers; 0 runs everything in
# this process alone, in one go.
workers=${LLMGW_TEST_WORKERS:-$(.venv/bin/python scripts/test_workers.py)}
if [ "$workers" = 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
echo "== tests on $workers workers"
rc=0
.venv/bin/python -m pytest -n "$workers" --dist loadfile -m "not alone" "$@" || rc=$?
echo "== tests that run alone (the fault suite)"
alone=0
.venv/bin/python -m pytest -m alone "$@" || alone=$?
# 5 is "no tests ran": what was asked for held none of that group (a path
# given), which is only wrong when neither part ran anything.
if [ "$rc" = 5 ] && [ "$alone" = 0 ]; then rc=0; fi
if [ "$alone" = 5 ] && [ "$rc" != 5 ]; then alone=0; fi
if [ "$rc" != 0 ]; then exit "$rc"; fi
exit "$alone"
