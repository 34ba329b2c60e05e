"""A catalog entry: a model, where its weights come from, and how to run it.

Pure pydantic: no I/O. The store keeps these as JSON; the admin API carries
them; placement and planning read them.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmgw.catalog.external import EXTERNAL_SOURCE, External
from llmgw.catalog.price import Price

Engine = Literal["llama.cpp", "vllm", "sglang", "sim"]
ENGINES: tuple[str, ...] = ("llama.cpp", "vllm", "sglang", "sim")

# Formats whose loading runs code (Python pickles): refused unless a model says
# its files were checked (allow_pickle).
PICKLE_EXTS = (".bin", ".pt", ".pt2", ".pth", ".ckpt", ".pkl", ".pickle")
PICKLE_HINT = "set allow_pickle: true on the model if it was checked"


def is_pickled(name: str) -> bool:
    """Whether a file name, path or URL is in a pickle format (a query or fragment is no name)."""
    for sep in ("?", "#"):
        name = name.split(sep, 1)[0]
    return name.lower().endswith(PICKLE_EXTS)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}")
# One element of an hf: source (org, repo, revision or file path): not empty,
# not starting with a dot, nothing a shell or a path would read otherwise.
_HF_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+=,~-]{0,199}")


def check_model_name(name: str) -> str:
    """Model names become path elements and metric labels: one element, no leading dot."""
    if not _NAME.fullmatch(name or "") or ".." in name:
        raise ValueError(
            f"model name {name!r} must be 1-128 letters, digits, '.', '_' or '-', "
            "one path element not starting with a dot"
        )
    return name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSource(_Strict):
    """Where the weights come from, parsed from the operator's words.

    - a local path or ``file:///abs/path``
    - ``https://host/path/file.gguf`` (with ``sha256`` pinned on the model)
    - ``hf:org/repo[@revision]`` (a whole Hugging Face repository: config,
      tokenizer, safetensors shards and index)
    - ``hf:org/repo[@revision]:file`` (one file of it, e.g. a GGUF)
    """

    kind: Literal["file", "https", "hf"]
    # file: the absolute path; https: the URL; hf: "org/repo".
    location: str
    revision: str = ""
    # The file within an hf repository (one or more path elements, none
    # dotted); "" for the whole repository.
    file: str = ""

    @classmethod
    def parse(cls, text: str) -> ModelSource:
        text = (text or "").strip()
        if not text:
            raise ValueError(
                "a model source is needed (a path, file://, https:// or hf:org/repo:file)"
            )
        if text.startswith("hf:"):
            rest = text[3:]
            repo, sep, file = rest.partition(":")
            repo, at, revision = repo.partition("@")
            if (sep and not file) or (at and not revision) or repo.count("/") != 1:
                raise ValueError(
                    f"{text!r}: expected hf:org/repo[@revision] (the whole repository) "
                    "or hf:org/repo[@revision]:file"
                )
            parts = repo.split("/")
            parts += revision.split("/") if revision else []
            parts += file.split("/") if file else []
            for part in parts:
                if not _HF_PART.fullmatch(part):
                    raise ValueError(
                        f"{text!r}: {part!r} is refused; every name must be one path element "
                        "not starting with a dot"
                    )
            return cls(kind="hf", location=repo, revision=revision, file=file)
        if text.startswith("https://"):
            if not urlsplit(text).hostname:
                raise ValueError(f"{text!r}: not a URL with a host")
            return cls(kind="https", location=text)
        if text.startswith("http://"):
            raise ValueError(f"{text!r}: plain http is refused; use https:// and pin a sha256")
        text = text.removeprefix("file://")
        if not text.startswith("/"):
            raise ValueError(f"{text!r}: a local path must be absolute")
        return cls(kind="file", location=text)

    def __str__(self) -> str:
        if self.kind == "hf":
            rev = f"@{self.revision}" if self.revision else ""
            file = f":{self.file}" if self.file else ""
            return f"hf:{self.location}{rev}{file}"
        return self.location if self.kind == "https" else f"file://{self.location}"

    @property
    def is_repo(self) -> bool:
        """Whether it names a whole Hugging Face repository (no one file of it)."""
        return self.kind == "hf" and not self.file

    def pinned(self, commit: str) -> ModelSource:
        """The same source at ``commit`` (an hf: source's revision replaced); others as they are."""
        if self.kind != "hf" or not commit:
            return self
        return self.model_copy(update={"revision": commit})

    @property
    def file_name(self) -> str:
        """The last element of the path, query and fragment stripped (a repository's name)."""
        if self.kind == "hf":
            return (self.file or self.location).rsplit("/", 1)[-1]
        path = urlsplit(self.location).path if self.kind == "https" else self.location
        return path.rstrip("/").rsplit("/", 1)[-1]


class GpuNeed(_Strict):
    """What a profile asks of GPUs; zeros mean "let planning decide"."""

    count: Annotated[int, Field(ge=0, le=64)] = 0
    min_memory_bytes: Annotated[int, Field(ge=0)] = 0
    min_compute_capability: str = ""

    @field_validator("min_compute_capability")
    @classmethod
    def _cc(cls, v: str) -> str:
        if v and not re.fullmatch(r"\d+\.\d+", v):
            raise ValueError(f"compute capability {v!r} must look like 8.0")
        return v


class Profile(_Strict):
    """One way to run a model: an engine, its arguments, and what hardware it needs."""

    name: str = "default"
    engine: Engine = "llama.cpp"
    engine_version: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # None with cpu False: planning picks GPUs if any fit, else CPU.
    gpu: GpuNeed | None = None
    cpu: bool = False
    startup_timeout_s: Annotated[float, Field(gt=0, le=86400)] = 900.0
    # "" runs the weights as they are; "bf16" or "fp8" has vLLM or SGLang
    # load them at that precision (fp8 halves a bf16 model's memory).
    precision: Literal["", "bf16", "fp8"] = ""
    # CPU cores a replica run on CPU reserves on its node: placement counts
    # them against the node's, and the engine is given as many threads.
    # 0 reserves none (the engine takes its own default, shared with others).
    cores: Annotated[int, Field(ge=0, le=1024)] = 0

    @model_validator(mode="after")
    def _cpu_or_gpu(self) -> Profile:
        if self.cpu and self.gpu is not None and self.gpu.count:
            raise ValueError("a profile runs on CPU or on GPUs, not both")
        if self.cpu and self.engine in ("vllm", "sglang"):
            raise ValueError(f"{self.engine} needs GPUs; use llama.cpp for CPU")
        if self.precision and self.engine not in QUANTIZING_ENGINES:
            raise ValueError(precision_refusal(self.engine, self.precision))
        if self.cores:
            if self.engine in ("vllm", "sglang") or (self.gpu is not None and self.gpu.count):
                raise ValueError(
                    "cores are reserved by replicas that run on CPU; this profile runs on GPUs"
                )
            given = next((a for a in self.args if _THREAD_FLAG.fullmatch(a)), None)
            if given:
                raise ValueError(
                    f"give the threads as cores: {self.cores}, not {given} in args "
                    "(the engine is given --threads from cores)"
                )
        return self


# Thread flags of llama.cpp's server that cores sets (a value may follow after =).
_THREAD_FLAG = re.compile(r"(--threads|-t|--threads-batch|-tb)(=.*)?")


# Engines that load weights at another precision than they are stored in.
QUANTIZING_ENGINES = ("vllm", "sglang")


def precision_refusal(engine: str, precision: str) -> str:
    """Why ``engine`` cannot run a model at ``precision``, in plain words."""
    if engine == "sim":
        return f"precision {precision} is refused: the sim engine loads no weights to quantize"
    return (
        f"precision {precision} is refused for {engine}: it runs a GGUF at the quantisation "
        "the file was made with; pick a GGUF of the size you want, or use vllm or sglang"
    )


class Model(_Strict):
    """A catalog entry."""

    name: str
    source: str
    sha256: str = ""
    profiles: list[Profile] = Field(default_factory=lambda: [Profile()])
    replicas_min: Annotated[int, Field(ge=0, le=1000)] = 1
    replicas_max: Annotated[int, Field(ge=0, le=1000)] = 1
    # 0: the engine's default (the trained context, capped by planning).
    context_length: Annotated[int, Field(ge=0)] = 0
    slots: Annotated[int, Field(ge=1, le=1024)] = 1
    allow_pickle: bool = False
    # With mirrors configured, an hf: model is pinned, planned and fetched
    # through them only; this lets it reach the internet's hub when none holds it.
    allow_internet: bool = False
    labels: dict[str, str] = Field(default_factory=dict)
    # What a request to it costs; free when left out.
    price: Price = Field(default_factory=Price)
    # For source "external": the outside provider that answers for it.
    external: External | None = None
    # hf: sources: the commit the source's revision was pinned to when the
    # model was added; a branch moving upstream later changes nothing here.
    commit: str = ""
    # One of the cluster's priority classes (kept setting ``classes``; "" is
    # "normal"): a model that cannot be placed takes the cards of replicas of
    # a lower class, drained first.
    priority_class: str = ""
    # Models that answer in its place, in order, when it has no room or the
    # key's budget cannot pay for it.
    fallbacks: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _unset_messages(cls, data):
        # The admin API sends an unset price as null: it means free.
        if isinstance(data, dict) and data.get("price") is None and "price" in data:
            data = {k: v for k, v in data.items() if k != "price"}
        # ``scale: {min, max}`` is how a model's YAML may say its replica bounds.
        if isinstance(data, dict) and "scale" in data:
            data = dict(data)
            scale = data.pop("scale")
            if not isinstance(scale, dict) or not scale or set(scale) - {"min", "max"}:
                raise ValueError("scale: expected {min: N, max: M}")
            for bound, field in (("min", "replicas_min"), ("max", "replicas_max")):
                if bound in scale:
                    if field in data and data[field] != scale[bound]:
                        raise ValueError(f"scale.{bound} and {field} disagree; give one of them")
                    data[field] = scale[bound]
            if "max" not in scale and "replicas_max" not in data:
                data["replicas_max"] = max(scale["min"], 1)
        # An outside provider runs no engine here: no profiles unless given.
        if isinstance(data, dict) and data.get("source") == EXTERNAL_SOURCE:
            data = {"profiles": [], **data}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_model_name(v)

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v != EXTERNAL_SOURCE:
            ModelSource.parse(v)
        return v

    @model_validator(mode="after")
    def _external(self) -> Model:
        if self.source == EXTERNAL_SOURCE:
            if self.external is None:
                raise ValueError(
                    "source external needs an external section: url, model and api_key_files"
                )
            if self.profiles:
                raise ValueError(
                    "an external model is answered by its provider and runs no engine here; "
                    "leave out its profiles"
                )
        elif self.external is not None:
            raise ValueError(
                f"external is only for source: external (this model's source is {self.source!r})"
            )
        return self

    @field_validator("priority_class")
    @classmethod
    def _class(cls, v: str) -> str:
        if v and not _NAME.fullmatch(v):
            raise ValueError(f"priority_class {v!r} must be a class name (letters, digits, . _ -)")
        return v

    @model_validator(mode="after")
    def _fallbacks(self) -> Model:
        for name in self.fallbacks:
            check_model_name(name)
        if self.name in self.fallbacks:
            raise ValueError(f"{self.name} cannot be its own fallback")
        if len(set(self.fallbacks)) != len(self.fallbacks):
            raise ValueError("a fallback is named twice")
        return self

    @field_validator("commit")
    @classmethod
    def _commit(cls, v: str) -> str:
        v = v.lower()
        if v and not _COMMIT.fullmatch(v):
            raise ValueError("commit must be 40 hex digits (a git commit id)")
        return v

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str) -> str:
        v = v.lower()
        if v and not _SHA256.fullmatch(v):
            raise ValueError("sha256 must be 64 hex digits")
        return v

    @model_validator(mode="after")
    def _no_pickles(self) -> Model:
        if self.source == EXTERNAL_SOURCE:
            return self
        name = ModelSource.parse(self.source).file_name
        if not self.allow_pickle and is_pickled(name):
            raise ValueError(
                f"{name} is in a pickle format, which runs code when an engine loads it; "
                f"use the model's safetensors or GGUF, or {PICKLE_HINT}"
            )
        return self

    @model_validator(mode="after")
    def _replicas(self) -> Model:
        if self.replicas_max < self.replicas_min:
            raise ValueError("replicas_max is below replicas_min")
        if not self.profiles and self.source != EXTERNAL_SOURCE:
            raise ValueError("a model needs at least one profile")
        return self

    @property
    def is_external(self) -> bool:
        """Whether an outside provider answers it (nothing to plan, place or start)."""
        return self.source == EXTERNAL_SOURCE

    @property
    def parsed_source(self) -> ModelSource:
        return ModelSource.parse(self.source)

    @property
    def fetch_source(self) -> ModelSource:
        """Where nodes fetch it from: the source at its pinned commit, where one was pinned."""
        return self.parsed_source.pinned(self.commit)
