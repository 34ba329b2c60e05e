"""The endpoints of a model an outside provider answers: one per key file.

``ExternalEndpoints.targets`` turns a catalog model's ``external`` section
into router targets — ``external:MODEL#1``, ``#2`` … — each with the
provider's URL, its own ``authorization`` header and the provider's name of
the model. Key files are read here, by the control plane: again when they
change (looked at every ``RECHECK_S``, a stat each), so a rotated key takes
effect without a restart. Only files in the providers' key directory are
read (gatewayd.catalog.key_files; a catalog kept from before that rule may
name others). A file that cannot be read is left out with a warning naming
the file, never its content; the others keep answering.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gatewayd.catalog.key_files import key_file_mark, read_key_file
from gatewayd.gateway.routing.router import Target
from llmgw.catalog.external import External

log = logging.getLogger(__name__)

# How often a model's key files are looked at again (a stat; a read if changed).
RECHECK_S = 5.0


@dataclass(slots=True)
class _KeyFile:
    mark: tuple[int, int, int] | None  # (inode, size, mtime_ns) when last read
    key: str  # "" when it could not be read
    problem: str  # why not, as last warned


@dataclass(slots=True)
class _Built:
    spec: object  # the catalog's spec dict the targets were built from
    at: float
    targets: list[Target]


class ExternalEndpoints:
    """Targets of external models, rebuilt when the spec changes or ``recheck_s`` passes."""

    def __init__(
        self,
        *,
        keys_dir: Path | None,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Paths.provider_keys_dir: the only place key files are read from (None: nowhere).
        self._keys_dir = keys_dir
        self._recheck_s = recheck_s
        self._clock = clock
        self._files: dict[str, _KeyFile] = {}
        self._built: dict[str, _Built] = {}

    def targets(self, name: str, spec: dict) -> list[Target]:
        """The endpoints of model ``name`` whose catalog spec (a dict) is ``spec``."""
        now = self._clock()
        built = self._built.get(name)
        if built is not None and built.spec is spec and now - built.at < self._recheck_s:
            return built.targets
        targets = self._build(name, spec)
        self._built[name] = _Built(spec, now, targets)
        return targets

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop what is held for models no longer in the catalog."""
        for name in [n for n in self._built if not keep(n)]:
            del self._built[name]

    def _build(self, name: str, spec: dict) -> list[Target]:
        try:
            external = External.model_validate(spec.get("external") or {})
        except ValidationError as e:
            # The catalog validated it on the way in; a hand-edited store is the one way here.
            log.warning("model %s: its external section is not valid (%s); no endpoints", name, e)
            return []
        base = external.base_url
        upstream = external.upstream_model(name)
        if not external.api_key_files:
            # A provider that asks no key (one on the site's own network).
            return [Target(f"external:{name}", base, upstream_model=upstream, external=True)]
        out = []
        for i, kf in enumerate(external.api_key_files):
            key = self._read(kf.file, external.endpoint(name, i))
            if not key:
                continue
            out.append(
                Target(
                    external.endpoint(name, i),
                    base,
                    upstream_model=upstream,
                    authorization=f"Bearer {key}",
                    weight=kf.share,
                    external=True,
                )
            )
        return out

    def _read(self, path: str, endpoint: str) -> str:
        """The key in ``path``, read again only if the file changed; "" if it cannot be."""
        held = self._files.get(path)
        try:
            mark = key_file_mark(path, self._keys_dir)
            if held is not None and held.mark == mark:
                return held.key
            mark, text = read_key_file(path, self._keys_dir)
            key = text.strip()
            problem = "" if key else "it is empty"
        except (OSError, UnicodeDecodeError) as e:
            mark, key = None, ""
            problem = getattr(e, "strerror", None) or e.__class__.__name__
        if "\n" in key or "\r" in key:
            key, problem = "", "it holds more than one line"
        if problem and (held is None or held.problem != problem):
            log.warning(
                "the key file %s of %s cannot be used (%s); the endpoint is left out until it can",
                path,
                endpoint,
                problem,
            )
        elif not problem and held is not None and held.problem:
            log.info("the key file %s of %s is readable again", path, endpoint)
        self._files[path] = _KeyFile(mark, key, problem)
        return key
