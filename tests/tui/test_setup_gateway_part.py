"""The setup screens' Gateway part: HTTPS on :8080 and trusted proxies, as server init's flags."""

from __future__ import annotations

import pytest
from textual.widgets import Checkbox, Input

from llmgw.setup.plan import PART_IDS, SetupPlan, to_command
from llmgw.setup.plan_gateway import GatewayPart
from tests.llmgw.test_setup_plan import BIG
from tests.tui.test_setup_console import SMALL_TERMINAL, parts_shown, plan_checked, prompt, text_of
from tui.setup.app import SetupConsole
from tui.setup.dialogs import GatewayDialog
from tui.setup.parts import PartsScreen


def test_the_gateway_part_is_server_inits_http_flags():
    assert "--http-tls" not in to_command(SetupPlan())
    on = SetupPlan(gateway=GatewayPart(on=True))
    assert to_command(on)[-1] == "--http-tls"
    behind = SetupPlan(
        gateway=GatewayPart(on=True, tls=False, trusted_proxies=("10.0.0.20",), proxy_protocol=True)
    )
    assert to_command(behind)[-3:] == ["--trusted-proxy", "10.0.0.20", "--proxy-protocol"]
    own = SetupPlan(gateway=GatewayPart(on=True, cert="/etc/ssl/gw.crt", key="/etc/ssl/gw.key"))
    assert "--http-tls" not in to_command(own)
    assert to_command(own)[-4:] == [
        "--http-cert",
        "/etc/ssl/gw.crt",
        "--http-key",
        "/etc/ssl/gw.key",
    ]
    with pytest.raises(ValueError, match="'haproxy' is not an address or CIDR"):
        GatewayPart(on=True, trusted_proxies=("haproxy",))
    with pytest.raises(ValueError, match="PROXY headers come before TLS"):
        GatewayPart(on=True, trusted_proxies=("10.0.0.20",), proxy_protocol=True)


async def test_the_gateway_part_turns_on_takes_proxies_and_shows_in_the_command(tmp_path) -> None:
    from llmgw.paths import Paths

    app = SetupConsole(Paths.under(tmp_path / "home"), machine=BIG)
    async with app.run_test(size=SMALL_TERMINAL) as pilot:
        await parts_shown(pilot, app)
        assert prompt(app, "gateway").startswith("[ ] Gateway TLS and proxies")
        await pilot.press(*["down"] * PART_IDS.index("gateway"), "space")
        assert app.plan.gateway.on is True
        assert "HTTPS, certificate from the cluster CA" in prompt(app, "gateway")

        await pilot.press("enter")
        assert isinstance(app.screen, GatewayDialog)
        app.screen.query_one("#gw-tls", Checkbox).value = False
        app.screen.query_one("#gw-proxies", Input).value = "10.0.0.20, bad-name"
        app.screen.query_one("#gw-proxy-protocol", Checkbox).value = True
        app.screen.query_one("#gw-proxies", Input).focus()
        await pilot.press("enter")
        # A proxy the part cannot read stays in the form, named.
        assert isinstance(app.screen, GatewayDialog)
        assert "'bad-name' is not an address or CIDR" in text_of(app, "#form-status")
        app.screen.query_one("#gw-proxies", Input).value = "10.0.0.20, 10.0.1.0/24"
        await pilot.press("enter")
        assert isinstance(app.screen, PartsScreen)
        assert app.plan.gateway.trusted_proxies == ("10.0.0.20", "10.0.1.0/24")
        assert "PROXY headers" in prompt(app, "gateway")

        await pilot.press("p")
        await plan_checked(pilot, app)
        command = text_of(app, "#plan-command")
        assert "--trusted-proxy 10.0.0.20 --trusted-proxy 10.0.1.0/24 --proxy-protocol" in command
        assert "--http-tls" not in command
