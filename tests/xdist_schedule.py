"""How the suite's files are dealt to pytest-xdist workers (scripts/test.sh runs ``-n N``).

As ``--dist loadfile`` does, a file's tests go to one worker, in order, so a
module's fixtures are made once. Two changes:

- Files that use one session-wide cluster (``SHARED_FIXTURES``: one
  ``llmgw up`` serving the real llama.cpp starter) go to the same worker, so
  that cluster starts once in the run, not once on every worker that drew
  one of them.
- Files marked ``pytest.mark.one_worker("NAME")`` go to the same worker as
  every other file of that NAME, one after another: tests that change one
  thing of the whole machine (its users) and tests that read it.
- The slow kinds of file (end-to-end, benchmarks, integration) are dealt
  first: started last, one of them alone would hold the whole run up at its
  end while the other workers sit idle.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Session fixtures a file may share with others on one worker.
SHARED_FIXTURES = ("starter_gateway",)
ONE_WORKER = re.compile(r"""mark\.one_worker\(\s*["']([^"']+)["']""")
# Dealt in this order; anything else after them. Within one kind, the files
# with the most tests first (xdist's own order).
SLOW_FIRST = ("tests/e2e/", "tests/benchmarks/", "tests/integration/")


def _shared_group(path: str, cache: dict[str, str]) -> str:
    if path not in cache:
        try:
            text = (ROOT / path).read_text(encoding="utf-8")
        except OSError:
            text = ""
        used = ONE_WORKER.findall(text) + [f for f in SHARED_FIXTURES if f in text]
        cache[path] = f"shared:{used[0]}" if used else path
    return cache[path]


def _rank(scope: str) -> int:
    if scope.startswith("shared:"):
        return 0  # the longest unit of all: it holds several slow files
    for i, prefix in enumerate(SLOW_FIRST):
        if scope.startswith(prefix):
            return i + 1
    return len(SLOW_FIRST) + 1


def make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedClusterScheduling(LoadScopeScheduling):
        def __init__(self, config, log=None):
            super().__init__(config, log)
            self._groups: dict[str, str] = {}
            self._ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return _shared_group(nodeid.split("::", 1)[0], self._groups)

        def _assign_work_unit(self, node) -> None:
            if not self._ordered:
                # The queue is whole by the first assignment: deal slow kinds first.
                self._ordered = True
                units = sorted(self.workqueue.items(), key=lambda item: _rank(item[0]))
                self.workqueue.clear()
                self.workqueue.update(units)
            super()._assign_work_unit(node)

    return SharedClusterScheduling(config, log)


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    # Only for the suite's own way of running (scripts/test.sh: --dist loadfile).
    if config.getoption("dist", None) != "loadfile":
        return None
    return make_scheduler(config, log)
