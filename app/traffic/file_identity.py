"""Which file on disk is which logical log file, and what to read from each (TRF-3, TRF-4).

A logical file is recognised by its *content*: a checkpoint matches a file on
disk when the file's first ``fingerprint_length`` content bytes hash to the
checkpoint's fingerprint. That one rule covers every rotation style:

* rename + create: ``access.log`` becomes ``access.log.1`` (same inode, same
  content) and is read on from its offset; the new ``access.log`` is new.
* copytruncate: the copy ``access.log.1`` has the old content (new inode) and is
  read on from the offset, picking up lines written between our last read and
  the copy; the truncated ``access.log`` (same inode) no longer starts with the
  old bytes, so it is a new file.
* compression: ``access.log.2.gz`` decompresses to the content of the
  ``access.log.1`` already read; when its ISIZE trailer equals the offset it is
  not even decompressed.
* inode reuse: a different file on a recycled inode has different first bytes,
  so it is new.

Device and inode break ties: when several files match (a copy and its original
during copytruncate, ``.1`` and its ``.gz`` during compression) the one on the
checkpoint's inode is read, then a plain file before a compressed one, then the
longest; the other copies are ignored, never counted twice. A plain file on the
checkpoint's inode that is now shorter than the offset was truncated in place:
it is a new file. A matching file shorter than the offset is a copy of a prefix
of what was read: nothing to read. A checkpoint that matches nothing has
vanished (its sums stay: that traffic happened).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.traffic.checkpoints import FileCheckpoint
from app.traffic.logfiles import LogCandidate, Probe, fingerprint


@dataclass
class PlannedRead:
    candidate: LogCandidate
    probe: Probe
    checkpoint: FileCheckpoint | None  # None: a file never seen before
    start: int
    replace: bool  # read from 0 and replace the file's sums (revalidation, forced rebuild)
    skip: bool  # nothing new in it; only its location may have changed


@dataclass
class DomainPlan:
    reads: list[PlannedRead] = field(default_factory=list)
    vanished: list[FileCheckpoint] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # empty files and duplicate copies


def _same_inode(candidate: LogCandidate, checkpoint: FileCheckpoint) -> bool:
    return (candidate.device, candidate.inode) == (checkpoint.device, checkpoint.inode)


def plan_domain(
    candidates: list[LogCandidate],
    probes: dict[str, Probe],
    checkpoints: list[FileCheckpoint],
    *,
    replace_ids: set[str] = frozenset(),  # type: ignore[assignment]
    replace_all: bool = False,
) -> DomainPlan:
    plan = DomainPlan()
    usable = []
    for candidate in candidates:
        if probes[candidate.name].prefix:
            usable.append(candidate)
        else:
            plan.ignored.append(candidate.name)
    digests: dict[tuple[str, int], str] = {}

    def matches(candidate: LogCandidate, checkpoint: FileCheckpoint) -> bool:
        prefix = probes[candidate.name].prefix
        if len(prefix) < checkpoint.fingerprint_length:
            return False
        cache_key = (candidate.name, checkpoint.fingerprint_length)
        digest = digests.get(cache_key)
        if digest is None:
            digest = digests[cache_key] = fingerprint(prefix[: checkpoint.fingerprint_length])
        return digest == checkpoint.fingerprint

    bound: set[str] = set()
    # Longer fingerprints first: they are the more specific identities.
    for checkpoint in sorted(checkpoints, key=lambda k: (k.vanished, -k.fingerprint_length)):
        found = [
            c
            for c in usable
            if c.name not in bound
            and matches(c, checkpoint)
            and not (_same_inode(c, checkpoint) and not c.compressed and c.size < checkpoint.offset)
        ]
        if not found:
            if not checkpoint.vanished:
                plan.vanished.append(checkpoint)
            continue
        best = min(
            found,
            key=lambda c: (
                not _same_inode(c, checkpoint),
                c.compressed,
                -(c.size if not c.compressed else probes[c.name].gzip_size_mod32 or 0),
            ),
        )
        for candidate in found:
            bound.add(candidate.name)
            if candidate is not best:
                plan.ignored.append(candidate.name)
        probe = probes[best.name]
        if replace_all or checkpoint.id in replace_ids:
            plan.reads.append(PlannedRead(best, probe, checkpoint, 0, True, False))
        elif best.compressed:
            done = probe.gzip_size_mod32 == checkpoint.offset % (1 << 32)
            plan.reads.append(PlannedRead(best, probe, checkpoint, checkpoint.offset, False, done))
        else:
            done = best.size <= checkpoint.offset
            plan.reads.append(PlannedRead(best, probe, checkpoint, checkpoint.offset, False, done))
    for candidate in usable:
        if candidate.name not in bound:
            plan.reads.append(PlannedRead(candidate, probes[candidate.name], None, 0, False, False))
    return plan
