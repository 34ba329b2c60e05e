"""Installing from a mirror by the control plane's pins: every wheel held to the sha256 it was added with.

The mirror is trusted to serve, not to say what is genuine. So ``node add``
installs from it in two steps:

1. the node's pip, as the login user (not root), downloads what llmgw and the
   llama.cpp wheel need from the mirror's index alone, wheels only
   (``--only-binary :all:``: nothing from the mirror runs while resolving);
2. each file downloaded is looked up in the control plane's pins
   (llmgw/mirror/pins.py, made when ``ctl mirror add DIR --wheels`` hashed it
   on the control plane): one the pins do not name, or name with another
   sha256, stops the install naming it; the rest go into a requirements file
   of ``name==version --hash=sha256:PIN`` lines that root's pip installs with
   ``--require-hashes --no-index`` from the downloaded folder, so pip itself
   refuses a byte that changed since.

The llmgw wheel is the control plane's own build, pinned by its sha256 as copied.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from llmgw.onboard.events import OnboardError

# Where pip's downloads land on the node, in the staging folder.
WHEELS_DIR = "mirror-wheels"
# pip's own words when a file is not the hash a requirement pins.
_MISMATCH = "DO NOT MATCH THE HASHES"
_MISMATCH_FILE = re.compile(r"from (?:file|https?)://\S*/([^/\s#]+\.whl)")

PIN_HINT = (
    "put the wheels through the control plane, which pins each one's sha256: "
    "llmgw ctl mirror add DIR --wheels (DIR holding the files as pip download wrote them)"
)


def parse_sums(output: str) -> dict[str, str]:
    """``sha256sum`` lines as {file name: sha256}."""
    out: dict[str, str] = {}
    for line in output.splitlines():
        digest, _, path = line.strip().partition("  ")
        if len(digest) == 64 and path:
            out[path.rsplit("/", 1)[-1]] = digest
    return out


def wheel_requirement(file_name: str, sha256: str) -> str:
    """``name==version --hash=sha256:…`` of one wheel file (PEP 427: name-version-…whl)."""
    name, version = file_name.split("-")[:2]
    return f"{name}=={version} --hash=sha256:{sha256}"


def pinned_requirements(
    mirror_url: str,
    found: Mapping[str, str],
    pins: Mapping[str, str],
    own: tuple[str, str],
) -> str:
    """The requirements file of the wheels pip downloaded (``found``: name → sha256 on the
    node), each with its pin; OnboardError naming any wheel replaced on the mirror or not
    pinned at all. ``own``: (file name, sha256) of the llmgw wheel the control plane built."""
    own_name, own_sha = own
    pinned = {**pins, own_name: own_sha}
    replaced = [n for n in sorted(found) if n in pinned and pinned[n] != found[n]]
    if replaced:
        said = "; ".join(
            f"{n} has sha256 {found[n]}, the control plane pinned {pinned[n]}" for n in replaced
        )
        raise OnboardError(
            f"the mirror {mirror_url} serves {', '.join(replaced)} with other bytes than the "
            f"control plane added ({said}): it was replaced on the mirror, and the node "
            "installed nothing from it",
            hint="find out who replaced it (writes take the mirror's admin token, "
            "<secrets>/mirror-admin-token, or a peer copied it), then put the wheel the control "
            "plane added back: llmgw ctl mirror add FILE --wheels",
        )
    unpinned = [n for n in sorted(found) if n not in pinned]
    if unpinned:
        raise OnboardError(
            f"the control plane pins no sha256 for {', '.join(unpinned)} from the mirror "
            f"{mirror_url} (put there without it), so the node installs none of it",
            hint=PIN_HINT,
        )
    return "".join(wheel_requirement(n, pinned[n]) + "\n" for n in sorted(found))


def hash_mismatch(output: str) -> list[str]:
    """The wheel files pip refused for a hash other than the requirement's, or []."""
    if _MISMATCH not in output:
        return []
    return list(dict.fromkeys(_MISMATCH_FILE.findall(output)))


def mismatch_error(mirror_url: str, files: list[str]) -> OnboardError:
    return OnboardError(
        f"pip refused {', '.join(files)} from the mirror {mirror_url}: its sha256 is not the "
        "one the control plane pinned (it changed on the node's disk after the check, or on "
        "the mirror); nothing of it was installed",
        hint="run node add again; if it says so again, the mirror serves other bytes than "
        "were added: put the wheel back with llmgw ctl mirror add FILE --wheels",
    )
