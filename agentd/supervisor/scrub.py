"""Secrets taken out of an engine's output before the agent keeps or shows a line of it.

Engines print what they were given. SGLang logs its whole ServerArgs at
launch, ``api_key='…'`` included (sgl-project/sglang#37457), and an engine's
lines travel far: the shard's log (``llmgw ctl logs``), the reason of a
failed start (``llmgw ctl replicas``) and the llmgw:admin MCP tools, which a
read-only API key may be granted. So every line is scrubbed as it is read,
before anything keeps it, in two ways:

- every secret value the agent put in the engine's environment (the engine
  key, tokens) is replaced wherever it appears, whatever surrounds it;
- text shaped like a named secret (``api_key='x'``, ``"api_key": "x"``,
  ``--api-key x``, ``api-key=x``, ``HF_TOKEN=x``, ``Bearer x``) loses its
  value, whoever's secret it is.

Pure functions over strings: no I/O, so they are tested in milliseconds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

# What a secret becomes: fixed, so a reader sees that something was there.
MARK = "[redacted]"
# Values shorter than this are not replaced wherever they appear: a key of
# "abc" or "1" would take letters out of every word and number in the log.
# A short secret is still taken out where its name says it is one.
MIN_SECRET_CHARS = 8
# A variable is a secret when one of the parts of its name (split on "_")
# is one of these: LLAMA_API_KEY, VLLM_API_KEY, LLMGW_ENGINE_KEY, HF_TOKEN,
# AWS_SECRET_ACCESS_KEY; TOKENIZERS_PARALLELISM is not (TOKENIZERS ≠ TOKEN).
SECRET_NAME_PARTS = frozenset(
    {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS"}
)
# Values that say no secret was set; left as they are so an operator can see that.
UNSET = frozenset({"", "none", "null", "nil", "***", MARK.lower()})

# Names that say the value next to them is a secret. Token names are only
# the ones that are credentials: "bos_token", "#token: 45" (SGLang's decode
# log) and "max_new_tokens" are not.
_PREFIX = r"(?:[a-z0-9]+[_-])*"
_SECRET_NAME = (
    rf"{_PREFIX}api[_-]?key"
    rf"|{_PREFIX}(?:access|auth|bearer|refresh|session|hf|hub)[_-]?token"
    rf"|{_PREFIX}secret(?:[_-]?(?:access[_-]?)?key)?"
    rf"|{_PREFIX}passw(?:or)?d"
)
_NAMED = re.compile(
    r"(?<![\w-])(?P<flag>--?)?"
    rf"(?P<name>{_SECRET_NAME})(?![\w-])"
    r"""['"]?"""  # the closing quote of a quoted name: "api_key": ...
    r"(?P<sep>\s*[=:]\s*|\s+)"
    rf"(?:(?P<done>{re.escape(MARK)})"
    r"""|\[?\s*(?:'(?P<sq>[^']*)'|"(?P<dq>[^"]*)"|(?P<bare>[^\s'",;&)\]}]+)))""",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?<![\w-])(bearer\s+)([A-Za-z0-9._~+/=-]{8,})", re.IGNORECASE)
# Cheap look before the patterns: most lines name no secret at all.
_HINTS = ("key", "token", "secret", "passw", "bearer")
# An argparse metavar (``[--api-key API_KEY]`` in a usage line), not a key.
_METAVAR = re.compile(r"[A-Z][A-Z0-9_]*")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says its value is a secret."""
    return any(part in SECRET_NAME_PARTS for part in name.upper().split("_"))


def secrets_of(env: Mapping[str, str], marked: Iterable[str] = ()) -> tuple[str, ...]:
    """The values of ``env`` to take out of output: those ``marked`` and those named as secrets.

    Longest first, so a secret that holds another is replaced whole. Values
    under MIN_SECRET_CHARS are left to the named patterns.
    """
    marked = frozenset(marked)
    values = {
        value
        for name, value in env.items()
        if (name in marked or is_secret_name(name)) and len(value) >= MIN_SECRET_CHARS
    }
    return tuple(sorted(values, key=len, reverse=True))


def scrub(line: str, secrets: Sequence[str] = ()) -> str:
    """``line`` with every one of ``secrets``, and every value a secret's name marks, as MARK.

    Lines are scrubbed whole, so a secret is never half on one line and half
    on the next.
    """
    for secret in secrets:
        if secret in line:
            line = line.replace(secret, MARK)
    lower = line.lower()
    if not any(hint in lower for hint in _HINTS):
        return line
    line = _NAMED.sub(_redact_named, line)
    return _BEARER.sub(lambda m: m.group(1) + MARK, line)


def _redact_named(m: re.Match[str]) -> str:
    if m.group("done") is not None:
        return m.group(0)
    group = next(g for g in ("sq", "dq", "bare") if m.group(g) is not None)
    value = m.group(group)
    if value.lower() in UNSET:
        return m.group(0)
    if not m.group("sep").strip() and not _looks_like_a_value(value, flag=bool(m.group("flag"))):
        return m.group(0)
    start, end = m.span(group)
    base = m.start(0)
    text = m.group(0)
    return text[: start - base] + MARK + text[end - base :]


def _looks_like_a_value(value: str, *, flag: bool) -> bool:
    """Whether the word after a secret's name and a space is its value rather than prose.

    ``--api-key X`` is a command line: X is the key, unless it is the next
    option or argparse's metavar. ``api-key X`` without the dashes is as
    often a sentence ("api-key required"), so X must look like a key: long
    enough and not only letters.
    """
    if value.startswith("-") or _METAVAR.fullmatch(value):
        return False
    if flag:
        return True
    return len(value) >= MIN_SECRET_CHARS and not value.isalpha()
