"""Checkpoints in a directory (standalone ``netmap traffic rollup --state-dir DIR``).

Layout::

    DIR/lock            flock: one run per state directory at a time
    DIR/manifest.json   domain versions, checkpoints, revalidated days, shard index
    DIR/shards/*.json   partial sums and dirty keys, one file per shard

A shard holds one domain's partial sums for one hour of 5-minute buckets or
for one business day of day buckets, so a 5-minute run rewrites two small
files, not the whole history. Shards are copy-on-write: a commit writes new
shard files under fresh names, then atomically replaces ``manifest.json``
(write to a temporary file, fsync, ``os.replace``, fsync the directory), which
is the single point where the commit takes effect; old shard files are deleted
afterwards and files left by a crash before the replace are swept on the next
open. The state names no host or container, so blue/green deployments that
mount the same directory continue each other's checkpoints.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

from app.traffic.checkpoints import (
    CheckpointConflict,
    DomainCommit,
    DomainState,
    FileCheckpoint,
    PendingRow,
)
from app.traffic.partials import PartialKey, Sums, add_into

FORMAT = 1
HOUR = 3600
PUBLISHED_FLUSH_SECONDS = 5.0
ZERO = (0,) * 10
RowKey = tuple[int, str, str]  # bucket start, method, path (within one shard)


class StateLocked(Exception):
    """Another rollup run holds this state directory."""


@dataclass
class Shard:
    partials: dict[str, dict[RowKey, list[int]]] = field(default_factory=dict)
    dirty: set[RowKey] = field(default_factory=set)

    def empty(self) -> bool:
        return not self.dirty and not any(self.partials.values())


def shard_id(domain: str, granularity: str, bucket: int) -> str:
    start = bucket - bucket % HOUR if granularity == "5m" else bucket
    return f"{domain}/{granularity}/{start}"


def _shard_parts(identifier: str) -> tuple[str, str, int]:
    domain, granularity, start = identifier.rsplit("/", 2)
    return domain, granularity, int(start)


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


class DirectoryCheckpointStore:
    publishes_in_database = False  # rows leave through the sink

    def __init__(self, directory: str | os.PathLike[str]):
        self.directory = Path(directory)
        self.shard_dir = self.directory / "shards"
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.directory / "lock", "a+")  # held until close()
        try:
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise StateLocked(f"another rollup is using {self.directory}") from None
        self.manifest = self._read_manifest()
        self._shards: dict[str, Shard] = {}
        self._modified: set[str] = set()
        self._manifest_changed = False
        self._flushed_at = time.monotonic()
        self._sweep_orphans()

    # -- manifest and shard files ----------------------------------------------------
    def _read_manifest(self) -> dict:
        path = self.directory / "manifest.json"
        try:
            with open(path, "rb") as handle:
                manifest = json.load(handle)
        except FileNotFoundError:
            return {"format": FORMAT, "domains": {}, "files": {}, "verified": {}, "shards": {}}
        if manifest.get("format") != FORMAT:
            raise ValueError(f"{path}: unknown state format {manifest.get('format')!r}")
        return manifest

    def _sweep_orphans(self) -> None:
        """Remove what a run that crashed before its manifest switch left behind."""
        referenced = {entry["file"] for entry in self.manifest["shards"].values()}
        leftovers = [p for p in self.shard_dir.iterdir() if p.name not in referenced]
        leftovers += list(self.directory.glob(".manifest.*.tmp"))
        for path in leftovers:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _shard(self, identifier: str) -> Shard:
        shard = self._shards.get(identifier)
        if shard is not None:
            return shard
        entry = self.manifest["shards"].get(identifier)
        shard = Shard()
        if entry is not None:
            with open(self.shard_dir / entry["file"], "rb") as handle:
                raw = json.load(handle)
            for file_id, items in raw["partials"].items():
                shard.partials[file_id] = {(i[0], i[1], i[2]): i[3:] for i in items}
            shard.dirty = {(i[0], i[1], i[2]) for i in raw["dirty"]}
        self._shards[identifier] = shard
        return shard

    def _touch(self, identifier: str) -> Shard:
        self._modified.add(identifier)
        return self._shard(identifier)

    def _flush(self) -> None:
        """Write modified shards under new names, then switch the manifest atomically.

        The new manifest is built aside and becomes ``self.manifest`` only after it
        replaced the file, so a failed write leaves memory and disk as they were.
        """
        if not self._modified and not self._manifest_changed:
            return
        shards = dict(self.manifest["shards"])
        superseded: list[str] = []
        written: list[Path] = []
        temporary = self.directory / f".manifest.{uuid.uuid4().hex[:12]}.tmp"
        try:
            for identifier in sorted(self._modified):
                shard = self._shards[identifier]
                old = shards.pop(identifier, None)
                if old is not None:
                    superseded.append(old["file"])
                if shard.empty():
                    continue
                domain, granularity, start = _shard_parts(identifier)
                name = f"{domain}.{granularity}.{start}.{uuid.uuid4().hex[:12]}.json"
                body = {
                    "partials": {
                        file_id: [[*key, *sums] for key, sums in items.items()]
                        for file_id, items in shard.partials.items()
                        if items
                    },
                    "dirty": [list(key) for key in sorted(shard.dirty)],
                }
                written.append(self.shard_dir / name)
                _write_file(written[-1], json.dumps(body, separators=(",", ":")).encode())
                shards[identifier] = {
                    "file": name,
                    "dirty": len(shard.dirty),
                    "files": sorted(f for f, items in shard.partials.items() if items),
                }
            manifest = {**self.manifest, "shards": shards}
            _write_file(temporary, json.dumps(manifest, separators=(",", ":")).encode())
            os.replace(temporary, self.directory / "manifest.json")
        except BaseException:
            for path in [*written, temporary]:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            raise
        _fsync_directory(self.directory)
        self.manifest = manifest
        for name in superseded:
            with contextlib.suppress(FileNotFoundError):
                (self.shard_dir / name).unlink()
        self._modified.clear()
        self._manifest_changed = False
        self._flushed_at = time.monotonic()

    def _domain_shards(self, domain: str, granularity: str | None = None) -> list[str]:
        found = []
        for identifier in self.manifest["shards"]:
            shard_domain, shard_granularity, _start = _shard_parts(identifier)
            if shard_domain == domain and granularity in (None, shard_granularity):
                found.append(identifier)
        return sorted(found, key=lambda i: _shard_parts(i)[2])

    # -- CheckpointStore -------------------------------------------------------------
    def load(self, domain: str) -> DomainState:
        files = [
            FileCheckpoint(
                id=file_id,
                domain=entry["domain"],
                device=entry["device"],
                inode=entry["inode"],
                fingerprint_length=entry["fingerprintLength"],
                fingerprint=entry["fingerprint"],
                offset=entry["offset"],
                lines=entry["lines"],
                compressed=entry["compressed"],
                path=entry["path"],
                version=entry["version"],
                vanished=entry.get("vanishedAt") is not None,
                newest_bucket=entry.get("newestBucket"),
            )
            for file_id, entry in self.manifest["files"].items()
            if entry["domain"] == domain
        ]
        verified = {
            date.fromisoformat(day): at
            for day, at in self.manifest["verified"].get(domain, {}).items()
        }
        version = self.manifest["domains"].get(domain, 0)
        return DomainState(domain=domain, files=files, verified_days=verified, version=version)

    def files_holding_day(self, domain: str, day_start: int) -> set[str]:
        entry = self.manifest["shards"].get(shard_id(domain, "day", day_start))
        return set(entry["files"]) if entry else set()

    def _reset(self) -> None:
        """Forget unflushed changes: memory equals the last manifest on disk again."""
        self.manifest = self._read_manifest()
        self._shards.clear()
        self._modified.clear()
        self._manifest_changed = False

    def commit(self, commit: DomainCommit, now: float) -> None:
        try:
            self._apply(commit, now)
        except BaseException:
            self._reset()  # a failed commit must not be flushed later by accident
            raise

    def _apply(self, commit: DomainCommit, now: float) -> None:
        files = self.manifest["files"]
        versions = self.manifest["domains"]
        if versions.get(commit.domain, 0) != commit.expected_version:
            raise CheckpointConflict(f"another run committed {commit.domain} meanwhile")
        for checkpoint in [c.checkpoint for c in commit.changes] + commit.vanished:
            stored = files.get(checkpoint.id)
            if (stored["version"] if stored else 0) != checkpoint.version:
                raise CheckpointConflict(f"checkpoint {checkpoint.id} changed meanwhile")
        domain = commit.domain
        for change in commit.changes:
            ck = change.checkpoint
            if change.replace:
                self._replace(domain, ck.id, change.deltas)
            else:
                self._add(domain, ck.id, change.deltas)
            previous = files.get(ck.id, {})
            files[ck.id] = {
                "domain": ck.domain,
                "device": ck.device,
                "inode": ck.inode,
                "fingerprintLength": ck.fingerprint_length,
                "fingerprint": ck.fingerprint,
                "offset": ck.offset,
                "lines": ck.lines,
                "compressed": ck.compressed,
                "path": ck.path,
                "version": ck.version + 1,
                "vanishedAt": None,
                "newestBucket": ck.newest_bucket,
                "firstSeenAt": previous.get("firstSeenAt", now),
                "lastReadAt": now,
            }
        for checkpoint in commit.vanished:
            entry = files[checkpoint.id]
            entry["vanishedAt"] = now
            entry["version"] += 1
        for granularity, start, end in commit.republish:
            span = HOUR if granularity == "5m" else 1
            for identifier in self._domain_shards(domain, granularity):
                shard_start = _shard_parts(identifier)[2]
                if shard_start >= end or shard_start + span <= start:
                    continue
                shard = self._touch(identifier)
                for items in shard.partials.values():
                    shard.dirty.update(k for k in items if start <= k[0] < end)
        versions[domain] = commit.expected_version + 1
        verified = self.manifest["verified"].setdefault(domain, {})
        for day, at in commit.verified_days.items():
            verified[day.isoformat()] = at
        self._manifest_changed = True
        self._flush()

    def _add(self, domain: str, file_id: str, deltas: dict[PartialKey, Sums]) -> None:
        touched: dict[str, Shard] = {}
        for (granularity, bucket, method, path), sums in deltas.items():
            identifier = shard_id(domain, granularity, bucket)
            shard = touched.get(identifier)
            if shard is None:
                shard = touched[identifier] = self._touch(identifier)
            items = shard.partials.setdefault(file_id, {})
            key = (bucket, method, path)
            existing = items.get(key)
            if existing is None:
                items[key] = list(sums)
            else:
                add_into(existing, sums)
            shard.dirty.add(key)

    def _replace(self, domain: str, file_id: str, deltas: dict[PartialKey, Sums]) -> None:
        """A re-read file's sums replace its old ones; only keys whose sums differ get dirty."""
        fresh: dict[str, dict[RowKey, Sums]] = {}
        for (granularity, bucket, method, path), sums in deltas.items():
            fresh.setdefault(shard_id(domain, granularity, bucket), {})[(bucket, method, path)] = (
                sums
            )
        holding = {
            identifier
            for identifier in self._domain_shards(domain)
            if file_id in self.manifest["shards"][identifier]["files"]
        }
        for identifier in holding | fresh.keys():
            shard = self._shard(identifier)
            old = shard.partials.get(file_id, {})
            new = fresh.get(identifier, {})
            changed = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
            if not changed and old.keys() == new.keys():
                continue
            shard = self._touch(identifier)
            shard.partials[file_id] = {k: list(v) for k, v in new.items()}
            shard.dirty.update(changed)

    def pending(
        self, domain: str, granularity: str, until: int, batch_size: int
    ) -> Iterator[list[PendingRow]]:
        batch: list[PendingRow] = []
        for identifier in self._domain_shards(domain, granularity):
            entry = self.manifest["shards"].get(identifier)
            if not entry or not entry["dirty"] or _shard_parts(identifier)[2] >= until:
                continue
            shard = self._shard(identifier)
            for key in sorted(k for k in shard.dirty if k[0] < until):
                total: list[int] | None = None
                for items in shard.partials.values():
                    sums = items.get(key)
                    if sums is None:
                        continue
                    if total is None:
                        total = list(sums)
                    else:
                        add_into(total, sums)
                batch.append(
                    PendingRow(key=(granularity, *key), sums=tuple(total or ZERO), token=0)
                )
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch
        self._flush()

    def mark_published(self, domain: str, granularity: str, rows: list[PendingRow]) -> None:
        for row in rows:
            _granularity, bucket, method, path = row.key
            self._touch(shard_id(domain, granularity, bucket)).dirty.discard((bucket, method, path))
        # Clearing marks may lag: a mark that survives a crash only republishes a row.
        if time.monotonic() - self._flushed_at >= PUBLISHED_FLUSH_SECONDS:
            self._flush()

    def prune(self, domain: str, cutoff: float) -> None:
        """Forget files that vanished before ``cutoff`` and revalidations older than it."""
        files = self.manifest["files"]
        expired = {
            file_id
            for file_id, entry in files.items()
            if entry["domain"] == domain
            and entry.get("vanishedAt") is not None
            and entry["vanishedAt"] < cutoff
        }
        changed = bool(expired)
        for identifier in self._domain_shards(domain):
            if not expired & set(self.manifest["shards"][identifier]["files"]):
                continue
            shard = self._touch(identifier)
            gone: set[RowKey] = set()
            for file_id in expired:
                gone.update(shard.partials.pop(file_id, {}))
            # Publishing a key with no sums left would send zeros, not the traffic.
            shard.dirty -= {k for k in gone if not any(k in i for i in shard.partials.values())}
        for file_id in expired:
            del files[file_id]
        verified = self.manifest["verified"].get(domain, {})
        for day in [d for d, at in verified.items() if at < cutoff]:
            del verified[day]
            changed = True
        if changed:
            self._manifest_changed = True
            self._flush()

    def close(self) -> None:
        if not self._lock.closed:
            self._flush()
            fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
