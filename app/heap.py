"""Garbage-collector settings of the long-running processes (web workers, runner workers).

Why: an upload allocates some thirty container objects per observation (the decoded
JSON, the validated model, the normalised values, two documents, their rows), so with
CPython's default first-generation threshold (700 allocations) a 5,000-observation
batch triggers hundreds of collections, and every full collection walks the whole
heap the process built at start-up (modules, Flask, SQLAlchemy, the settings) even
though none of it is ever garbage. Measured on a 5,000-observation batch's
validation, enrichment and row encoding in a process holding a web worker's
modules, these settings take 7-11 % less CPU; in the in-process ``netmap bench
upload``, whose heap is larger, about a quarter.

``settle_heap`` is called once a process has finished booting:

* ``gc.freeze()`` moves everything alive at that point into the permanent
  generation, which collections never scan (CPython's advice for pre-fork servers;
  a frozen object that later becomes garbage is simply never reclaimed, which for
  boot-time objects is what happens anyway);
* the thresholds are raised so young objects are examined every
  ``YOUNG_THRESHOLD`` allocations instead of 700. Reference counting still frees
  every acyclic object at once; only cycles wait longer.

Why the young threshold is this high: the collector counts allocations net of
deallocations, and what an upload allocates stays alive until it is answered
(measured: about 14 tracked objects per observation at the batch's peak, some
20 with the store's own, so about 100,000 for a batch of the default 5,000; a web
worker runs up to four such requests at once). A threshold below that peak starts
young collections in the middle of batches, each scanning every object the batches
still hold and freeing nothing: in the in-process ``netmap bench upload`` (about
110,000 observations after the heap was settled) 20,000 meant 84 such collections,
730 ms of scanning that freed 199 objects in all, about 6.5 µs per observation, and
the process 13 % more CPU; 500,000 meant none. Above the peak the count falls back
as each batch is freed, so young collections are rare and come between batches.
What waits for them is cyclic garbage, which an upload hardly makes (those 199
objects), so the young generation stays a few megabytes; a full one of cycles would
be some 100 MB, the bound this threshold sets.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 500_000
MIDDLE_THRESHOLD = 50  # young collections per middle-generation collection
OLD_THRESHOLD = 100  # middle collections per full one (CPython also waits for 25 % growth)


def settle_heap() -> None:
    """Freeze what is alive now and collect young objects less often (see module doc)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
