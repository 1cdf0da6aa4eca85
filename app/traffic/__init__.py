"""Traffic rollups from nginx access logs (TRF-1..7 in docs/requirements.md).

The previous design re-read the whole day (1.65 M lines, 160 s) every five
minutes, later a re-read with an overlap window. This package reads each byte
of a log once, and still produces exact totals however runs, rotations and
crashes interleave.

**Logical files and offsets.** Every log file is tracked by identity — device,
inode and a SHA-256 fingerprint of its first (up to 1 KiB of) *content*,
decompressed for ``.gz`` — and by the content offset just after the last
complete line read. A run reads only the bytes after that offset. Because the
fingerprint is of content, a file keeps its identity through rename rotation,
copytruncate copies and compression (``access.log.1`` → ``access.log.2.gz``),
and a truncated file or a recycled inode is recognised as a new file
(``file_identity``). A trailing line without a newline is not read until it is
complete.

**Partial sums per file, rows as sums of partials.** Reading bytes
``[offset, end)`` of file F yields sums per key ``(granularity, bucket, method,
path)``; they are *added* to F's stored partial sums for those keys, in the
same atomic commit that moves F's offset to ``end``. The row of a key is, by
definition, the sum over all files of their partial sums for that key. So a
5-minute bucket that two runs both contributed to (lines before and after the
first run's read), or that two files contributed to (lines on both sides of a
rotation), is always exactly the sum of every line once: each line lies in
exactly one file at exactly one offset range, and each offset range is added
exactly once, because offset and sums commit together. Re-reading a file from
the start (revalidation of a past day, ``--force-full-scan``) *replaces* that
file's sums instead of adding, which is again exact. Sums of a file that has
been rotated away stay (that traffic happened) until ``retention_days``.

**Dirty keys and publishing.** A commit marks the keys it changed as dirty.
Publishing computes each dirty key's row from the partials, hands rows in
batches to a sink (PostgreSQL upsert, or ``POST /api/traffic/rollups``) and
clears the marks only after the sink accepted them. Rows carry absolute sums,
so a repeated publish is harmless and a crash between commit and publish only
delays rows to the next run. Running the same window twice changes nothing:
nothing is dirty the second time, and the upsert ignores equal rows anyway.

**Per-domain isolation and failure.** Each domain has its own checkpoints and
commit. If a file of a domain is rotated, replaced, truncated or unreadable
while the run reads it (a directory listing before and after must agree), that
domain's result for the run is dropped and its checkpoints stay; other domains
are unaffected, and no domain is ever skipped because another advanced.

**Day buckets.** A 5-minute bucket never straddles a business day, so day sums
are derived from the same read. A completed past day is not rescanned: new
bytes are read as always, and the files holding that day are re-read from the
start (revalidated) only when ``day_cache_hours`` have passed since the last
revalidation; ``--force-full-scan`` rebuilds and republishes the window.

**Where checkpoints live.** In PostgreSQL for the runner (``store_postgres``,
compare-and-set on a version per file) and in a directory for the standalone
CLI (``store_directory``, copy-on-write shards behind an atomically replaced
manifest). Neither involves the host or container name.

Modules: ``logline`` (parser), ``business_time``, ``logfiles`` (discovery,
probes, bounded line reader), ``file_identity`` (matching and read plans),
``scan`` (reading ranges of files on every core), ``partials`` (sums and row
shape), ``checkpoints`` (store contract),
``store_postgres``, ``store_directory``, ``rollup`` (the run), ``sinks``,
``remote``, ``rows`` (validation, upsert, queries), ``rollup_sql`` (the row upsert's
SQL text, shared by ``rows`` and ``store_postgres``), ``chart``, ``cli``.

``store_postgres`` runs on any ``app.dbapi`` cursor factory: the runner's pooled
engine, or the one psycopg2 connection of ``netmap traffic rollup``, which thus
never imports SQLAlchemy (PRF-3).
"""
