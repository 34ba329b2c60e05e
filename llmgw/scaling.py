"""How the control plane sizes a model between its ``scale: {min, max}``: the settings.

``scaling`` says when a model's load counts as high or low and how long it
must stay so before a replica is added or taken away; ``on_demand`` how long
a model scaled to ``min: 0`` keeps its replica once nobody asks for it. Both
are kept settings (``llmgw ctl config set scaling.up_after_s 20``), in force
on the leader as they change. Pure pydantic: no I/O.

Load is counted per slot: what the model's ready replicas run and hold
queued (the engines' own figures, or what the gateway has in flight on them,
whichever is higher), over their slots. The two thresholds stand apart so
that a change never undoes itself (hysteresis): a replica is added above
``high_per_slot``, and one is taken away only when the load would stay
under ``low_per_slot`` with one replica fewer.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScalingConfig(_Strict):
    """When a model between its min and max gets a replica more or one fewer."""

    # Load per slot above this, on average over up_after_s, adds a replica.
    high_per_slot: Annotated[float, Field(gt=0, le=100)] = 0.8
    # Load per slot of one replica fewer under this, over down_after_s, removes one.
    low_per_slot: Annotated[float, Field(ge=0, le=100)] = 0.4
    # Requests queued in the engines per replica at or above this count as high too.
    high_queue_per_replica: Annotated[float, Field(gt=0, le=10_000)] = 1.0
    # A smoothed time to first token above this counts as high (0: not looked at).
    high_ttft_s: Annotated[float, Field(ge=0, le=3600)] = 0.0
    up_after_s: Annotated[float, Field(gt=0, le=86_400)] = 30.0
    down_after_s: Annotated[float, Field(gt=0, le=86_400)] = 300.0
    # After a change, the next waits at least this long.
    cooldown_s: Annotated[float, Field(ge=0, le=86_400)] = 60.0
    # A replica stopped while it answers is stopped once its requests finish, or after this.
    drain_timeout_s: Annotated[float, Field(gt=0, le=86_400)] = 600.0

    @model_validator(mode="after")
    def _apart(self) -> ScalingConfig:
        if self.low_per_slot >= self.high_per_slot:
            raise ValueError(
                f"low_per_slot ({self.low_per_slot:g}) must be under high_per_slot "
                f"({self.high_per_slot:g}), or every change would undo itself"
            )
        return self


class OnDemandConfig(_Strict):
    """A ``min: 0`` model: started by its first request, stopped when nobody asks for it."""

    # No request for this long stops the model's replicas and frees their cards.
    evict_after_idle_s: Annotated[float, Field(gt=0, le=30 * 86_400)] = 120.0
    # A replica started on demand is never stopped for idleness before it is this old.
    min_lifetime_s: Annotated[float, Field(ge=0, le=30 * 86_400)] = 300.0


# The priority classes a cluster starts with; a model naming none is "normal".
DEFAULT_CLASSES = {"high": 200, "normal": 100, "low": 50}
NORMAL = "normal"


def check_classes(classes: dict[str, int]) -> dict[str, int]:
    """The kept setting ``classes``: names to priorities, "normal" among them."""
    if NORMAL not in classes:
        raise ValueError('the classes must keep "normal" (the class of a model that names none)')
    for name, priority in classes.items():
        if not name or len(name) > 63 or not name.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"class name {name!r}: letters, digits, '-' or '_', at most 63")
        if not isinstance(priority, int) or not -1_000_000 <= priority <= 1_000_000:
            raise ValueError(f"class {name}: the priority must be a whole number")
    return classes


# The ``classes`` setting as server.yaml and the kept settings both hold it.
Classes = Annotated[dict[str, int], AfterValidator(check_classes)]


def default_classes() -> dict[str, int]:
    return dict(DEFAULT_CLASSES)
