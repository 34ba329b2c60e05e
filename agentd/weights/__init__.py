"""Model weights on a node: one file or a whole Hugging Face repository, fetched and checked.

fetcher.py finds or fetches a model's weights (local paths used in place);
download.py fetches one URL with resume and checks; repo.py fetches a whole
repository at a commit into a cache replicas share; errors.py names what goes wrong;
cache.py reads the cache as entries (size, last use, who holds them) and what its
limit lets stay; keeper.py keeps it within that limit and reports it to the cluster.
"""

from agentd.weights.download import CHUNK_BYTES, PROGRESS_EVERY_S, ProgressCallback
from agentd.weights.errors import (
    ChecksumMismatch,
    DownloadFailed,
    PickleRefused,
    UnsafeName,
    WeightsError,
    WeightsMissing,
    check_name,
    redact,
)
from agentd.weights.fetcher import Weights, WeightsFetcher, hf_url, refuse_pickles
from llmgw.catalog.model import PICKLE_HINT, is_pickled
from llmgw.fsutil import sha256_file
from llmgw.hub import HF_BASE_URL

__all__ = [
    "CHUNK_BYTES",
    "HF_BASE_URL",
    "PICKLE_HINT",
    "PROGRESS_EVERY_S",
    "ChecksumMismatch",
    "DownloadFailed",
    "PickleRefused",
    "ProgressCallback",
    "UnsafeName",
    "Weights",
    "WeightsError",
    "WeightsFetcher",
    "WeightsMissing",
    "check_name",
    "hf_url",
    "is_pickled",
    "redact",
    "refuse_pickles",
    "sha256_file",
]
