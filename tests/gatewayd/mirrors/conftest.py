"""Real mirror daemons for the control plane's tests (the fixtures of tests/mirrord)."""

from tests.mirrord.conftest import mirror, start_mirror  # noqa: F401
