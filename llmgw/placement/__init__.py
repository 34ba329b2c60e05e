"""Placement (pure): which node and cards a model replica goes to, or why none can take it.

filters.py drops nodes with a reason each, fit.py finds the first layout of
the plan a node can hold and on which cards, scorers.py ranks the nodes that
fit, decide.py puts the three together. For a large cluster, index.py keeps
the nodes by kind and free memory and search.py finds the same choice on it
without weighing every node. No I/O: the controller hands in
``NodeCandidate``s built from what agents report.
"""

from llmgw.placement.candidates import ROLE_LABEL, NodeCandidate, PlacementRequest
from llmgw.placement.decide import Decision, Placement, place
from llmgw.placement.filters import CHAIN, FILTERS
from llmgw.placement.fit import Fit, Misfit, fit_node
from llmgw.placement.index import NodeIndex
from llmgw.placement.scorers import Score

__all__ = [
    "CHAIN",
    "FILTERS",
    "ROLE_LABEL",
    "Decision",
    "Fit",
    "Misfit",
    "NodeCandidate",
    "NodeIndex",
    "Placement",
    "PlacementRequest",
    "Score",
    "fit_node",
    "place",
]
