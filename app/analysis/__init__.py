"""Change analysis: per-execution change sets, asset status (gone/reappeared), history (ANA).

Every final queues its execution in ``scan_analysis_queue``. A runner job
(``jobs/analysis.py``) claims the rows under a lease (``queue``), one owner's
executions in finish order and each only after its projection is ready,
computes the execution's change set in set-based SQL against the owner's
compact endpoint state (``changes``), pushes the resulting gone / reappeared
status to the search store (``status_sync``) and marks the row processed.
``queries`` answers the HTTP views (change lists, counts, one endpoint's
history); ``metrics`` puts the queue backlog on ``/metrics``.
"""
