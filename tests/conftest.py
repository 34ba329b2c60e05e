pytest_plugins = [
    "tests.pg_fixture",
    "tests.cluster_fixture",
    "tests.models_fixture",
    "tests.fakes.engines.fixtures",
    "tests.e2e.starter_up",
]

import os

# The suite runs as root in CI, where engines run as the user running the
# tests (as `llmgw up` does) and nothing makes real users on the machine:
# the one switch that lets an agent run engines as root, on purpose
# (agentd/supervisor/users.py). Tests of the refusal turn it off.
os.environ.setdefault("LLMGW_ALLOW_ROOT_ENGINES", "1")
