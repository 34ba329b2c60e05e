"""A child of ``llmgw up`` ends when ``up`` does, even when ``up`` is killed outright.

``up`` names itself in ``LLMGW_DIE_WITH`` (its pid); the child asks the kernel for
SIGTERM at its parent's death (PR_SET_PDEATHSIG), then checks that its parent is
still that pid: had ``up`` died before the request, nothing would ever come.
This runs in the child's own interpreter, not between fork and exec (a
``preexec_fn`` can deadlock a child forked from a process with threads).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

ENV = "LLMGW_DIE_WITH"
_PR_SET_PDEATHSIG = 1


def arm() -> None:
    """Tie this process's life to the parent ``LLMGW_DIE_WITH`` names (nothing when unset)."""
    wanted = os.environ.pop(ENV, "")
    if not wanted.isdigit():
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return  # not Linux: a stop of `up` still stops its children
    if os.getppid() == int(wanted):
        return
    # Not its parent now: `up` died before the request (this process was handed to
    # another), or a launcher stands between them. Only the first ends it.
    try:
        os.kill(int(wanted), 0)
    except ProcessLookupError:
        sys.exit(0)  # `up` is already gone
    except PermissionError:
        pass  # alive, someone else's
