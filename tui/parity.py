"""What each screen and action of the cluster console mirrors: the ``llmgw`` command (``ctl`` mostly).

Screens ≡ commands: every screen of the cluster console (``tui.app`` and
``tui.screens``) and every action it offers (a key in ``BINDINGS`` or an
``action_*`` method, of the app and of each screen) is declared here. A
screen or action that shows data or changes something names the command that
shows the same data or makes the same change; one that only moves around the
console (switching screens, closing a dialog, quitting) says so, in words.

``tests/tui/parity/test_parity.py`` walks ``surface()``: a screen or action with no
declaration fails, and each declared command is run with ``--json`` against
the same live cluster the console shows, to check both say the same. A
command with no screen is fine. The command palette offers the same actions
(the app lists the shown screen's bindings there) and a click on a tab is
``switch_mode``: neither adds one of its own.

Commands are written as after ``llmgw ctl``, with ``{placeholders}`` for what
the screen supplies: ``"cordon {node}"``, ``"model scale {model} {replicas}"``.
The few outside ``ctl`` (Add node is ``llmgw node add {host}``, run on the
control plane) are declared with ``cmd()``, written as after ``llmgw``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass

from textual.app import App
from textual.binding import Binding
from textual.screen import Screen

# Where the cluster console's screens live; a package's subpackages are walked
# too (tui.screens.nodes, tui.screens.keys …), so a screen in any of them must be
# declared. The node console (tui.node) and setup (tui.setup) read this
# machine, not the control plane: no ctl command mirrors them.
CONSOLE_MODULES = ("tui.app",)
CONSOLE_PACKAGES = ("tui.screens",)

Item = tuple[str, str | None]  # (class name, action name) — None: the screen itself


@dataclass(frozen=True)
class Mirror:
    """What one screen or action mirrors.

    ``commands``: what it shows or does, as ``llmgw`` argv templates (``("ctl", …)``
    for most; ``OUTSIDE_CTL`` names the others).
    ``shown_by``: for an action that changes something, the command whose
    ``--json`` shows the change (``cordon {node}`` is shown by ``nodes``).
    ``opens``: the action opens that screen and shows what the screen mirrors.
    ``ui_only``: why it needs no command (it only moves around the console).
    """

    commands: tuple[tuple[str, ...], ...] = ()
    shown_by: tuple[str, ...] = ()
    opens: str = ""
    ui_only: str = ""

    @property
    def checked_live(self) -> bool:
        """Whether a live cluster can show what this declares (everything but ui_only)."""
        return bool(self.commands or self.opens)


def ctl(*commands: str, shown_by: str = "") -> Mirror:
    """Mirrors ``llmgw ctl COMMAND`` for each of ``commands`` ("nodes", "cordon {node}")."""
    return Mirror(
        commands=tuple(("ctl", *c.split()) for c in commands),
        shown_by=("ctl", *shown_by.split()) if shown_by else (),
    )


# The commands outside `llmgw ctl` a screen may mirror: their --json prints step events.
OUTSIDE_CTL = (("node", "add"),)


def cmd(command: str, *, shown_by: str = "") -> Mirror:
    """Mirrors ``llmgw COMMAND`` (one of ``OUTSIDE_CTL``); ``shown_by`` is a ``ctl`` command."""
    argv = tuple(command.split())
    if argv[:2] not in OUTSIDE_CTL:
        raise ValueError(f"`llmgw {command}`: use ctl() for ctl commands, or add it to OUTSIDE_CTL")
    return Mirror(commands=(argv,), shown_by=("ctl", *shown_by.split()) if shown_by else ())


def opens(screen: str) -> Mirror:
    """Opens ``screen``, which mirrors what its own declaration says."""
    return Mirror(opens=screen)


def ui_only(why: str) -> Mirror:
    """Shows nothing of the cluster and changes nothing in it; ``why`` says what it does."""
    return Mirror(ui_only=why)


_CLOSES = ui_only("closes the dialog")
_FORM = ui_only("a form: what it sends is the command of the action that opened it")
_ANSWER = ui_only("answers the question; the action that asked makes the change")

PARITY: dict[Item, Mirror] = {
    # -- the app: one mode per screen ------------------------------------------
    ("LlmgwApp", "switch_mode('overview')"): opens("OverviewScreen"),
    ("LlmgwApp", "switch_mode('nodes')"): opens("NodesScreen"),
    ("LlmgwApp", "switch_mode('models')"): opens("ModelsScreen"),
    ("LlmgwApp", "switch_mode('replicas')"): opens("ReplicasScreen"),
    ("LlmgwApp", "switch_mode('keys')"): opens("KeysScreen"),
    ("LlmgwApp", "switch_mode('usage')"): opens("UsageScreen"),
    ("LlmgwApp", "switch_mode('batches')"): opens("BatchesScreen"),
    ("LlmgwApp", "switch_mode('mirror')"): opens("MirrorScreen"),
    ("LlmgwApp", "switch_mode('mcp')"): opens("McpScreen"),
    ("LlmgwApp", "switch_mode('settings')"): opens("SettingsScreen"),
    ("LlmgwApp", "refresh"): ui_only("reads the shown screen's own command again"),
    ("LlmgwApp", "quit"): ui_only("leaves the console"),
    ("LlmgwApp", "toggle_theme"): ui_only("switches between the dark and the light theme"),
    # -- overview ----------------------------------------------------------------
    # The header's state line is drawn from the same replies. The requests card's
    # rates are the console's own arithmetic over successive `ctl status` counters
    # (requests_total, errors_total): no command prints a rate.
    ("OverviewScreen", None): ctl("status", "nodes", "models", "replicas", "warnings"),
    # -- nodes -------------------------------------------------------------------
    # The pane under the table: the selected node's GPUs and the replicas on them,
    # its engines, and a drain's progress, counted from the replicas; its total to
    # move is the most the console has seen on the node since it opened (no command
    # keeps that number).
    ("NodesScreen", None): ctl("nodes", "replicas", "engines"),
    ("NodesScreen", "cordon"): ctl("cordon {node}", shown_by="nodes"),
    ("NodesScreen", "uncordon"): ctl("uncordon {node}", shown_by="nodes"),
    ("NodesScreen", "drain"): ctl("drain {node}", shown_by="nodes"),
    ("NodesScreen", "remove"): ctl("node rm {node}", shown_by="nodes"),
    ("NodesScreen", "label"): ctl("node label {node} {label} --rm {key}", shown_by="nodes"),
    ("LabelDialog", None): _FORM,
    ("NodesScreen", "details"): opens("NodeDetails"),
    ("NodeDetails", None): ctl("node show {node}"),
    ("NodeDetails", "dismiss"): _CLOSES,
    # What the node keeps on its disk: the line on top and the rows are `weights NODE`'s.
    ("NodesScreen", "weights"): opens("NodeWeights"),
    ("NodeWeights", None): ctl("weights {node}"),
    ("NodeWeights", "remove"): ctl("weights rm {node} {key}", shown_by="weights {node}"),
    ("NodeWeights", "dismiss"): _CLOSES,
    # Add node runs node add itself (the console is on the control plane, with its CA):
    # the dialog shows each step event as the command prints it; the node's row follows.
    ("NodesScreen", "add_node"): opens("AddNodeDialog"),
    ("AddNodeDialog", None): _FORM,
    ("AddNodeDialog", "add"): cmd("node add {host}", shown_by="nodes"),
    ("AddNodeDialog", "cancel"): _CLOSES,
    # -- models --------------------------------------------------------------------
    ("ModelsScreen", None): ctl("models"),
    ("ModelsScreen", "serve"): opens("ServeDialog"),
    ("ModelsScreen", "scale"): ctl("model scale {model} {replicas}", shown_by="models"),
    ("ModelsScreen", "remove"): ctl("model rm {model}", shown_by="models"),
    ("ModelsScreen", "explain"): opens("ExplainPlacement"),
    ("ModelsScreen", "resources"): ctl(
        "model resources {model} --cores {cores}", shown_by="model resources {model}"
    ),
    ("ResourcesDialog", None): ctl("model resources {model}"),
    ("ResourcesDialog", "cancel"): _CLOSES,
    ("ScaleDialog", None): _FORM,
    ("ScaleDialog", "cancel"): _CLOSES,
    ("ConfirmRemove", None): _FORM,
    ("ConfirmRemove", "confirm"): _ANSWER,
    ("ConfirmRemove", "cancel"): _ANSWER,
    ("ExplainPlacement", None): ctl("explain-placement {model}"),
    ("ExplainPlacement", "dismiss"): _CLOSES,
    ("ServeDialog", None): _FORM,
    ("ServeDialog", "plan"): ctl("model plan {source} --engine {engine}"),
    ("ServeDialog", "serve"): ctl(
        "model serve {source} --name {name} --engine {engine} --replicas {replicas} --cpu",
        shown_by="models",
    ),
    ("ServeDialog", "cancel"): _CLOSES,
    # -- replicas ------------------------------------------------------------------
    ("ReplicasScreen", None): ctl("replicas"),
    ("ReplicasScreen", "history"): opens("ReplicaDetails"),
    ("ReplicasScreen", "restart"): ctl("replica restart {replica}", shown_by="replicas"),
    # Its facts and history are the replica's row of `ctl replicas`; the log tail is `ctl logs`.
    ("ReplicaDetails", None): ctl("replicas", "logs {replica} --lines {lines}"),
    ("ReplicaDetails", "logs"): ctl("logs {replica} --lines {lines}"),
    ("ReplicaDetails", "restart"): ctl("replica restart {replica}", shown_by="replicas"),
    ("ReplicaDetails", "dismiss"): _CLOSES,
    # -- keys and tenancy ----------------------------------------------------------
    # The tree holds every level: `org list`, `team list` and `project list` together.
    ("KeysScreen", None): ctl("org list", "team list", "project list", "keys list"),
    ("KeysScreen", "new_level"): ctl(
        "org create {path}",
        "team create {path} --parents",
        "project create {path} --parents",
        shown_by="project list",
    ),
    ("KeysScreen", "rename"): ctl("project rename {path} {name}", shown_by="project list"),
    ("KeysScreen", "remove"): ctl("project rm {path}", shown_by="project list"),
    ("KeysScreen", "new_key"): ctl(
        "keys create --project {project} --name {name}", shown_by="keys list"
    ),
    ("KeysScreen", "revoke"): ctl("keys revoke {key}", shown_by="keys list"),
    ("KeysScreen", "rotate"): ctl("keys rotate {key} --overlap {overlap}", shown_by="keys list"),
    ("KeysScreen", "limits"): ctl("keys limits {scope} --rpm {rpm}", shown_by="keys list"),
    ("KeysScreen", "retention"): ctl("project retention {path} {keep}", shown_by="project list"),
    ("FormDialog", None): _FORM,
    ("FormDialog", "cancel"): _CLOSES,
    ("FormDialog", "submit"): ui_only("hands what was typed to the action that opened the form"),
    ("LevelDialog", None): _FORM,
    ("RenameDialog", None): _FORM,
    ("KeyDialog", None): _FORM,
    ("RotateDialog", None): _FORM,
    ("RetentionDialog", None): _FORM,
    # Filled in with the limits the Keys screen read: the key's row of `ctl keys list`.
    ("LimitsDialog", None): ctl("keys list"),
    # The reply of `ctl keys create` / `keys rotate`, the one time it carries the secret.
    ("SecretShown", None): ui_only("shows the reply of the action that made the key"),
    ("SecretShown", "copy"): ui_only("copies the secret to the terminal's clipboard"),
    ("SecretShown", "dismiss"): _CLOSES,
    ("Confirm", None): _FORM,
    ("Confirm", "confirm"): _ANSWER,
    ("Confirm", "cancel"): _ANSWER,
    # -- usage ---------------------------------------------------------------------
    ("UsageScreen", None): ctl("usage --by {by} --from {from} --to {to}"),
    ("UsageScreen", "next_range"): ctl("usage --by {by} --from {from} --to {to}"),
    ("UsageScreen", "next_grouping"): ctl("usage --by {by} --from {from} --to {to}"),
    # -- batches -------------------------------------------------------------------
    # The table is `batches list`; the pane under it, the selected batch's `batches show`.
    ("BatchesScreen", None): ctl("batches list", "batches show {batch}"),
    ("BatchesScreen", "cancel_batch"): ctl("batches cancel {batch}", shown_by="batches list"),
    # -- the model mirror ----------------------------------------------------------
    # The mirrors, what the first one up holds and pulls: `mirror list`; the disk line,
    # `mirror du`; the peers with their lag, `mirror peers list`. Add follows the pull
    # on the progress line as `mirror add` does with its bar.
    ("MirrorScreen", None): ctl("mirror list", "mirror du", "mirror peers list"),
    ("MirrorScreen", "add"): ctl("mirror add {source} --include {glob}", shown_by="mirror list"),
    ("MirrorScreen", "remove"): ctl("mirror rm {repo}@{commit} --yes", shown_by="mirror list"),
    ("MirrorAddDialog", None): _FORM,
    # -- the MCP gateway -----------------------------------------------------------
    # The servers table is `mcp list` (llmgw:admin first) and the panel under it the
    # words it ends with (how an agent reaches /mcp); the grants table, `mcp grants`.
    ("McpScreen", None): ctl("mcp list", "mcp grants"),
    ("McpScreen", "add"): ctl(
        "mcp add {name} --url {url} --header {header} --bearer-file {file} --rate {rate}",
        shown_by="mcp list",
    ),
    ("McpScreen", "test"): ctl("mcp test {name}"),
    ("McpScreen", "grant"): ctl("mcp grant {who} {what}", shown_by="mcp grants"),
    ("McpScreen", "revoke"): ctl("mcp revoke {who} {what}", shown_by="mcp grants"),
    ("McpScreen", "change"): ctl(
        "mcp change {name} --url {url} --timeout {timeout}", shown_by="mcp list"
    ),
    ("McpScreen", "credential"): ctl("mcp change {name} --bearer-file {file}", shown_by="mcp list"),
    ("McpScreen", "turn_off"): ctl("mcp change {name} --disable", shown_by="mcp list"),
    ("McpScreen", "turn_on"): ctl("mcp change {name} --enable", shown_by="mcp list"),
    ("McpScreen", "remove"): ctl("mcp remove {name} --yes", shown_by="mcp list"),
    ("McpServerDialog", None): _FORM,
    ("CredentialDialog", None): _FORM,
    ("GrantDialog", None): _FORM,
    # -- the kept settings ---------------------------------------------------------
    # The head and the document are `config get`; the table, `config history`; the
    # pane under it, the selected version against the one it was made from.
    ("SettingsScreen", None): ctl("config get", "config history", "config diff {from} {to}"),
    ("SettingsScreen", "change"): ctl(
        "config set {assignment} --comment {comment}", shown_by="config get"
    ),
    ("SettingsScreen", "rollback"): ctl("config rollback {version}", shown_by="config history"),
    ("SettingDialog", None): _FORM,
}


# -- what the console offers -------------------------------------------------------


def console_classes() -> list[type]:
    """The cluster console's app and screen classes, each from the module that defines it."""
    modules = [importlib.import_module(m) for m in CONSOLE_MODULES]
    for name in CONSOLE_PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, f"{name}."):
            modules.append(importlib.import_module(info.name))
    found: dict[str, type] = {}
    for module in modules:
        for cls in vars(module).values():
            if (
                inspect.isclass(cls)
                and cls.__module__ == module.__name__
                and issubclass(cls, (App, Screen))
            ):
                found[cls.__qualname__] = cls
    return [found[k] for k in sorted(found)]


def own_actions(cls: type) -> list[str]:
    """The actions ``cls`` itself adds: its ``BINDINGS``' actions and its ``action_*`` methods.

    Inherited ones belong to the class that defines them (``FormDialog``'s
    cancel is declared once); Textual's own (``dismiss`` on a modal screen is
    Textual's method, but binding it is ours) count where they are bound. A
    mixin of ours that is no screen itself (``NodeActions``) lends its
    ``action_*`` methods to the screens it is mixed into.
    """
    names: list[str] = []
    for binding in cls.__dict__.get("BINDINGS", []):
        action = binding.action if isinstance(binding, Binding) else binding[1]
        names.append(action)
    owners = [cls] + [
        base
        for base in cls.__mro__[1:]
        if base.__module__.startswith("tui.") and not issubclass(base, (App, Screen))
    ]
    for owner in owners:
        for attr, value in owner.__dict__.items():
            if attr.startswith("action_") and callable(value):
                names.append(attr.removeprefix("action_"))
    return list(dict.fromkeys(names))


def surface() -> Iterator[Item]:
    """Every screen (``(name, None)``) and every action of the cluster console."""
    for cls in console_classes():
        if issubclass(cls, Screen):
            yield cls.__qualname__, None
        for action in own_actions(cls):
            yield cls.__qualname__, action


def undeclared() -> list[Item]:
    """Screens and actions the console offers that ``PARITY`` does not declare."""
    return [item for item in surface() if item not in PARITY]


def stale() -> list[Item]:
    """Declarations for a screen or action the console no longer has."""
    offered = set(surface())
    return [item for item in PARITY if item not in offered]


def describe_item(item: Item) -> str:
    cls, action = item
    return cls if action is None else f"{cls}: {action}"
