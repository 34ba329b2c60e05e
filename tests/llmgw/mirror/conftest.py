"""Real mirror daemons for the client's tests (the fixtures of tests/mirrord)."""

from tests.mirrord.conftest import mirror, start_mirror  # noqa: F401
