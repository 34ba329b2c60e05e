pytest_plugins = [
    "tests.pg_fixture",
    "tests.cluster_fixture",
    "tests.models_fixture",
    "tests.fakes.engines.fixtures",
    "tests.e2e.starter_up",
    "tests.xdist_schedule",
    "tests.hygiene",
]

import os

# The suite runs as root in CI, where engines run as the user running the
# tests (as `llmgw up` does) and nothing makes real users on the machine:
# the one switch that lets an agent run engines as root, on purpose
# (agentd/supervisor/users.py). Tests of the refusal turn it off.
os.environ.setdefault("LLMGW_ALLOW_ROOT_ENGINES", "1")

# One terminal width for every test, whatever runs them: rich reads COLUMNS
# when a Console is made (llmgw's are made at import), pytest sets it only
# where it has a terminal, and a worker of pytest-xdist has none (80
# columns). Tests that read the CLI's tables in process then saw their rows
# wrapped or not by which test happened to import the CLI first.
os.environ["COLUMNS"] = "200"
