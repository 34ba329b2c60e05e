"""Getting things into the mirror: pulls from a hub or another mirror, and uploads."""

from mirrord.pull.errors import DigestMismatch, PullError, PullInvalid, PullRefused, code_of
from mirrord.pull.jobs import PullJobs
from mirrord.pull.progress import PullJob
from mirrord.pull.puller import Puller
from mirrord.pull.uploads import Uploads, upload_commit

__all__ = [
    "DigestMismatch",
    "PullError",
    "PullInvalid",
    "PullJob",
    "PullJobs",
    "PullRefused",
    "Puller",
    "Uploads",
    "code_of",
    "upload_commit",
]
