"""One admin call of a ``llmgw ctl`` command, its reply printed by ``output.emit``.

Light to import: the admin client, and with it the config schema and the
generated proto, is imported when the call is made, so that a machine with no
control plane is told so at once.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import typer

from llmgw.errors import ConfigError, LlmgwError
from llmgw.paths import Paths, resolve

if TYPE_CHECKING:
    from llmgw.admin_client import AdminClient

JsonOpt = typer.Option(False, "--json", help="Print the admin reply as JSON, and nothing else.")


def call(
    method: Callable[[AdminClient], Awaitable[Any]],
    *,
    json: bool,
    next_step: str = "",
    renderers: str = "",
) -> None:
    """Run one admin call and print its reply; errors to stderr with their exit code.

    ``renderers``: the module that registers how the reply looks to people, for
    a command module that does not import it itself; imported once the reply is in.
    """
    from llmgw.present import output

    try:
        reply = _ask(method, resolve())
    except LlmgwError as e:
        raise typer.Exit(code=output.fail(e)) from None
    if renderers and not json:
        importlib.import_module(renderers)
    output.emit(reply, json=json, next_step=next_step)


def _ask(method: Callable[[AdminClient], Awaitable[Any]], paths: Paths) -> Any:
    try:
        paths.server_yaml.stat()
    except FileNotFoundError as e:
        # Said before the client is imported (the config schema and the generated proto
        # with it, 0.4 s): the words load_server_config says, held equal by a test.
        raise ConfigError(
            f"{paths.server_yaml} does not exist", hint="create it with: llmgw server init"
        ) from e
    except OSError:
        pass  # the client's own reading of it says what is wrong
    import asyncio

    from llmgw.admin_client import AdminClient

    async def go():
        async with AdminClient.from_paths(paths) as client:
            return await method(client)

    return asyncio.run(go())
