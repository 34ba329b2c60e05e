"""An engine's secrets never reach its log or a reason: real processes printing their key.

The fake engine prints ``$NAME`` as the variable's value, as SGLang prints
the key it was given in the ServerArgs it logs at launch.
"""

from __future__ import annotations

from agentd.supervisor.scrub import MARK
from tests.agentd.supervisor.conftest import eventually

KEY = "sk-engine-Zq3vX9fH2kLm7Pw4"
SGLANG_BANNER = "server_args=ServerArgs(model_path='/w/tiny', api_key='$LLMGW_ENGINE_KEY', port=1)"


async def test_a_key_an_engine_prints_is_redacted_in_its_log_and_its_failure_reason(harness):
    # sgl-project/sglang#37457: the engine key printed at launch reached `ctl logs`,
    # the replica's reason and the llmgw:admin tools a read-only API key may call.
    sup, events = harness.supervisor()
    spec = harness.spec(
        "--say", SGLANG_BANNER, "--say", "loaded with $LLMGW_ENGINE_KEY",
        "--health-after", "999", "--exit-after", "0.3", "--exit-code", "1",
        env={"LLMGW_ENGINE_KEY": KEY},
    )  # fmt: skip
    await sup.start(spec)

    await eventually(lambda: events.states() == ["starting", "failed"], "the exit went unreported")
    reason = events.last().reason
    assert f"api_key='{MARK}'" in reason and f"loaded with {MARK}" in reason
    logged = "\n".join(sup.log_tail("s1"))
    assert f"api_key='{MARK}', port=1)" in logged and f"loaded with {MARK}" in logged
    assert KEY not in reason + logged
    assert all(KEY not in e.reason for e in events)


async def test_a_value_the_adapter_marks_secret_is_redacted_whatever_its_name(harness):
    # A secret under a name that does not say so is known only from the launch spec.
    sup, _ = harness.supervisor()
    spec = harness.spec(
        "--say", "opaque=$ENGINE_OPAQUE", "--say", "tuning=$ENGINE_TUNING",
        env={"ENGINE_OPAQUE": "b5f0c1d2e3a4-opaque", "ENGINE_TUNING": "not-a-secret-at-all"},
        secret_env=frozenset({"ENGINE_OPAQUE"}),
    )  # fmt: skip
    await sup.start(spec)

    await eventually(lambda: len(sup.log_tail("s1")) >= 2, "it printed nothing")
    assert sup.log_tail("s1")[:2] == [f"opaque={MARK}", "tuning=not-a-secret-at-all"]


async def test_a_restarted_agent_redacts_the_key_of_an_engine_it_adopts(harness):
    # Its state file keeps no key: the adopting agent reads it from the engine's environment,
    # or the lines from before the restart, and after it, would show it.
    trigger = harness.tmp_path / "go"
    first, events1 = harness.supervisor()
    spec = harness.spec(
        "--say", "my key is $LLMGW_ENGINE_KEY",
        "--when", str(trigger), "still $LLMGW_ENGINE_KEY after the restart",
        env={"LLMGW_ENGINE_KEY": KEY},
    )  # fmt: skip
    await first.start(spec)
    await eventually(lambda: events1.states() == ["starting", "ready"], "never ready")
    await first.close()

    second, _ = harness.supervisor()
    assert await second.adopt_all() == ["s1"]
    trigger.touch()
    await eventually(
        lambda: f"still {MARK} after the restart" in second.log_tail("s1"), "no line after adoption"
    )
    logged = second.log_tail("s1")
    assert f"my key is {MARK}" in logged
    assert not any(KEY in line for line in logged)
