"""What the control plane reads from a node's latest WeightsReport: models it holds whole.

The agent's cache keys are ``<model>`` (a model's fetched file) or
``hf/<org>/<repo>/<commit>`` (a repository at a commit, which any model naming
it at that commit runs on). Pure: reports and models in, names out.
"""

from __future__ import annotations

from collections.abc import Iterable

from llmgw.catalog.model import Model
from proto.llmgw.v1 import WeightsReport

HF_PREFIX = "hf/"


def repo_key(model: Model) -> str:
    """The cache key a model's weights lie under when it names a whole repository; "" if not."""
    try:
        src = model.fetch_source
    except ValueError:
        return ""
    if not src.is_repo or not src.revision:
        return ""
    return f"{HF_PREFIX}{src.location}/{src.revision}"


def cached_keys(report: WeightsReport | None) -> set[str]:
    """The keys of the entries a report holds whole (downloads under way left out)."""
    if report is None:
        return set()
    return {e.key for e in report.entries if not e.partial}


def models_cached(report: WeightsReport | None, models: Iterable[Model] = ()) -> set[str]:
    """The names of models whose weights a node holds whole, by its latest report.

    A model's own entry (its key is the model's name) counts; with ``models``
    (the catalog), so does a repository at the commit a model pins.
    """
    keys = cached_keys(report)
    names = {k for k in keys if not k.startswith(HF_PREFIX)}
    for m in models:
        key = repo_key(m)
        if key and key in keys:
            names.add(m.name)
    return names
