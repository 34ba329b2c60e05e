"""The migration runner both store backends share.

Migrations are SQL files named ``NNNN_name.sql`` in
``gatewayd/store/migrations/<backend>/``. At open, every file not yet recorded
in ``schema_migrations`` is applied in name order, each in its own transaction
together with the row that records it, so a migration is either applied and
recorded or not applied at all. Names only need to sort: a gap or a file added
later with a lower number is applied like any other pending one.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Protocol

from llmgw.errors import StoreError

log = logging.getLogger(__name__)

MIGRATION_FILE = re.compile(r"(?P<name>[0-9]{4}_[A-Za-z0-9_]+)\.sql")


@dataclass(frozen=True)
class Migration:
    """One schema change: its name (``"0001_nodes"``) and its SQL."""

    name: str
    sql: str


def migrations_dir(backend: str) -> Traversable:
    """The folder holding ``backend``'s migration files, inside the installed package."""
    return resources.files(__package__).joinpath("migrations", backend)


def load_migrations(folder: Traversable) -> list[Migration]:
    """Every ``NNNN_name.sql`` in ``folder``, ordered by name.

    Any other ``.sql`` file is refused rather than skipped: a misnamed
    migration that silently never runs leaves a schema nobody expects.
    """
    found: list[Migration] = []
    for entry in folder.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        m = MIGRATION_FILE.fullmatch(entry.name)
        if m is None:
            raise StoreError(
                f"migration file {entry.name} is not named NNNN_name.sql",
                hint="rename it, e.g. 0002_add_models.sql",
            )
        found.append(Migration(name=m["name"], sql=entry.read_text(encoding="utf-8")))
    found.sort(key=lambda mig: mig.name)
    return found


class MigrationTarget(Protocol):
    """What a backend provides so the runner can migrate it."""

    async def ensure_migrations_table(self) -> None:
        """Create ``schema_migrations`` when it does not exist yet."""

    async def applied_names(self) -> list[str]:
        """Names already recorded, ordered by name."""

    async def apply(self, migration: Migration) -> bool:
        """Run the migration and record it, in one transaction.

        Returns False, changing nothing, when another process recorded it
        between our look and our transaction.
        """


async def run_migrations(
    target: MigrationTarget,
    migrations: list[Migration],
    *,
    backend: str,
    driver_errors: tuple[type[BaseException], ...],
) -> list[str]:
    """Apply every pending migration in name order (whatever the list's); the names applied now.

    ``driver_errors`` are the backend driver's exceptions, turned into a
    StoreError that names the migration that failed.
    """
    await target.ensure_migrations_table()
    done = set(await target.applied_names())
    known = {m.name for m in migrations}
    unknown = sorted(done - known)
    if unknown:
        # The store was migrated by a newer llmgw. Older code may still work
        # (migrations only add), so warn instead of refusing to start.
        log.warning(
            "the %s store has migrations this llmgw does not know: %s", backend, ", ".join(unknown)
        )
    applied_now: list[str] = []
    for migration in sorted(migrations, key=lambda m: m.name):
        if migration.name in done:
            continue
        try:
            applied = await target.apply(migration)
        except driver_errors as e:
            raise StoreError(
                f"migration {migration.name} of the {backend} store failed: {e}",
                hint="nothing of it was kept; fix the cause and start again",
            ) from e
        if applied:
            log.info("applied migration %s to the %s store", migration.name, backend)
            applied_now.append(migration.name)
    return applied_now
