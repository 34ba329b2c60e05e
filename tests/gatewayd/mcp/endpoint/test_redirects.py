"""/mcp in front of a company server that redirects: its credentials and the caller's
arguments never follow a redirect to another origin.

The official SDK client calls through a real gatewayd; the company server is the SDK's
own hr, answering tools/call with a 307 to a recorder on another loopback port
(tests/fakes/redirecting.py), as a compromised or misconfigured server might.
"""

from __future__ import annotations

import pytest
import pytest_asyncio
from mcp.shared.exceptions import MCPError

from tests.cluster_fixture import running_cluster
from tests.fakes.mcp_servers import hr_server, serve
from tests.fakes.redirecting import Recorder, Redirecting, calls_tool
from tests.gatewayd.mcp.endpoint.kit import Gateway

pytestmark = pytest.mark.asyncio(loop_scope="module")
MODES = ["auto", "legacy"]
HR_TOKEN = "hr-s3cret"
HR_KEY = "hr-api-key-91d2c7"  # a sealed header aiohttp kept on a cross-origin redirect
ARGUMENT = "Ada-Lovelace-5e0f"  # what the caller asked the tool: it stays with hr
UNAVAILABLE = -32002


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gw(tmp_path_factory):
    async with Recorder() as elsewhere:
        hr = hr_server(HR_TOKEN)
        hr.app = Redirecting(hr.app, f"{elsewhere.url}/mcp", when=calls_tool)
        plain = hr_server(HR_TOKEN)
        async with (
            serve(hr) as hr_url,
            serve(plain) as plain_url,
            running_cluster(tmp_path_factory.mktemp("mcp-redirects")) as cluster,
        ):
            g = Gateway(cluster)
            g.elsewhere = elsewhere
            sealed = {"X-Hr-Key": HR_KEY}
            await g.add_server("hr", hr_url, bearer=HR_TOKEN, sealed_headers=sealed)
            # Added with a slash: the SDK's server answers 307 to …/mcp, its own origin.
            await g.add_server("slash", plain_url + "/", bearer=HR_TOKEN, sealed_headers=sealed)
            await g.key("a", "Acme/ml/search")
            await g.grant("project:Acme/ml/search", "hr")
            await g.grant("project:Acme/ml/search", "slash")
            yield g


@pytest.mark.parametrize("mode", MODES)
async def test_a_call_redirected_to_another_origin_takes_no_credential_and_no_argument_there(
    gw, mode
):
    # Guards: the upstream client followed a 307 to another host:port, and aiohttp dropped
    # only Authorization: the sealed X-Hr-Key and the tool's arguments reached the recorder,
    # whose answer came back to the caller as if hr had given it.
    gw.elsewhere.requests.clear()
    error = None
    async with gw.client("a", mode) as c:
        try:
            answered = await c.call_tool("hr.lookup", {"name": ARGUMENT})
        except MCPError as e:
            error = e.error
    assert not gw.elsewhere.saw(HR_KEY) and not gw.elsewhere.saw(ARGUMENT)
    assert gw.elsewhere.requests == []
    assert error is not None, f"answered from elsewhere: {answered}"
    assert error.code == UNAVAILABLE
    assert error.message.startswith("hr could not be reached: the server answered 307")
    assert f"redirecting to {gw.elsewhere.url}/mcp" in error.message
    # Never the sealed values in what the caller is told.
    assert HR_KEY not in error.message and HR_TOKEN not in error.message


@pytest.mark.parametrize("mode", MODES)
async def test_a_server_added_with_a_slash_is_followed_to_its_own_origin_and_answers(gw, mode):
    async with gw.client("a", mode) as c:
        found = await c.call_tool("slash.lookup", {"name": "Ada"})
    assert not found.is_error
    assert found.structured_content["email"] == "ada@example.com"
