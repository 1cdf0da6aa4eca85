"""Optional store abilities are declared, never probed (docs/architecture.md, layers):
no ``getattr``/``hasattr`` on a store or sink anywhere in app/ or jobs/, and each
adapter declares exactly the capabilities whose methods it implements."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from app.search.elasticsearch_store import ElasticsearchStore
from app.search.port import CAPABILITY_PROTOCOLS, Capability
from app.search.postgres_store import PostgresStore
from app.traffic.remote import RemoteRowSink
from app.traffic.sinks import DatabaseRowSink
from app.traffic.store_directory import DirectoryCheckpointStore
from app.traffic.store_postgres import PostgresCheckpointStore

ROOT = Path(__file__).resolve().parents[2]
STORE_LIKE = re.compile(r"(?i)(store|sink)")


def probes(source: str) -> list[str]:
    """``getattr``/``hasattr`` calls whose object looks like a store or a sink."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and node.args
            and STORE_LIKE.search(ast.unparse(node.args[0]))
        ):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_in_app_or_jobs_probes_a_store():
    offenders = []
    for path in sorted([*ROOT.joinpath("app").rglob("*.py"), *ROOT.joinpath("jobs").rglob("*.py")]):
        offenders += [f"{path.relative_to(ROOT)}:{hit}" for hit in probes(path.read_text())]
    assert offenders == []


def test_the_probe_finder_finds_a_probe():
    assert probes("x = getattr(store, 'count_current_assets', None)\n")
    assert probes("hasattr(self.search_store, 'publish_execution_page')\n")
    assert probes("getattr(sink, 'writes_database', False)\n")
    assert not probes("getattr(settings, 'object_store', None)\n")  # a setting, not a store


def _methods(protocol: type) -> list[str]:
    return [name for name, _ in inspect.getmembers(protocol, inspect.isfunction) if name[0] != "_"]


@pytest.mark.parametrize("adapter", [PostgresStore, ElasticsearchStore])
def test_each_adapter_declares_exactly_what_it_implements(adapter):
    assert isinstance(adapter.capabilities, frozenset)
    for capability, protocol in CAPABILITY_PROTOCOLS.items():
        implemented = all(callable(getattr(adapter, m, None)) for m in _methods(protocol))
        assert (capability in adapter.capabilities) == implemented, capability
        for method in _methods(protocol) if implemented else ():
            declared = inspect.signature(getattr(protocol, method)).parameters
            actual = inspect.signature(getattr(adapter, method)).parameters
            assert list(declared) == list(actual), (capability, method)
    assert set(CAPABILITY_PROTOCOLS) == set(Capability)


def test_traffic_stores_and_sinks_declare_whether_rows_stay_in_the_database():
    assert PostgresCheckpointStore.publishes_in_database is True
    assert DirectoryCheckpointStore.publishes_in_database is False
    assert DatabaseRowSink.writes_database is True
    assert RemoteRowSink.writes_database is False
