"""``llmgw ctl org|team|project`` and ``keys rotate|limits``, run as a user would."""

from __future__ import annotations

import json

from llmgw.errors import ExitCode
from tests.e2e.helpers import llmgw
from tests.e2e.test_cli import server  # noqa: F401  (the fixture)


def said(res) -> str:
    """stderr as one line (the terminal wraps long messages)."""
    return " ".join(res.stderr.split())


def ok(home, *args) -> dict:
    res = llmgw(home, "ctl", *args, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_the_tree_is_made_renamed_and_emptied_from_the_cli(server):  # noqa: F811
    home = server
    assert ok(home, "org", "create", "Acme")["path"] == "Acme"
    ok(home, "team", "create", "Acme/ml")
    project = ok(home, "project", "create", "Acme/ml/search")
    assert (project["kind"], project["keys"]) == ("project", 0)

    res = llmgw(home, "ctl", "project", "create", "Other/x/y")
    assert res.returncode == ExitCode.NOT_FOUND
    assert "no organization 'Other'" in said(res) and "--parents" in said(res)
    res = llmgw(home, "ctl", "org", "create", "Acme")
    assert res.returncode == ExitCode.CONFLICT and "already exists" in said(res)
    res = llmgw(home, "ctl", "team", "create", "Acme")
    assert res.returncode == ExitCode.USAGE and "ORG/TEAM" in said(res)

    key = ok(home, "keys", "create", "--project", "Acme/ml/search", "--rpm", "5", "--budget", "0.5")
    assert key["secret"] and key["limits"]["rpm"] and key["limits"]["budget_month_micros"]
    assert int(key["limits"]["budget_month_micros"]) == 500_000

    # Only the fields given change; --replace writes the whole row.
    limits = ok(home, "keys", "limits", key["key_id"], "--tpm", "1000")
    assert (limits["rpm"], limits["tpm"]) == (5, 1000)
    limits = ok(home, "keys", "limits", key["key_id"], "--clear", "budget")
    assert limits["budget_month_micros"] is None and limits["rpm"] == 5
    limits = ok(home, "keys", "limits", key["key_id"], "--replace", "--tpm", "10")
    assert limits["rpm"] is None and limits["tpm"] == 10
    team = ok(home, "keys", "limits", "Acme/ml", "--rpm", "100", "--budget-day", "2")
    assert (team["rpm"], team["budget_day_micros"]) == (100, 2_000_000)
    res = llmgw(home, "ctl", "keys", "limits", "Acme/nope", "--rpm", "1")
    assert res.returncode == ExitCode.NOT_FOUND

    new = ok(home, "keys", "rotate", key["key_id"], "--overlap", "1h")
    assert new["secret"] and new["secret"] != key["secret"]
    assert new["rotated_from"] == key["key_id"]
    listed = {k["key_id"]: k for k in ok(home, "keys", "list")["keys"]}
    assert listed[key["key_id"]]["kind"] == "rotated" and listed[key["key_id"]]["expires_at"]
    assert listed[new["key_id"]]["kind"] == "service"
    assert all(k["secret"] == "" for k in listed.values())

    ok(home, "team", "rename", "Acme/ml", "research")
    projects = [t["path"] for t in ok(home, "project", "list")["tenants"]]
    assert projects == ["Acme/research/search"]
    assert {k["project"] for k in ok(home, "keys", "list")["keys"]} == {"Acme/research/search"}

    res = llmgw(home, "ctl", "project", "rm", "Acme/research/search")
    assert res.returncode == ExitCode.CONFLICT and "revoke them first" in said(res)
    for key_id in listed:
        ok(home, "keys", "revoke", key_id)
    res = llmgw(home, "ctl", "team", "rm", "Acme/research")
    assert res.returncode == ExitCode.CONFLICT and "remove it first" in said(res)
    ok(home, "project", "rm", "Acme/research/search")
    human = llmgw(home, "ctl", "org", "list")
    assert human.returncode == 0 and "Acme" in human.stdout
