"""How warnings and node/replica operations read to people, in ``llmgw ctl`` and the console.

``llmgw ctl warnings`` and the console's Overview build their lines from
``warning_cells``/``warning_line``; ``llmgw ctl node rm`` and the Nodes
screen say what happened with ``removed_node_text``; ``llmgw ctl replica
restart`` and the Replicas screen with ``restart_text``.
"""

from __future__ import annotations

from rich.text import Text

from llmgw.present.modelfmt import clock
from proto.llmgw.v1 import HostFacts, RemoveNodeReply, RestartReplicaReply, WarningView

WARNING_COLUMNS = ("AT", "SEVERITY", "KIND", "SUBJECT", "WARNING", "WHAT TO DO")
# What a cluster with nothing wrong says, in the command and the console alike.
NO_WARNINGS = "No warnings in the last hour."
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}
NO_AVX2 = "CPU has no AVX2: llama.cpp CPU builds will be slow or refuse to run"


def host_warnings(host: HostFacts | None) -> list[str]:
    """A node's own warnings, and no AVX2 on an x86 CPU where it did not say so itself.

    (A recorded inventory, as fake hardware reports, carries the flags but not
    the warnings the agent derives from them.)
    """
    if host is None:
        return []
    out = list(host.warnings)
    if host.arch in ("x86_64", "amd64") and not host.avx2 and not any("AVX2" in w for w in out):
        out.append(NO_AVX2)
    return out


def severity_text(w: WarningView) -> Text:
    # A change the control plane made (a model scaled) is news, not a problem that passed.
    word = w.severity if w.current or w.severity == "info" else f"{w.severity} (passed)"
    return Text(word, style=SEVERITY_STYLE.get(w.severity, "") if w.current else "dim")


def warning_cells(w: WarningView) -> tuple[str | Text, ...]:
    """One warning's cells, in the order of ``WARNING_COLUMNS``."""
    return (clock(w.at), severity_text(w), w.kind, w.subject, w.message, w.hint)


def warning_line(w: WarningView) -> Text:
    """One warning on two lines: when, what and about what; then what to do."""
    mark = "●" if w.current else "○"
    style = SEVERITY_STYLE.get(w.severity, "") if w.current else "dim"
    line = Text.assemble(
        (f"{mark} ", style),
        (f"{clock(w.at)} ", "dim"),
        (f"{w.kind} {w.subject}: ", "bold"),
        w.message,
    )
    if w.hint:
        line.append(f"\n    → {w.hint}", style="dim")
    return line


def removed_node_text(r: RemoveNodeReply) -> str:
    return f"Removed node {r.node_id}; {r.note}."


def restart_text(r: RestartReplicaReply) -> str:
    return r.note[:1].upper() + r.note[1:] + "."
