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
  every acyclic object at once; only cycles wait a little longer, and at a few
  hundred bytes per object 20,000 young objects are a few megabytes at most.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000
MIDDLE_THRESHOLD = 50  # young collections per middle-generation collection
OLD_THRESHOLD = 100  # middle collections per full one (CPython also waits for 25 % growth)


def settle_heap() -> None:
    """Freeze what is alive now and collect young objects less often (see module doc)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD)
