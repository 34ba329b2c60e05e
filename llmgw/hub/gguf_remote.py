"""A GGUF file's planning facts read through a hub's (or a mirror's) resolve URL, header only.

A GGUF header is the metadata and the tensor table at the start of the
file; its length is not written anywhere, so it is read as a prefix that
grows (4 MB, then 16, 64, 256) until it parses. Gemma-3's 262,144-token
vocabulary makes a header of ~6 MB: two reads. Never the weights.

The weights' size is the file's (the tree's size, or a HEAD's); a model
split in parts (name-00001-of-00003.gguf) counts every part the tree lists.
"""

from __future__ import annotations

import re

from llmgw.errors import UsageError
from llmgw.hub.client import HubClient
from llmgw.hub.errors import HubAnswerInvalid, HubError
from llmgw.modelplan.gguf_meta import GgufHeader, gguf_facts, parse_gguf_prefix
from llmgw.modelplan.types import ModelFacts

FIRST_READ_BYTES = 4 << 20
GROWTH = 4
# No GGUF writer makes a header this long; past it the file is not what it says.
MAX_HEADER_BYTES = 256 << 20

_SPLIT_NAME = re.compile(r"^(?P<stem>.*)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")


async def read_remote_gguf(hub: HubClient, repo: str, commit: str, path: str) -> ModelFacts:
    """The facts of the GGUF file ``path`` of ``repo`` at ``commit``."""
    size = (await hub.head(repo, commit, path)).size
    header = await read_remote_header(hub, repo, commit, path, size)
    return gguf_facts(header, await _weights_bytes(hub, repo, commit, path, header, size))


async def read_remote_header(
    hub: HubClient, repo: str, commit: str, path: str, size: int
) -> GgufHeader:
    """The header of a GGUF file of ``size`` bytes, read as a prefix that grows until it parses."""
    where = f"{repo}/{path}"
    buf = b""
    want = FIRST_READ_BYTES
    while True:
        want = min(want, size) if size else want
        if want > len(buf):
            buf += await hub.read_range(repo, commit, path, len(buf), want - len(buf))
        # All of the file is here (or it is shorter than asked): ending early is a cut.
        whole = len(buf) < want or (size > 0 and len(buf) >= size)
        try:
            header = parse_gguf_prefix(buf, whole=whole)
        except UsageError as e:
            raise HubAnswerInvalid(f"{where}: {e.message}", hint=e.hint) from e
        if header is not None:
            return header
        if want >= MAX_HEADER_BYTES:
            raise HubAnswerInvalid(
                f"{where}: no GGUF header ends within its first {MAX_HEADER_BYTES >> 20} MB",
                hint="check that the file is a GGUF model",
            )
        want = min(want * GROWTH, MAX_HEADER_BYTES)


async def _weights_bytes(
    hub: HubClient, repo: str, commit: str, path: str, header: GgufHeader, size: int
) -> int:
    count = header.fields.get("split.count")
    if not isinstance(count, int) or count <= 1:
        return size
    match = _SPLIT_NAME.match(path.rsplit("/", 1)[-1])
    if not match:
        raise HubError(
            f"{repo}/{path} is one part of a model split in {count}, but its name does not "
            "say which (expected name-00001-of-0000N.gguf)"
        )
    folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
    names = {f"{folder}{match['stem']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)}
    sizes = {f.path: f.size for f in await hub.list_files(repo, commit) if f.path in names}
    missing = sorted(names - set(sizes))
    if missing:
        raise HubError(
            f"{repo} at {commit[:12]} is missing parts of {path}: " + ", ".join(missing),
            hint="name a model whose every part is in the repository",
        )
    return sum(sizes.values())
