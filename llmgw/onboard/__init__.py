"""Onboarding machines over SSH: ``llmgw node add`` and ``llmgw node remove``.

``add_node(plan)`` and ``remove_node(plan)`` are async generators of
``StepEvent``; the CLI and the console's Add node dialog run the same ones.
"""

from llmgw.onboard.events import OnboardError, StepEvent
from llmgw.onboard.flow import add_node
from llmgw.onboard.plan import AddPlan, RemovePlan
from llmgw.onboard.remove import remove_node
from llmgw.onboard.ssh import SshTarget

__all__ = [
    "AddPlan",
    "OnboardError",
    "RemovePlan",
    "SshTarget",
    "StepEvent",
    "add_node",
    "remove_node",
]
