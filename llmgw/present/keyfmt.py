"""How keys, limits and the org/team/project tree read to people, in ``llmgw ctl`` and the console.

``llmgw ctl keys list`` and the console's Keys screen build their rows from
``key_cells``; ``llmgw ctl org|team|project`` and the screen's tree describe a
level with ``tenant_line`` and its limits with ``describe_limits``. The
parsers (``parse_duration``, ``parse_money``) and ``limits_change`` turn what
an operator typed into what the admin API takes, with the same checks and the
same words in the command and the dialogs.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from rich.text import Text

from llmgw.catalog.price import format_micros
from llmgw.errors import UsageError
from proto.llmgw.v1 import KeyView, LimitsView, RemoveTenantReply, TenantView

KEY_COLUMNS = (
    "KEY",
    "KIND",
    "PROJECT",
    "NAME",
    "PREFIX",
    "MODELS",
    "LIMITS",
    "EXPIRES",
    "LAST USED",
    "STATE",
)
TENANT_COLUMNS = ("PATH", "KIND", "LIMITS", "KEYS", "RESPONSES KEPT", "CREATED")
NOUNS = {"org": "organization", "team": "team", "project": "project"}
SHAPES = {"org": "ORG", "team": "ORG/TEAM", "project": "ORG/TEAM/PROJECT"}
# The level a path names, by how many parts it has (Acme, Acme/ml, Acme/ml/search).
KIND_BY_DEPTH = ("org", "team", "project")
NO_KEYS = "No keys yet. Make one: llmgw ctl keys create --project ORG/TEAM/PROJECT"
NO_TENANTS = "None yet. Start with: llmgw ctl project create --parents ORG/TEAM/PROJECT"
# The limits a level may have, as SetLimits names them, with the words people read.
LIMIT_NAMES = {
    "rpm": "requests/min",
    "tpm": "tokens/min",
    "budget_day_micros": "budget a day",
    "budget_month_micros": "budget a month",
}
MONEY_LIMITS = frozenset({"budget_day_micros", "budget_month_micros"})

_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


# -- what operators type -------------------------------------------------------------


def parse_duration(text: str) -> int:
    """'90d', '12h', '30m', '1w2d' -> seconds; '' -> 0 (never)."""
    if not text:
        return 0
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise UsageError(f"{text!r} is not a duration: write it like 90d, 12h or 30m")
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


def parse_money(text: str) -> int:
    """An amount of money ("25", "0.50", "0.000001") as whole micro-units."""
    try:
        amount = Decimal(text.strip())
    except InvalidOperation:
        raise UsageError(f"{text!r} is not an amount of money: write it like 25 or 0.50") from None
    micros = amount * 1_000_000
    if amount < 0 or micros != micros.to_integral_value():
        raise UsageError(f"{text!r}: an amount is positive with at most 6 decimals (a micro-unit)")
    return int(micros)


def money_text(micros: int) -> str:
    """Micro-units as ``parse_money`` reads them back: 25000000 → "25", 500000 → "0.5"."""
    whole, frac = divmod(micros, 1_000_000)
    return f"{whole}.{frac:06d}".rstrip("0").rstrip(".")


def kind_of_path(path: str) -> str:
    """The level a path names: org, team or project; UsageError for any other shape."""
    parts = path.split("/")
    if not path or "" in parts or len(parts) > len(KIND_BY_DEPTH):
        raise UsageError(
            f"{path!r} is not a path of the tree",
            hint="write it as ORG, ORG/TEAM or ORG/TEAM/PROJECT",
        )
    return KIND_BY_DEPTH[len(parts) - 1]


def limit_text(limits: LimitsView | None, name: str) -> str:
    """One limit as a form field shows it: its value, or "" when there is none."""
    value = getattr(limits, name) if limits is not None else None
    if value is None:
        return ""
    return money_text(value) if name in MONEY_LIMITS else str(value)


def _limit_value(name: str, text: str) -> int:
    if name in MONEY_LIMITS:
        return parse_money(text)
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{LIMIT_NAMES[name]}: {text!r} is not a whole number from 1 up")
    return int(text)


def limits_change(
    scope: str, current: LimitsView | None, typed: dict[str, str]
) -> tuple[LimitsView, list[str]]:
    """What SetLimits needs for the limits as typed: the changed values and the limits lifted.

    ``typed`` maps limit names (``LIMIT_NAMES``) to the text of their fields;
    a name left out is not touched. A field equal to the current limit is not
    sent; an emptied field lifts that limit. UsageError names a field that
    is not a number.
    """
    wanted = LimitsView(scope=scope)
    lifted: list[str] = []
    for name, text in typed.items():
        if name not in LIMIT_NAMES:
            raise UsageError(f"{name!r} is not a limit: the limits are {', '.join(LIMIT_NAMES)}")
        now = getattr(current, name) if current is not None else None
        text = text.strip()
        if not text:
            if now is not None:
                lifted.append(name)
            continue
        value = _limit_value(name, text)
        if value != now:
            setattr(wanted, name, value)
    return wanted, lifted


# -- what people read ------------------------------------------------------------------


def describe_limits(v: LimitsView | None) -> str:
    if v is None:
        return "none"
    parts = []
    if v.rpm is not None:
        parts.append(f"{v.rpm:,} requests/min")
    if v.tpm is not None:
        parts.append(f"{v.tpm:,} tokens/min")
    if v.budget_day_micros is not None:
        parts.append(f"{format_micros(v.budget_day_micros)} a day")
    if v.budget_month_micros is not None:
        parts.append(f"{format_micros(v.budget_month_micros)} a month")
    return ", ".join(parts) or "none"


def key_state(k: KeyView, now: datetime | None = None) -> Text:
    """active, revoked or expired, coloured."""
    at = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    if k.revoked_at:
        return Text("revoked", style="red")
    if k.expires_at and k.expires_at <= at:
        return Text("expired", style="red")
    return Text("active", style="green")


def key_works(k: KeyView, now: datetime | None = None) -> bool:
    """Whether the key's secret is still taken (neither revoked nor expired)."""
    return key_state(k, now).plain == "active"


def key_cells(k: KeyView, now: datetime | None = None) -> tuple[str | Text, ...]:
    """One key as a row under ``KEY_COLUMNS``; never its secret."""
    return (
        k.key_id,
        k.kind or "service",
        k.project,
        k.name,
        k.prefix + "…",
        ",".join(k.models) or "all",
        describe_limits(k.limits),
        k.expires_at or "never",
        k.last_used_at or "-",
        key_state(k, now),
    )


def secret_text(k: KeyView) -> Text:
    """A key made or rotated, with its secret: what is printed this once."""
    return Text.assemble(
        (f"Key {k.key_id} for {k.project} made. Its secret, shown this once:\n", ""),
        (k.secret, "bold"),
        ("\nUse it as: Authorization: Bearer <secret>", "dim"),
        (
            f"\nIt replaces {k.rotated_from}, whose secret works until its expiry."
            if k.rotated_from
            else "",
            "",
        ),
    )


def tenant_line(v: TenantView) -> str:
    """One level with its limits, how many keys work beneath it and, for a project,
    how long it keeps stored responses."""
    kept = f"; responses kept {retention_text(v.retain_responses_s)}" if v.kind == "project" else ""
    return (
        f"{NOUNS.get(v.kind, v.kind).capitalize()} {v.path} — limits: {describe_limits(v.limits)};"
        f" {v.keys} working {'key' if v.keys == 1 else 'keys'}{kept}"
    )


def removed_line(r: RemoveTenantReply) -> str:
    """What a removal took: the levels, and what they held; usage stays."""
    beneath = len(r.levels) - 1
    took = [
        f"{n} {one if n == 1 else many}"
        for n, one, many in (
            (beneath, "level beneath", "levels beneath"),
            (r.keys_removed, "key", "keys"),
            (r.files_removed, "file", "files"),
            (r.batches_removed, "batch", "batches"),
            (r.grants_removed, "MCP grant", "MCP grants"),
            (r.responses_removed, "stored response", "stored responses"),
        )
        if n > 0
    ]
    held = f" with {', '.join(took)}" if took else ""
    return f"Removed {r.path}{held}; its usage is kept, under that path."


def retention_text(seconds: int) -> str:
    """How long a project keeps stored responses: 'off', '24h', '7d', '1d12h'."""
    if seconds <= 0:
        return "off"
    parts = []
    for unit in ("d", "h", "m", "s"):
        n, seconds = divmod(seconds, _UNIT_S[unit])
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts)


def parse_retention(text: str) -> int:
    """'24h', '7d' or 'off' (also '0') -> seconds; 0 is off."""
    text = text.strip().lower()
    if text in ("off", "0", "none"):
        return 0
    if not text:
        raise UsageError("give a retention like 24h or 7d, or off")
    return parse_duration(text)


def tenant_cells(v: TenantView) -> tuple[str, ...]:
    """One level as a row under ``TENANT_COLUMNS``, indented by its depth."""
    depth = v.path.count("/")
    return (
        "  " * depth + (v.path.rsplit("/", 1)[-1] if depth else v.path),
        v.kind,
        describe_limits(v.limits),
        str(v.keys),
        retention_text(v.retain_responses_s) if v.kind == "project" else "",
        v.created_at,
    )
