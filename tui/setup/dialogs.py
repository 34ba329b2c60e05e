"""The settings of each part of an installation, as forms over the parts list.

Every form has the part's "in" checkbox first, so a part can be turned on or
off with the mouse too, and is dismissed with the part as set (or None on
Escape). A setting the part's own checks refuse stays in the form, said in
their words. Each field is one ``llmgw server init`` flag, named beside it.
"""

from __future__ import annotations

from pydantic import ValidationError
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Checkbox, Input, Label, RadioButton, RadioSet, Static

from llmgw.errors import UsageError
from llmgw.modelplan.memory import gb
from llmgw.present.keyfmt import money_text, parse_money
from llmgw.setup import starter
from llmgw.setup.mirror_init import bytes_text, parse_bytes
from llmgw.setup.plan import (
    CONTROL_PLANE_BYTES,
    PORT_NAMES,
    AdminPart,
    ControlPlanePart,
    LimitsPart,
    Machine,
    MirrorPart,
    NodePart,
    SetupPlan,
    StarterPart,
    StoreCheck,
    StorePart,
    starter_need_bytes,
    validation_text,
)
from llmgw.setup.plan_gateway import GatewayPart
from llmgw.setup.words import PART_HELP, PART_TITLES
from tui.screens.dialogs import FormDialog


def _build(model, **fields):
    """The part, or UsageError in the words of its checks."""
    try:
        return model(**fields)
    except ValidationError as e:
        raise UsageError(validation_text(e)) from e


def _whole(text: str, what: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{what}: {text!r} is not a whole number from 1 up")
    return int(text)


def _field(label: str, value: str, field_id: str, placeholder: str = "") -> ComposeResult:
    yield Label(label)
    yield Input(value, placeholder=placeholder, id=field_id, compact=True)


class PartDialog(FormDialog):
    """A part's settings; the checkbox says whether it is in the install."""

    PART_ID = ""
    HELP = "Enter or OK keeps it · Esc leaves it as it was"

    def __init__(self, plan: SetupPlan, machine: Machine | None) -> None:
        super().__init__(PART_TITLES[self.PART_ID])
        self.plan = plan
        self.machine = machine
        self.current = plan.part(self.PART_ID)

    def compose(self) -> ComposeResult:
        # FormDialog's box, with one-line buttons: the form fits a terminal 24 lines high.
        with Vertical(id="form-box", classes="dialog form part-form"):
            yield from self.fields()
            yield Static(self.HELP, id="form-status", classes="dialog-status")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.OK_LABEL, variant="primary", id="form-ok", compact=True)
                yield Button("Cancel", id="form-cancel", compact=True)

    def on_mount(self) -> None:
        super().on_mount()
        # Typing goes to the first setting and Enter keeps the form; the checkbox is a
        # click or a Shift+Tab away (Enter on it would turn the part over instead).
        inputs = self.query(Input)
        (inputs.first() if inputs else self.query_one("#form-ok", Button)).focus()

    def fields(self) -> ComposeResult:
        yield Static(PART_HELP[self.PART_ID], classes="part-explain")
        yield Checkbox("In this install", self.current.on, id="part-on", compact=True)
        yield from self.part_fields()

    def part_fields(self) -> ComposeResult:
        yield from ()

    @property
    def on(self) -> bool:
        return self.query_one("#part-on", Checkbox).value


class ControlPlaneDialog(PartDialog):
    PART_ID = "control_plane"

    def part_fields(self) -> ComposeResult:
        cp: ControlPlanePart = self.current
        yield from _field("Cluster name (--name)", cp.cluster_name, "cp-name")
        yield from _field(
            "Names nodes dial, comma separated (--host)",
            ", ".join(cp.hosts),
            "cp-hosts",
            placeholder=f"this machine's name ({self.machine.hostname if self.machine else ''})",
        )
        yield from _field(
            "Other machines as control planes, standing by (--standbys; PostgreSQL store)",
            ", ".join(cp.standbys),
            "cp-standbys",
            placeholder="none",
        )
        with Horizontal(classes="form-row"):
            for name in PORT_NAMES:
                with Vertical():
                    yield from _field(f"--{name}-port", str(cp.ports()[name]), f"cp-{name}")

    def result(self) -> ControlPlanePart:
        ports = {}
        for name in PORT_NAMES:
            text = self.field(f"#cp-{name}")
            if not text.isdigit():
                raise UsageError(f"the {name} port {text!r} is not a port number (1-65535)")
            ports[f"{name}_port"] = int(text)
        hosts = tuple(h.strip() for h in self.field("#cp-hosts").split(",") if h.strip())
        standbys = tuple(h.strip() for h in self.field("#cp-standbys").split(",") if h.strip())
        return _build(
            ControlPlanePart,
            on=self.on,
            cluster_name=self.field("#cp-name"),
            hosts=hosts,
            standbys=standbys,
            **ports,
        )


class StoreDialog(PartDialog):
    PART_ID = "store"

    def fields(self) -> ComposeResult:
        store: StorePart = self.current
        yield Static(PART_HELP[self.PART_ID], classes="part-explain")
        with RadioSet(id="store-kind", compact=True):
            yield RadioButton("SQLite on this machine", store.kind == "sqlite", id="store-sqlite")
            yield RadioButton("PostgreSQL (--store-dsn)", store.kind == "postgres", id="store-pg")
        yield from _field(
            "PostgreSQL address",
            store.dsn,
            "store-dsn",
            placeholder="postgresql://llmgw@db.example:5432/llmgw",
        )
        with Horizontal(classes="form-row"):
            yield Button("Check the connection", id="store-check", compact=True)
            yield Static(id="store-answer")

    def _kind(self) -> str:
        return "postgres" if self.query_one("#store-pg", RadioButton).value else "sqlite"

    def result(self) -> StorePart:
        kind, dsn = self._kind(), self.field("#store-dsn")
        if kind == "postgres" and not dsn:
            raise UsageError("give the PostgreSQL address, like postgresql://llmgw@db:5432/llmgw")
        return _build(StorePart, kind=kind, dsn=dsn if kind == "postgres" else "")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        # Textual calls FormDialog's handler after this one (OK, Cancel) unless prevented.
        if event.button.id == "store-check":
            event.stop()
            event.prevent_default()
            dsn = self.field("#store-dsn")
            if not dsn:
                self.say("give the PostgreSQL address first", error=True)
                return
            self.query_one("#store-answer", Static).update(f"connecting to {dsn.split('@')[-1]}…")
            self.check_store(dsn)

    @work(exclusive=True, exit_on_error=False, group="store-check")
    async def check_store(self, dsn: str) -> None:
        from llmgw.setup.run import check_postgres

        answer = await check_postgres(dsn)
        self.show_answer(answer)

    def show_answer(self, answer: StoreCheck) -> None:
        text = self.query_one("#store-answer", Static)
        text.update(answer.message)
        text.set_class(not answer.ok, "-error")


class NodeDialog(PartDialog):
    PART_ID = "node"

    def part_fields(self) -> ComposeResult:
        yield from _field("Node id (--node-id)", self.current.node_id, "node-id")

    def result(self) -> NodePart:
        return _build(NodePart, on=self.on, node_id=self.field("#node-id"))


class StarterDialog(PartDialog):
    PART_ID = "starter"

    def part_fields(self) -> ComposeResult:
        yield Static(f"{starter.NAME}: {starter.DESCRIPTION}.", classes="part-explain")
        m = self.machine
        need = f"It needs {gb(starter_need_bytes())} of memory here, beside the control plane's "
        need += f"{gb(CONTROL_PLANE_BYTES)}"
        if m is not None and m.memory_total_bytes:
            need += (
                f"; this machine has {gb(m.memory_total_bytes)} "
                f"({gb(m.memory_available_bytes)} free now)"
            )
        yield Static(need + ".", classes="part-explain")
        if m is not None and not m.starter_installed:
            yield Static(
                "It is not installed here: pip install 'llmgw[starter]'",
                classes="part-explain -error",
            )

    def result(self) -> StarterPart:
        return StarterPart(on=self.on)


class LimitsDialog(PartDialog):
    PART_ID = "limits"

    def part_fields(self) -> ComposeResult:
        lim: LimitsPart = self.current
        yield from _field("Project, ORG/TEAM/PROJECT (--project)", lim.project, "lim-project")
        with Horizontal(classes="form-row"):
            with Vertical():
                yield from _field("--rpm (requests/min)", _text(lim.rpm), "lim-rpm", "none")
            with Vertical():
                yield from _field("--tpm (tokens/min)", _text(lim.tpm), "lim-tpm", "none")
            with Vertical():
                budget = (
                    money_text(lim.budget_month_micros)
                    if lim.budget_month_micros is not None
                    else ""
                )
                yield from _field("--budget-month", budget, "lim-budget", "none")

    def result(self) -> LimitsPart:
        budget = self.field("#lim-budget")
        return _build(
            LimitsPart,
            on=self.on,
            project=self.field("#lim-project"),
            rpm=_whole(self.field("#lim-rpm"), "requests/min"),
            tpm=_whole(self.field("#lim-tpm"), "tokens/min"),
            budget_month_micros=parse_money(budget) if budget else None,
        )


class AdminDialog(PartDialog):
    PART_ID = "admin"

    def part_fields(self) -> ComposeResult:
        yield from _field(
            "Group that may read the admin token (--admin-group)",
            self.current.group,
            "admin-group",
            placeholder="none: only its owner",
        )

    def result(self) -> AdminPart:
        return _build(AdminPart, on=self.on, group=self.field("#admin-group"))


class MirrorDialog(PartDialog):
    PART_ID = "mirror"

    def part_fields(self) -> ComposeResult:
        m: MirrorPart = self.current
        yield from _field("Address it serves on (--mirror-listen)", m.listen, "mirror-listen")
        yield from _field(
            "Quota: bytes, or 500G, 2T (--mirror-max-bytes)",
            bytes_text(m.max_bytes).replace(" ", "").removesuffix("B") if m.max_bytes else "",
            "mirror-max-bytes",
            placeholder="none: the disk is the limit",
        )
        yield Checkbox(
            "Plain HTTP, behind a TLS proxy (--mirror-plain-http; default HTTPS, cluster CA)",
            m.plain_http,
            id="mirror-plain-http",
            compact=True,
        )

    def result(self) -> MirrorPart:
        quota = self.field("#mirror-max-bytes")
        return _build(
            MirrorPart,
            on=self.on,
            listen=self.field("#mirror-listen"),
            max_bytes=parse_bytes(quota) if quota else 0,
            plain_http=self.query_one("#mirror-plain-http", Checkbox).value,
        )


class GatewayDialog(PartDialog):
    PART_ID = "gateway"

    def part_fields(self) -> ComposeResult:
        g: GatewayPart = self.current
        yield Checkbox(
            "HTTPS with a certificate from the cluster CA (--http-tls)",
            g.tls,
            id="gw-tls",
            compact=True,
        )
        with Horizontal(classes="form-row"):
            with Vertical():
                yield from _field("Or your certificate (--http-cert)", g.cert, "gw-cert", "none")
            with Vertical():
                yield from _field("and its key (--http-key)", g.key, "gw-key", "none")
        yield from _field(
            "Trusted proxies: addresses or CIDRs, comma separated (--trusted-proxy)",
            ", ".join(g.trusted_proxies),
            "gw-proxies",
            placeholder="none",
        )
        yield Checkbox(
            "They send PROXY headers (--proxy-protocol; HAProxy's send-proxy-v2)",
            g.proxy_protocol,
            id="gw-proxy-protocol",
            compact=True,
        )

    def result(self) -> GatewayPart:
        cert = self.field("#gw-cert")
        return _build(
            GatewayPart,
            on=self.on,
            tls=self.query_one("#gw-tls", Checkbox).value and not cert,
            cert=cert,
            key=self.field("#gw-key"),
            trusted_proxies=tuple(self.field("#gw-proxies").split(",")),
            proxy_protocol=self.query_one("#gw-proxy-protocol", Checkbox).value,
        )


def _text(value: int | None) -> str:
    return "" if value is None else str(value)


DIALOGS: dict[str, type[PartDialog]] = {
    d.PART_ID: d
    for d in (
        ControlPlaneDialog,
        StoreDialog,
        NodeDialog,
        StarterDialog,
        LimitsDialog,
        AdminDialog,
        MirrorDialog,
        GatewayDialog,
    )
}


def dialog_for(part_id: str, plan: SetupPlan, machine: Machine | None) -> PartDialog:
    return DIALOGS[part_id](plan, machine)
