"""``llmgw ctl project retention``: how long a project keeps stored responses, run as a user would."""

from __future__ import annotations

import json

from llmgw.errors import ExitCode
from tests.e2e.helpers import llmgw
from tests.e2e.test_cli import server  # noqa: F401  (the fixture)


def said(res) -> str:
    return " ".join(res.stderr.split())


def ok(home, *args) -> dict:
    res = llmgw(home, "ctl", *args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_a_project_keeps_responses_for_as_long_as_it_is_told_then_none(server):  # noqa: F811
    home = server
    made = ok(home, "project", "create", "--parents", "Kept/ml/search")
    assert int(made.get("retainResponsesS", made.get("retain_responses_s", 0))) == 0

    view = ok(home, "project", "retention", "Kept/ml/search", "24h")
    assert int(view.get("retainResponsesS", view.get("retain_responses_s"))) == 86400
    table = llmgw(home, "ctl", "project", "list")
    assert table.returncode == 0 and "1d" in table.stdout and "RESPONSES KEPT" in table.stdout

    view = ok(home, "project", "retention", "Kept/ml/search", "off")
    assert int(view.get("retainResponsesS", view.get("retain_responses_s", 0))) == 0


def test_a_retention_that_cannot_be_set_is_refused_in_words(server):  # noqa: F811
    home = server
    res = llmgw(home, "ctl", "project", "retention", "No/such/project", "24h")
    assert res.returncode == ExitCode.NOT_FOUND and "no project 'No/such/project'" in said(res)
    res = llmgw(home, "ctl", "project", "retention", "Acme", "24h")
    assert res.returncode == ExitCode.USAGE and "ORG/TEAM/PROJECT" in said(res)
    ok(home, "project", "create", "--parents", "Kept/ml/short")
    res = llmgw(home, "ctl", "project", "retention", "Kept/ml/short", "10s")
    assert res.returncode == ExitCode.USAGE and "from 60 s" in said(res)
    res = llmgw(home, "ctl", "project", "retention", "Kept/ml/short", "soon")
    assert res.returncode == ExitCode.USAGE and "not a duration" in said(res)
