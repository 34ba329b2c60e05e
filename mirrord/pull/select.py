"""Which files of a repository a pull keeps, and the pickle files it refuses.

``--include GLOB`` narrows a pull to some weights (one quantization of a GGUF
repository, the safetensors of a repository that also ships ``.bin``), but
what every reader of a model needs (its config, tokenizer, index and card)
is kept whatever the globs say: a mirror holding weights without their
config serves a model no engine can load.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable, Sequence

from llmgw.catalog.model import is_pickled
from llmgw.mirror.names import NameRefused, check_file_path
from mirrord.pull.errors import PullRefused

log = logging.getLogger(__name__)

# Matched against the file's name (the last element): small, and needed by every reader.
ALWAYS_KEPT = ("README*", "LICENSE*", "config*", "tokenizer*", "*.json", "*.txt", "*.md")


def always_kept(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, g) for g in ALWAYS_KEPT)


def included(path: str, include: Sequence[str]) -> bool:
    """Whether a pull with these globs keeps ``path`` (no globs: every file)."""
    if not include or always_kept(path):
        return True
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(path, g) or fnmatch.fnmatchcase(name, g) for g in include)


def storable(path: str) -> bool:
    """Whether a path may become a file of a held revision (``.gitattributes`` may not)."""
    try:
        check_file_path(path)
    except NameRefused:
        return False
    return True


def select_paths(paths: Iterable[str], include: Sequence[str]) -> list[str]:
    """The paths a pull keeps, in order: included, and plain enough to be stored.

    Dotted files (``.gitattributes``) and names the mirror cannot hold are left
    out, and said so in the log: they are git's housekeeping, never a model's.
    """
    kept = []
    for path in paths:
        if not included(path, include):
            continue
        if not storable(path):
            log.info("leaving out %s: the mirror holds plain file names only", path)
            continue
        kept.append(path)
    return kept


def refuse_pickles(paths: Iterable[str], *, allow_pickle: bool, where: str) -> None:
    """Refuse (PullRefused) pickle files unless the add allows them.

    A pickle runs code when it is loaded; a mirror that serves one to every
    node spreads whatever it carries, so it takes one only when asked.
    """
    if allow_pickle:
        return
    pickles = [p for p in paths if is_pickled(p)]
    if not pickles:
        return
    shown = ", ".join(pickles[:3]) + (f" and {len(pickles) - 3} more" if len(pickles) > 3 else "")
    raise PullRefused(
        f"{where} holds pickle files ({shown}): loading one runs whatever code it carries",
        hint="mirror the safetensors instead (--include '*.safetensors'), "
        "or add --allow-pickle if these files were checked",
    )
