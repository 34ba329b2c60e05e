"""Argument parsing as the real engines do it: argparse, unknown flags refused with exit 2."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence


def normalize(argv: Sequence[str]) -> list[str]:
    """``--max_model_len=8`` as ``--max-model-len=8``: vLLM and SGLang read both spellings."""
    out = []
    for arg in argv:
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            arg = name.replace("_", "-") + eq + value
        out.append(arg)
    return out


def parser(
    prog: str,
    value_flags: Iterable[str],
    bool_flags: Iterable[str],
    optional_bools: Iterable[str] = (),
    aliases: dict[str, Sequence[str]] | None = None,
) -> argparse.ArgumentParser:
    """A parser that knows exactly these flags; argparse exits 2 on any other."""
    p = argparse.ArgumentParser(prog=prog)
    aliases = aliases or {}
    for flag in value_flags:
        p.add_argument(flag, *aliases.get(flag, ()))
    for flag in bool_flags:
        p.add_argument(flag, *aliases.get(flag, ()), action="store_true")
    for flag in optional_bools:
        p.add_argument(flag, *aliases.get(flag, ()), action=argparse.BooleanOptionalAction)
    return p
