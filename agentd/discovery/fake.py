"""A probe that reports a recorded inventory instead of this machine.

It plugs in where the real probe does (``hardware.probe: fake`` in
agent.yaml), so the control plane, placement and console are exercised
against an 8x H100 node on a laptop. The node says it is fake everywhere:
``host.fake`` is set and ``host.probe`` reads "fake:<name>".
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from llmgw.errors import DiscoveryError
from llmgw.inventory import GpuSampleInfo, Inventory

FIXTURES_DIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hardware"

# An idle card sits around this; plausible enough for a dashboard.
IDLE_TEMPERATURE_C = 35


def fixture_names(fixtures_dir: Path = FIXTURES_DIR) -> list[str]:
    """The recorded inventories available by name."""
    return sorted(p.stem for p in fixtures_dir.glob("*.json"))


def resolve_fixture(name_or_path: str, fixtures_dir: Path = FIXTURES_DIR) -> Path:
    """The JSON file a fixture name or path stands for; DiscoveryError when none."""
    looks_like_path = "/" in name_or_path or name_or_path.endswith(".json")
    if looks_like_path:
        path = Path(name_or_path).expanduser()
        if path.is_file():
            return path
        raise DiscoveryError(
            f"hardware fixture {name_or_path} does not exist",
            hint="set hardware.fixture in agent.yaml to a JSON file or one of: "
            + ", ".join(fixture_names(fixtures_dir)),
        )
    path = fixtures_dir / f"{name_or_path}.json"
    if name_or_path and not name_or_path.startswith(".") and path.is_file():
        return path
    names = ", ".join(fixture_names(fixtures_dir)) or f"(none in {fixtures_dir})"
    what = f"unknown hardware fixture {name_or_path!r}" if name_or_path else "no hardware fixture"
    raise DiscoveryError(
        f"{what}; the recorded ones are: {names}",
        hint="set hardware.fixture in agent.yaml to one of them, or to a path to a JSON file",
    )


class FakeGpuProbe:
    """Reports a recorded Inventory, marked fake, and idle GPU samples."""

    def __init__(self, inventory: Inventory, name: str) -> None:
        host = inventory.host.model_copy(update={"fake": True, "probe": f"fake:{name}"})
        self._inventory = inventory.model_copy(update={"host": host})
        self.name = name

    @classmethod
    def from_fixture(cls, name_or_path: str, fixtures_dir: Path = FIXTURES_DIR) -> FakeGpuProbe:
        """A probe for tests/fixtures/hardware/<name>.json, or for a JSON file's path."""
        path = resolve_fixture(name_or_path, fixtures_dir)
        try:
            inventory = Inventory.model_validate_json(path.read_bytes())
        except OSError as e:
            raise DiscoveryError(f"cannot read hardware fixture {path}: {e.strerror}") from e
        except ValidationError as e:
            raise DiscoveryError(
                f"hardware fixture {path} is not a recorded inventory: {e}",
                hint="it must hold a JSON dump of llmgw.inventory.Inventory",
            ) from e
        return cls(inventory, path.stem)

    def inventory(self) -> Inventory:
        return self._inventory.model_copy(deep=True)

    def processes(self) -> dict[int, list[tuple[int, int]]]:
        """GPU index -> (pid, bytes): none unless a test sets ``self.gpu_processes``."""
        return dict(getattr(self, "gpu_processes", {}))

    def sample(self) -> list[GpuSampleInfo]:
        return [
            GpuSampleInfo(index=g.index, temperature_c=IDLE_TEMPERATURE_C)
            for g in self._inventory.gpus
        ]
