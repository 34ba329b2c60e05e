"""The errors llmgw raises, and the exit codes the CLI maps them to.

    LlmgwError                      message + hint; the root of everything below
    ├── ConfigError                 a config file is missing, unreadable or invalid
    ├── UsageError                  bad input on the command line
    ├── NotFoundError               a node, model, ... that does not exist
    ├── ConflictError               it exists already (a model of that name)
    ├── PkiError                    certificates and keys: missing, refusing to overwrite
    ├── StoreError                  the store could not be opened or written
    ├── AdminError                  talking to gatewayd's admin API
    │   ├── AdminUnreachable        nothing answers on the admin address
    │   └── AdminUnauthenticated    the admin token was refused
    └── DiscoveryError              a hardware probe failed in a way that is ours to report

Errors of a dependency (grpclib, asyncpg, NVML, cryptography) are mapped to
these at the one place that calls it, chained with ``from``.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Exit codes of every ``llmgw`` command."""

    OK = 0
    ERROR = 1
    USAGE = 2
    CONFIG = 3
    NOT_FOUND = 4
    UNREACHABLE = 5
    UNAUTHENTICATED = 6
    CONFLICT = 7
    INTERRUPTED = 130


class LlmgwError(Exception):
    """Something went wrong that an operator can act on."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ConfigError(LlmgwError):
    exit_code = ExitCode.CONFIG


class UsageError(LlmgwError):
    exit_code = ExitCode.USAGE


class NotFoundError(LlmgwError):
    exit_code = ExitCode.NOT_FOUND


class ConflictError(LlmgwError):
    exit_code = ExitCode.CONFLICT


class PkiError(LlmgwError):
    exit_code = ExitCode.CONFLICT


class StoreError(LlmgwError):
    exit_code = ExitCode.ERROR


class AdminError(LlmgwError):
    exit_code = ExitCode.ERROR


class AdminUnreachable(AdminError):
    exit_code = ExitCode.UNREACHABLE


class AdminUnauthenticated(AdminError):
    exit_code = ExitCode.UNAUTHENTICATED


class DiscoveryError(LlmgwError):
    exit_code = ExitCode.ERROR
