"""What a checkpoint store keeps and the operations the rollup needs from it (TRF-3, TRF-5).

Two implementations share this contract: ``store_postgres`` (the runner, and the
CLI writing to the database) and ``store_directory`` (the standalone CLI on an
nginx host, ``--state-dir``). Per domain a store holds

* a version that every commit compare-and-sets, so two runs that planned from
  the same state (even both seeing a file for the first time) cannot both
  commit: the second one's domain result is dropped;
* one ``FileCheckpoint`` per logical log file: identity (device, inode, and a
  fingerprint of the first bytes of its content) and the content offset just
  after the last complete line read;
* that file's partial sums per partial key (see ``partials``);
* the *dirty* keys: keys whose published row no longer equals the sum of the
  partials (a commit changed them), until a sink has accepted the new row;
* when each past business day was last revalidated.

A ``DomainCommit`` is applied atomically: checkpoints, partial sums and dirty
keys move together or not at all, so a crash can never leave an offset that
disagrees with the sums it produced. Host and container names appear nowhere
in a checkpoint's identity, so blue/green deployments share one state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date
from typing import Protocol

from app.traffic.partials import PartialKey, Sums


class CheckpointConflict(Exception):
    """Another run changed this domain's checkpoints since they were loaded."""


@dataclass
class FileCheckpoint:
    id: str
    domain: str
    device: int
    inode: int
    fingerprint_length: int
    fingerprint: str
    offset: int
    lines: int
    compressed: bool
    path: str
    version: int = 0  # 0: not stored yet
    vanished: bool = False
    newest_bucket: int | None = None


@dataclass
class DomainState:
    domain: str
    files: list[FileCheckpoint]
    verified_days: dict[date, float]  # business date → epoch of the last revalidation
    version: int = 0  # bumped by every commit; a commit names the version it planned from


@dataclass
class FileChange:
    checkpoint: FileCheckpoint  # the new values; ``version`` is the one loaded (0 = new)
    replace: bool  # the deltas replace the file's partial sums instead of adding to them
    deltas: dict[PartialKey, Sums]


@dataclass(frozen=True)
class DatabasePublish:
    """Publish rows straight from the stored partial sums, in the database holding them.

    Used when checkpoints and published rows live in the same PostgreSQL: the rows a
    commit changes are written in the commit's own transaction (no dirty mark, no row
    leaving the database), and older dirty marks by one statement per batch.
    ``bucket_fields(granularity, start)`` gives (bucket end epoch, business date, frozen).
    """

    granularity: str
    until: int  # rows of buckets starting before this epoch (the window end)
    source_server: str
    generated_at: float
    bucket_fields: Callable[[str, int], tuple[int, date, bool]]


@dataclass
class DomainCommit:
    domain: str
    expected_version: int  # DomainState.version the plan was made from
    changes: list[FileChange] = field(default_factory=list)
    vanished: list[FileCheckpoint] = field(default_factory=list)
    verified_days: dict[date, float] = field(default_factory=dict)
    # (granularity, start, end): mark every known key in [start, end) dirty (a forced rebuild
    # republishes rows even where the sums did not change).
    republish: list[tuple[str, int, int]] = field(default_factory=list)
    # Set when the store can write rows itself (``publishes_in_database``): the rows of
    # changed keys of this granularity are published inside the commit; ``published``
    # is then how many.
    publish: DatabasePublish | None = None
    published: int = 0
    published_seconds: float = 0.0


@dataclass(frozen=True)
class PendingRow:
    key: PartialKey
    sums: tuple[int, ...]
    token: int  # identifies the dirty mark, so a newer mark is never cleared by mistake


class CheckpointStore(Protocol):
    # Declared by every store: True when it can compute and write the rollup rows itself
    # in SQL (PostgreSQL, with a ``RowSink`` that ``writes_database``).
    publishes_in_database: bool

    def load(self, domain: str) -> DomainState: ...

    def files_holding_day(self, domain: str, day_start: int) -> set[str]: ...

    def commit(self, commit: DomainCommit, now: float) -> None: ...

    def pending(
        self, domain: str, granularity: str, until: int, batch_size: int
    ) -> Iterator[list[PendingRow]]: ...

    def mark_published(self, domain: str, granularity: str, rows: list[PendingRow]) -> None: ...

    def prune(self, domain: str, cutoff: float) -> None: ...

    def close(self) -> None: ...
