"""A probe that reports a recorded inventory instead of this machine.

It plugs in where the real probe does (``hardware.probe: fake`` in
agent.yaml), so the control plane, placement and console are exercised
against an 8x H100 node on a laptop. The node says it is fake everywhere:
``host.fake`` is set and ``host.probe`` reads "fake:<name>".

Processes on the fake cards come from a directory, since no driver can say
who holds memory on a card that is not there. The contract, which engine
stand-ins (the vLLM and SGLang ones of the tests, the supervisor's fake
engine) follow:

- With a fake probe, the agent sets ``LLMGW_FAKE_GPU_PROCS=<agent data
  dir>/fake-gpu/procs`` in every engine's environment (``engine_env``).
- An engine stand-in that "uses" its cards writes
  ``$LLMGW_FAKE_GPU_PROCS/<its pid>.json`` =
  ``{"pid": <pid>, "cuda_visible_devices": "<its CUDA_VISIBLE_DEVICES>",
  "used_bytes_per_gpu": <int>}`` (write a temp file, then rename it).
- The probe maps each entry of ``cuda_visible_devices`` as CUDA would: a
  number is a card in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID), a
  "GPU-…" or "MIG-…" string a card or MIG instance by uuid; the list ends at
  the first entry that names nothing (CUDA stops there too); an absent key
  (null) is every whole card. Each unit found is reported as holding
  ``used_bytes_per_gpu`` for that pid. Files of pids that no longer run are
  ignored, so a killed stand-in stops holding memory as a real one would.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import psutil
from pydantic import ValidationError

from llmgw.errors import DiscoveryError
from llmgw.inventory import GpuInfo, GpuSampleInfo, Inventory

log = logging.getLogger(__name__)

FIXTURES_DIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "hardware"

# An idle card sits around this; plausible enough for a dashboard.
IDLE_TEMPERATURE_C = 35
# The variable that tells engine stand-ins where to say what they hold.
PROCS_ENV = "LLMGW_FAKE_GPU_PROCS"


def procs_dir_for(data_dir: Path) -> Path:
    """Where a fake-probe agent's engines write what they hold on its cards."""
    return Path(data_dir) / "fake-gpu" / "procs"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def visible_units(gpus: list[GpuInfo], cuda_visible_devices: str | None) -> list[int]:
    """The unit indexes a CUDA_VISIBLE_DEVICES value names on these cards, as CUDA reads it."""
    cards = sorted((g for g in gpus if not g.mig_instance), key=lambda g: (g.pci_bus_id, g.index))
    if cuda_visible_devices is None:
        return [g.index for g in cards]
    by_uuid = {g.uuid: g.index for g in gpus}
    units: list[int] = []
    for entry in cuda_visible_devices.split(","):
        entry = entry.strip()
        if entry.isdigit() and int(entry) < len(cards):
            units.append(cards[int(entry)].index)
        elif entry in by_uuid:
            units.append(by_uuid[entry])
        else:
            break
    return units


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

    def __init__(self, inventory: Inventory, name: str, procs_dir: Path | None = None) -> None:
        host = inventory.host.model_copy(update={"fake": True, "probe": f"fake:{name}"})
        self._inventory = inventory.model_copy(update={"host": host})
        self.name = name
        # Where engine stand-ins say what they hold (see the module's docstring).
        self.procs_dir = procs_dir

    @classmethod
    def from_fixture(
        cls, name_or_path: str, fixtures_dir: Path = FIXTURES_DIR, *, procs_dir: Path | None = None
    ) -> FakeGpuProbe:
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
        return cls(inventory, path.stem, procs_dir)

    def inventory(self) -> Inventory:
        return self._inventory.model_copy(deep=True)

    def engine_env(self) -> dict[str, str]:
        """What every engine's environment gets: where to say what it holds."""
        return {PROCS_ENV: str(self.procs_dir)} if self.procs_dir is not None else {}

    def mem_bandwidth_gbs(self) -> float:
        """The recorded machine's figure (0 when the recording has none): nothing is measured."""
        return self._inventory.host.mem_bandwidth_gbs

    def _held(self) -> list[tuple[int, int, list[int]]]:
        """(pid, bytes per unit, units) of every live stand-in that wrote what it holds."""
        if self.procs_dir is None:
            return []
        try:
            files = sorted(self.procs_dir.glob("*.json"))
        except OSError:
            return []
        held = []
        gpus = self._inventory.gpus
        for path in files:
            try:
                entry = json.loads(path.read_text())
                pid = int(entry["pid"])
                used = int(entry.get("used_bytes_per_gpu", 0))
                visible = entry.get("cuda_visible_devices")
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.debug("fake GPU process file %s not read: %s", path, e)
                continue
            if _alive(pid):
                held.append((pid, used, visible_units(gpus, visible)))
            else:
                # Gone, as a dead engine's memory is: and its pid may come back as a
                # process that holds nothing.
                path.unlink(missing_ok=True)
        return held

    def processes(self) -> dict[int, list[tuple[int, int]]]:
        """Unit index -> (pid, bytes) of the stand-ins holding memory on it."""
        out: dict[int, list[tuple[int, int]]] = {
            g.index: [] for g in self._inventory.gpus if g.mig_mode != "enabled"
        }
        for pid, used, units in self._held():
            for unit in units:
                if unit in out:
                    out[unit].append((pid, used))
        return out

    def sample(self) -> list[GpuSampleInfo]:
        used: dict[int, int] = {}
        for _pid, bytes_, units in self._held():
            for unit in units:
                used[unit] = used.get(unit, 0) + bytes_
        return [
            GpuSampleInfo(
                index=g.index,
                memory_used_bytes=used.get(g.index, 0),
                temperature_c=IDLE_TEMPERATURE_C,
            )
            for g in self._inventory.gpus
        ]
