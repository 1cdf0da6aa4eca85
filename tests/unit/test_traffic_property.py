"""Property: however a log is split into runs, appends and rotations, the totals are exact.

Hypothesis draws histories (appends with half-written lines, rename and
copytruncate rotations, gzip compression, 5-minute and day runs at arbitrary
points); after a final run the rows equal one full scan of every line written.
The PostgreSQL store runs the same property in tests/integration.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from app.traffic.store_directory import DirectoryCheckpointStore
from tests.support.nginx_logs import LogDir, MemorySink
from tests.support.rotation_scenarios import DOMAIN, Player, steps


@settings(max_examples=80, deadline=None)
@given(history=steps, seed=st.integers(0, 2**32 - 1))
def test_any_run_boundaries_give_the_totals_of_one_full_scan(history, seed):
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        player = Player(
            logs=LogDir(root / "logs", DOMAIN),
            sink=MemorySink(),
            make_store=lambda: DirectoryCheckpointStore(root / "state"),
            rng=random.Random(seed),
        )
        player.play(history)
        player.check()
