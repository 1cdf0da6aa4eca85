"""The `netmap bench` group. Each benchmark is a module in this package exposing ``command``.

Discovery keeps the benchmarks independent: adding ``app/bench/<name>.py`` with
a Click ``command`` adds ``netmap bench <name>``.
"""

from __future__ import annotations

import importlib
import pkgutil

import click

_NOT_BENCHMARKS = {"cli", "scratch", "progress", "stats"}


@click.group()
def bench() -> None:
    """Benchmarks on scratch databases and files; print one JSON object."""
    import logging

    # Per-request events would drown the progress lines; warnings still show.
    logging.getLogger("netmap.events").setLevel(logging.WARNING)


def _discover() -> None:
    package = importlib.import_module("app.bench")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name in _NOT_BENCHMARKS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"app.bench.{info.name}")
        command = getattr(module, "command", None)
        if isinstance(command, click.Command):
            bench.add_command(command)


_discover()
