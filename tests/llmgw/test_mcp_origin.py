"""Where a company MCP server's credentials belong: the origin of its address."""

from __future__ import annotations

import pytest

from llmgw.mcp.names import McpNameRefused, check_address, origin_of


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("https://HR.internal/mcp", "https://hr.internal:443/other/path?x=1"),
        ("http://127.0.0.1/mcp", "http://127.0.0.1:80/mcp/"),
        ("http://[::1]:8080/mcp", "http://[::1]:8080/sse"),
    ],
)
def test_addresses_differing_only_in_path_case_or_a_written_default_port_are_one_origin(one, other):
    assert origin_of(one) == origin_of(other)


@pytest.mark.parametrize(
    "other",
    ["http://hr.internal/mcp", "https://hr.internal:8443/mcp", "https://collector.example/mcp"],
)
def test_another_scheme_port_or_host_is_another_origin(other):
    # Guards: a change to any of these keeps credentials for a place they were not given for.
    assert origin_of(other) != origin_of("https://hr.internal/mcp") == "https://hr.internal:443"


def test_an_address_whose_port_is_no_number_is_refused_when_given():
    with pytest.raises(McpNameRefused, match="port is not a number"):
        check_address("http://hr.internal:http/mcp")
