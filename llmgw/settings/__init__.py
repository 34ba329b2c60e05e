"""The cluster's kept settings: the document, its keys, and the check of a whole version.

``document`` holds the schema (``ClusterSettings``), ``keys`` the dotted keys
people write and the differences between two versions, ``check`` the
refusals that name a key and what it expects. Pure: no I/O; gatewayd keeps
the versions in its store and applies them, ``llmgw ctl config`` edits them.
"""

from llmgw.settings.check import SettingsRefused, check_document, dump_document, load_document
from llmgw.settings.document import AgentLiveSettings, ClusterSettings

__all__ = [
    "AgentLiveSettings",
    "ClusterSettings",
    "SettingsRefused",
    "check_document",
    "dump_document",
    "load_document",
]
