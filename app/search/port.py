"""The ``SearchStore`` port: what ingest, projection and queries need from a search store.

Two adapters implement it (STO-1): PostgreSQL (default; ``postgres_store``) and
Elasticsearch (``elasticsearch_store``). ``open_store(settings)`` picks one by
configuration. Callers never hold a PostgreSQL transaction of their own while
calling into the store (docs/architecture.md, rule: short transactions).

Failure contract:
* transport-level trouble (cluster unreachable, retries exhausted) raises
  ``StoreUnavailable``;
* a request the store refuses for what it contains (an Elasticsearch 4xx
  other than 408/429, a PostgreSQL data or constraint error) raises
  ``StoreRefused``: retrying the same request cannot succeed;
* writes return a ``BulkResult`` listing every item; callers decide with
  ``result.raise_for_failures()``, which raises ``BulkWriteError`` carrying the
  failed items (429 items are retryable, others are not blindly retried);
* a single operation larger than the byte limit raises ``OperationTooLarge``
  before anything is sent (never truncated, PRJ-6);
* an index name that cannot fit the request-line budget raises
  ``RequestLineTooLong`` (ING-9).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from enum import StrEnum
from typing import Any, Protocol, cast

from app.search.aggregates import ExecutionAggregates
from app.search.documents import EndpointDocument, FactDocument


class StoreError(Exception):
    """Base of search-store failures."""


class StoreUnavailable(StoreError):
    """The store could not be reached or kept failing after the retry budget.

    ``retry_after`` (seconds) is set when the store knows how long to wait
    (a PostgreSQL pool timeout: 2, as for ING-4).
    """

    def __init__(
        self, message: str = "search store unavailable", *, retry_after: int | None = None
    ):
        super().__init__(message)
        self.retry_after = retry_after


class StoreRefused(StoreError):
    """The store refused the request for its content; the same request will fail again."""


class SearchTimedOut(StoreError):
    """A search a person waits for ran past its ``AssetQuery.time_limit_ms`` and was
    stopped. Unlike an outage, the same search is likely to be stopped again: the
    answer asks for a narrower one (``search_timeout``), not a retry."""

    def __init__(self, limit_ms: int):
        super().__init__(f"the search was stopped after {limit_ms} ms")
        self.limit_ms = limit_ms


class OperationTooLarge(StoreError):
    def __init__(self, document_id: str, size: int, limit: int):
        super().__init__(f"operation for {document_id} is {size} bytes; the limit is {limit}")
        self.document_id, self.size, self.limit = document_id, size, limit


class RequestLineTooLong(StoreError):
    def __init__(self, index: str, size: int, limit: int):
        super().__init__(
            f"a request naming index {index!r} needs a {size}-byte request line; "
            f"the budget is {limit}"
        )
        self.index, self.size, self.limit = index, size, limit


# A value like the documents (app.search.documents): not ``frozen``, because a store write
# builds one per item and frozen construction costs about three times as much.
@dataclass(slots=True)
class BulkItemResult:
    id: str
    index: str
    status: int
    error_type: str | None = None
    error_reason: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        return self.status == 429

    @property
    def permanent(self) -> bool:
        """Refused for its content (mapping error, invalid document): retrying cannot help.
        429, 408, a version conflict (409) and 5xx are conditions of the store, not the item."""
        return 400 <= self.status < 500 and self.status not in (408, 409, 429)


@dataclass(frozen=True)
class BulkResult:
    items: tuple[BulkItemResult, ...] = ()
    requests: int = 0
    request_bytes: int = 0
    attempts: int = 0

    @property
    def failed(self) -> tuple[BulkItemResult, ...]:
        return tuple(item for item in self.items if not item.ok)

    @property
    def ok(self) -> bool:
        return not self.failed

    def raise_for_failures(self) -> None:
        if self.failed:
            raise BulkWriteError(self)


class BulkWriteError(StoreError):
    """Some items of a write failed. ``total`` is the number of operations when
    ``result.items`` lists only the failures (a server-side page publish)."""

    def __init__(self, result: BulkResult, *, total: int | None = None):
        failed = result.failed
        sample = ", ".join(f"{i.id}:{i.status}:{i.error_type}" for i in failed[:5])
        of = len(result.items) if total is None else total
        super().__init__(f"{len(failed)} of {of} bulk items failed ({sample})")
        self.result = result

    @property
    def retryable(self) -> bool:
        return all(item.retryable for item in self.result.failed)

    @property
    def permanent_failures(self) -> tuple[BulkItemResult, ...]:
        return tuple(item for item in self.result.failed if item.permanent)


@dataclass(frozen=True)
class PagePublishResult:
    """One projection page published (PRJ-4): what was read and what the store confirmed.

    ``endpoints`` execution endpoints were read after the cursor; ``last_id`` is
    the new keyset cursor (the cursor given when the page was empty);
    ``operations`` current-asset merges were due (global + per-user) and
    ``confirmed`` of them were checked one by one as written. ``failed`` lists
    the items that were not (a server-side publish lists only those).
    """

    endpoints: int
    last_id: str | None
    operations: int
    confirmed: int
    failed: tuple[BulkItemResult, ...] = ()
    requests: int = 0
    request_bytes: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed and self.confirmed == self.operations

    def raise_for_failures(self) -> None:
        if self.ok:
            return
        failed = self.failed
        if not failed:
            # Counts disagree without a named item: never move the cursor on that.
            failed = (
                BulkItemResult(
                    "?",
                    "?",
                    500,
                    "response_mismatch",
                    f"{self.confirmed} of {self.operations} operations confirmed",
                ),
            )
        raise BulkWriteError(BulkResult(items=failed), total=self.operations)


@dataclass(frozen=True)
class StorageScope:
    """Which fact storage an execution's final touches (ING-8).

    ``months`` are ``YYYY.MM`` of the fact partitions/indices holding this
    execution's facts; ``legacy_full_history`` (ING-11) means every fact index.
    """

    months: tuple[str, ...] = ()
    legacy_full_history: bool = False

    @property
    def empty(self) -> bool:
        return not self.months and not self.legacy_full_history


@dataclass(frozen=True)
class FinalRequestPlan:
    """How refresh/count requests were chunked (recorded as ``ScanFinalRequestPlan``)."""

    refresh_requests: int
    count_requests: int
    max_request_line_bytes: int


@dataclass(frozen=True)
class ExecutionCounts:
    observations: int  # facts of kind "observation"
    endpoints: int
    ips: int
    dns_records: int = 0  # facts of kind "dns_record"


@dataclass(frozen=True, slots=True)
class BatchKey:
    """One upload batch of an execution, as its facts carry it (``FactDocument`` fields)."""

    upload_id: str
    stream: str
    batch_index: int


@dataclass(frozen=True)
class ResultsPage:
    items: list[EndpointDocument]
    next_cursor: str | None
    total_endpoints: int | None  # exact, first page only (ING-10)
    total_ips: int


@dataclass(frozen=True)
class AssetQuery:
    scope: str  # "user" | "global"
    owner_id: int | None = None
    ip: str | None = None
    cidr: str | None = None
    port: int | None = None
    transport: str | None = None
    service: str | None = None
    product: str | None = None
    text: str | None = None  # banner/product/hostname text search
    first_seen_from: datetime | None = None
    first_seen_to: datetime | None = None
    last_seen_from: datetime | None = None
    last_seen_to: datetime | None = None
    status: str = "open"  # "open" | "gone" | "all" (ANA-4)
    limit: int = 50
    cursor: str | None = None
    sort: str = "ip"  # "ip" | "port" | "last_seen" | "service" (WEB-12, app.search.asset_sort)
    order: str | None = None  # "asc" | "desc"; None: the sort's default
    # A parsed search-language query (app.search.query_language.parse_query(...).node),
    # ANDed with the filters above; each adapter translates it.
    where: object | None = None
    # How long a person may wait for this search (``[search] interactive_timeout_seconds``):
    # past it the store stops the search and raises ``SearchTimedOut``. None for the
    # work that runs in the background (exports, reports, alerts): they are not limited.
    time_limit_ms: int | None = None


ASSET_STATUS_FILTERS = ("open", "gone", "all")


@dataclass(frozen=True)
class AssetStatusUpdate:
    """The analysis's verdict on one current asset (ANA-4): set as given, never merged."""

    scope: str  # "user" | "global"
    owner_id: int | None  # None for scope="global"
    ip: str
    port: int
    transport: str
    status: str  # "open" | "gone"
    gone_since: datetime | None = None
    gone_execution_id: int | None = None


# The facets of an asset search (language field names) and what each counts.
FACET_FIELDS = ("service", "product", "port", "cert.issuer")


@dataclass(frozen=True)
class AssetFacets:
    """Top values of ``FACET_FIELDS`` among the first ``sampled`` assets a search finds.

    Counts are over at most ``sample`` matching assets (``capped``: more matched), so a
    facet request costs the same whatever the number of assets; each field lists at
    most ``size`` values, by count (descending) then value.
    """

    sampled: int
    capped: bool
    facets: dict[str, list[tuple[object, int]]]


@dataclass(frozen=True)
class AssetAggregates:
    """``SearchStore.asset_aggregates``: the matching assets' count, distinct addresses and
    the report lists (``ExecutionAggregates``) over them."""

    endpoints: int
    ips: int
    lists: ExecutionAggregates


@dataclass(frozen=True)
class AssetPage:
    items: list[EndpointDocument]
    next_cursor: str | None = None
    extra: dict[str, object] = field(default_factory=dict)


class Capability(StrEnum):
    """Optional abilities a store declares in ``capabilities`` (checked only through the
    accessors at the end of this module, never by probing the store's attributes)."""

    SERVER_SIDE_PAGES = "server_side_pages"  # ``ServerSidePages``
    SIGHTINGS_IN_DATABASE = "sightings_in_database"  # ``SightingsInDatabase``
    EXPORT_TEXT_IN_DATABASE = "export_text_in_database"  # ``ExportTextInDatabase``
    CURRENT_ASSET_COUNT = "current_asset_count"  # ``CurrentAssetCount``
    TASK_PURGE = "task_purge"  # ``TaskPurge``
    FACT_RETENTION = "fact_retention"  # ``FactRetention``
    ASSET_CONDITIONS_IN_DATABASE = "asset_conditions_in_database"  # ``AssetConditionsInDatabase``
    ASSET_MATCHES = "asset_matches"  # ``AssetMatches``
    VALUE_KEY_WARMING = "value_key_warming"  # ``ValueKeyWarming``


class SearchStore(Protocol):
    name: str  # "postgres" | "elasticsearch"
    # The optional abilities this adapter has (``Capability``); a forwarding wrapper
    # (an instrumented or recording proxy) forwards this set with the calls.
    capabilities: frozenset[Capability]

    def ensure_schema(self) -> None:
        """Create templates/indices/scripts (ES) or check tables (PG); idempotent."""

    def write_facts(self, facts: Sequence[FactDocument]) -> BulkResult:
        """Index raw facts by deterministic id (rewriting one is a no-op in effect)."""

    def write_execution_endpoints(self, docs: Sequence[EndpointDocument]) -> BulkResult:
        """Merge execution-scope endpoint documents."""

    def read_execution_endpoints(
        self, execution_id: int, *, after_id: str | None, limit: int
    ) -> list[EndpointDocument]:
        """Keyset page of an execution's endpoints ordered by id (projection pages)."""

    def publish_current(
        self,
        docs: Sequence[EndpointDocument],
        *,
        max_operations: int,
        max_bytes: int,
        cancel: threading.Event | None = None,
    ) -> BulkResult:
        """Merge global/user current-asset documents, sharded by count and bytes.

        Setting ``cancel`` (lost lease, PRJ-3) stops sending further shards and
        cuts retry waits short with ``StoreUnavailable``.
        """

    # Optional capability (PostgreSQL): ``ServerSidePages`` below, declared as
    # ``Capability.SERVER_SIDE_PAGES``; the projection uses it when the adapter has it.

    def final_request_plan(self, scope: StorageScope) -> FinalRequestPlan:
        """Plan refresh/count requests for a final; raises RequestLineTooLong."""

    def refresh(self, scope: StorageScope) -> None:
        """Make the scope's facts and the execution-endpoint store searchable."""

    def count(self, scope: StorageScope, execution_id: int) -> ExecutionCounts:
        """Exact observation/endpoint/IP counts of one execution."""

    def refresh_current(self) -> None:
        """Make current-asset documents searchable (PRJ-5)."""

    # Removing the facts of batches that were never confirmed (ING-18,
    # ``app.result_ingest.abandoned``). Reads see what ``refresh(scope)`` made searchable.

    def batch_facts(
        self, scope: StorageScope, execution_id: int, batches: Sequence[BatchKey]
    ) -> list[FactDocument]:
        """Every fact of the execution stored under one of ``batches``.

        ``scope`` names the months to look in; an adapter keeping every month in one
        place (PostgreSQL) may find facts of other months too."""

    def endpoint_facts(
        self, scope: StorageScope, execution_id: int, endpoints: Collection[tuple[str, int, str]]
    ) -> list[FactDocument]:
        """The execution's observation facts of the given (ip, port, transport) endpoints
        (``scope`` as for ``batch_facts``)."""

    def delete_facts(self, facts: Sequence[FactDocument]) -> BulkResult:
        """Delete facts by id; a fact already gone is a success (200), not a failure."""

    def delete_execution_endpoints(self, execution_id: int, ids: Sequence[str]) -> BulkResult:
        """Delete execution ``execution_id``'s endpoint documents by id; one already gone is
        a success."""

    def execution_results(
        self,
        task_id: int,
        *,
        cursor: str | None,
        limit: int,
        execution_ids: Sequence[int] | None = None,
    ) -> ResultsPage:
        """A task's execution-scope endpoints, grouped by IP (ING-10); with
        ``execution_ids``, those executions' only (one run's), totals included.

        ``limit`` counts endpoints: a page holds at most ``limit`` of them, in
        address order (IPv4 as IPv4-mapped IPv6, like the ES ``ip`` type), then
        port, transport, execution, so one address's endpoints are adjacent and
        may continue on the next page (``app.search.results_cursor``).
        ``total_endpoints`` is exact on the first page only; ``total_ips`` is
        exact on every page (computed on the first page and carried in the cursor).
        """

    def search_assets(self, query: AssetQuery) -> AssetPage:
        """Current assets matching the query (STO-3); ``query.status`` filters by status."""

    def asset_facets(self, query: AssetQuery, *, size: int, sample: int) -> AssetFacets:
        """Top values of ``FACET_FIELDS`` among at most ``sample`` assets matching ``query``
        (its filters and status; its sort, cursor and limit are ignored)."""

    def apply_asset_status(self, updates: Sequence[AssetStatusUpdate]) -> BulkResult:
        """Set status / gone_since / gone_execution_id of existing current assets (ANA-4).

        Only those three fields change. An asset the store does not hold is
        reported as a 404 item (the analysis runs after the projection, so that
        means the document was removed meanwhile; callers may ignore it).
        """

    def execution_aggregates(self, execution_id: int, *, top: int) -> ExecutionAggregates:
        """The report aggregates of one execution's endpoints (``app.search.aggregates``):
        top ``top`` services, products and ports, and endpoints first seen per UTC hour;
        exact, and the same lists from every adapter for the same observations."""

    def asset_aggregates(self, query: AssetQuery, *, top: int) -> AssetAggregates:
        """The report aggregates of the current assets matching ``query`` (its filters,
        ``where`` and status; sort, cursor and limit ignored): how many, on how many
        addresses, and the lists of ``execution_aggregates`` over them; exact, and the same
        from every adapter (a report scoped by a search, docs/inventory.md)."""

    # Optional capability (PostgreSQL): ``SightingsInDatabase`` below, declared as
    # ``Capability.SIGHTINGS_IN_DATABASE``; the change analysis uses it when it is there.

    def close(self) -> None:
        """Release connections."""


class ServerSidePages(Protocol):
    """Optional capability of a store (PostgreSQL): a projection page published inside it.

    ``publish_execution_page`` reads the keyset page of the execution's endpoints after
    ``after_id`` and merges its current-asset documents in the store itself (one
    statement per page, PRJ-4), with the same merge rule, byte limit and per-item
    verdicts as ``read_execution_endpoints`` + ``publish_current``. It returns ``None``
    for a page it leaves to that generic path (a possibly oversized page, a key
    collision inside the page, or ids SQL cannot spell like Python here).
    """

    def publish_execution_page(
        self,
        execution_id: int,
        *,
        after_id: str | None,
        limit: int,
        max_bytes: int,
        cancel: threading.Event | None = None,
    ) -> PagePublishResult | None: ...


class SightingsInDatabase(Protocol):
    """Optional capability of a store (PostgreSQL): an execution's endpoints as SQL.

    ``execution_sightings_sql`` is a SELECT, with an ``:execution_id`` parameter, of an
    execution's endpoints as (ip, port, transport, state, service, product, version,
    banner_hash) that the change analysis runs inside its own statement (ANA-2);
    without it the analysis stages pages of ``read_execution_endpoints`` into its own
    table. ``execution_sightings_page_sql`` is the same SELECT with the endpoint's
    ``id`` first, one keyset page of it (``:after_id``, NULL for the first page, and
    ``:limit``, in ``id`` order): the analysis copies an execution too large for one
    statement into its own table in such pages, then works through it in slices.
    """

    def execution_sightings_sql(self) -> str: ...

    def execution_sightings_page_sql(self) -> str: ...


class ExportTextInDatabase(Protocol):
    """Optional capability of a store (PostgreSQL): export text written by the database.

    ``read_execution_export_text`` returns, for a keyset chunk of an execution's
    endpoints, the CSV and JSON-lines text the export formats would encode from
    ``read_execution_endpoints`` (same bytes), so a build does not decode and re-encode
    every row in Python (EXP-7); ``read_execution_export_bounds`` cuts an execution into
    such chunks.
    """

    def read_execution_export_text(
        self,
        execution_id: int,
        *,
        after_id: str | None,
        limit: int | None,
        csv: bool,
        jsonl: bool,
        upto_id: str | None = None,
    ) -> Any: ...

    def read_execution_export_bounds(
        self, execution_id: int, *, after_id: str | None, chunk_rows: int, chunks: int
    ) -> list[str]: ...


class CurrentAssetCount(Protocol):
    """Optional capability of a store (PostgreSQL): a cheap, capped count of current
    assets (the console's dashboard shows it; without it the dashboard leaves it out)."""

    def count_current_assets(self, *, owner_id: int | None, cap: int) -> int: ...


@dataclass(frozen=True)
class AssetPurgeBatch:
    """One batch of a deleted task's asset sweep (``TaskPurge.purge_task_assets``)."""

    last_key: int | None  # the cursor for the next batch; None: the task had no more
    endpoints: int  # execution endpoints looked at
    user_assets: int  # owner-view documents removed
    global_assets: int  # global-view documents removed
    # (owner, ip, port, transport) of the batch's endpoints no other task of the owner
    # saw: gone from the owner's view, so the change analysis forgets them too (a later
    # sighting is new again). The same answer when a batch is retried after a crash.
    unseen: tuple[tuple[int, str, int, str], ...] = ()


class TaskPurge(Protocol):
    """Optional capability of a store (both adapters): a deleted task's data removed in
    bounded batches (``app.search.postgres_purge``, ``app.search.elasticsearch_purge``,
    docs/architecture.md "Runs").

    ``purge_task_assets`` removes, for one batch of at most ``limit`` of the tasks'
    execution endpoints after ``after_key`` (an opaque cursor of the adapter's, a
    bigint), the current assets no task outside ``excluded_task_ids`` has evidence
    for; ``purge_execution_data`` removes up to ``limit`` documents or rows per kind of
    the executions' own data (endpoints, facts, counters) and returns what it removed
    (empty: nothing left). Both are safe to repeat after a crash: what is gone stays
    gone and is not counted again. Without the capability, a purge removes the
    database's rows only.
    """

    def purge_task_assets(
        self,
        task_ids: Sequence[int],
        *,
        excluded_task_ids: Sequence[int],
        after_key: int | None,
        limit: int,
    ) -> AssetPurgeBatch: ...

    def purge_execution_data(
        self, execution_ids: Sequence[int], *, limit: int
    ) -> dict[str, int]: ...


class FactRetention(Protocol):
    """Optional capability of a store (PostgreSQL): whole months of raw facts dropped
    (``[search] facts_retention_months``; ``app.search.postgres_retention``)."""

    def drop_fact_months_before(self, kept_from: date) -> list[str]: ...


class AssetConditionsInDatabase(Protocol):
    """Optional capability of a store (PostgreSQL): current assets tested inside another
    domain's statement, because they are tables of the system-of-record database.

    ``asset_match_sql(node, endpoint=, status=, rows=, conn=)`` is an SQL condition with
    its bound parameters: the current asset of owner ``:owner_id`` at the endpoint of the
    caller's row ``endpoint`` (columns ``ip``, ``port``, ``transport``) matches the parsed
    search language tree ``node``, with ``status`` (an SQL expression) read as the asset's
    status; ``rows``, where known, is how many rows the caller will test, which the
    store may spell differently for; ``conn``, where given, is the connection whose
    transaction will run the condition, through which the store may read what it needs
    to choose the spelling (the view's statistics). The alert rules' search filters use
    it in the change analysis's transaction.
    """

    def asset_match_sql(
        self,
        node: object,
        *,
        endpoint: str,
        status: str,
        rows: int | None = None,
        conn: Any = None,
    ) -> tuple[str, dict[str, Any]]: ...


# An endpoint as ``AssetMatches`` takes and returns it: (ip, port, transport).
Endpoint = tuple[str, int, str]


class AssetMatches(Protocol):
    """Optional capability of a store (Elasticsearch): which of some current assets a
    search finds, asked outside any database transaction.

    ``matching_endpoints(owner_id, node, status=, endpoints=)`` returns those of
    ``endpoints`` whose current asset of owner ``owner_id`` exists and matches the parsed
    search language tree ``node`` (None: every asset), ``status`` (``open`` | ``gone``)
    being read as the asset's status whatever the document says. It asks in bounded
    batches, so the list may be long. The alert rules' search filters use it after the
    change analysis commits, where the store cannot test assets inside the analysis's
    statement (``AssetConditionsInDatabase``).
    """

    def matching_endpoints(
        self,
        owner_id: int,
        node: object | None,
        *,
        status: str,
        endpoints: Sequence[Endpoint],
    ) -> set[Endpoint]: ...


class ValueKeyWarming(Protocol):
    """Optional capability of a store (PostgreSQL): its value keys read back into memory.

    The projection looks every new value up in the distinct-value tables' keys (an md5
    each, so one random leaf per value). A bulk write elsewhere in the database, such as
    the change analysis of a large first scan, pushes those leaves out of PostgreSQL's
    shared buffers, and the next projection then reads them one at a time.
    ``warm_value_keys`` reads each key whole, in file order (``pg_prewarm``), and returns
    the blocks it loaded per key, or None when the server lacks the extension
    (docs/operations.md, "Keeping the value keys in memory").
    """

    def warm_value_keys(self) -> dict[str, int] | None: ...


# The one place a store's optional abilities are checked: each accessor returns the store
# typed as the capability when the store declares it in ``capabilities``, else None.


def has_capability(store: SearchStore, capability: Capability) -> bool:
    return capability in store.capabilities


def server_side_pages(store: SearchStore) -> ServerSidePages | None:
    if has_capability(store, Capability.SERVER_SIDE_PAGES):
        return cast(ServerSidePages, store)
    return None


def sightings_in_database(store: SearchStore) -> SightingsInDatabase | None:
    if has_capability(store, Capability.SIGHTINGS_IN_DATABASE):
        return cast(SightingsInDatabase, store)
    return None


def export_text_in_database(store: SearchStore) -> ExportTextInDatabase | None:
    if has_capability(store, Capability.EXPORT_TEXT_IN_DATABASE):
        return cast(ExportTextInDatabase, store)
    return None


def current_asset_count(store: SearchStore) -> CurrentAssetCount | None:
    if has_capability(store, Capability.CURRENT_ASSET_COUNT):
        return cast(CurrentAssetCount, store)
    return None


def task_purge(store: SearchStore) -> TaskPurge | None:
    if has_capability(store, Capability.TASK_PURGE):
        return cast(TaskPurge, store)
    return None


def fact_retention(store: SearchStore) -> FactRetention | None:
    if has_capability(store, Capability.FACT_RETENTION):
        return cast(FactRetention, store)
    return None


def asset_conditions_in_database(store: SearchStore) -> AssetConditionsInDatabase | None:
    if has_capability(store, Capability.ASSET_CONDITIONS_IN_DATABASE):
        return cast(AssetConditionsInDatabase, store)
    return None


def asset_matches(store: SearchStore) -> AssetMatches | None:
    if has_capability(store, Capability.ASSET_MATCHES):
        return cast(AssetMatches, store)
    return None


def value_key_warming(store: SearchStore) -> ValueKeyWarming | None:
    if has_capability(store, Capability.VALUE_KEY_WARMING):
        return cast(ValueKeyWarming, store)
    return None


# Which protocol each capability promises (tests check every adapter against it).
CAPABILITY_PROTOCOLS: dict[Capability, type] = {
    Capability.SERVER_SIDE_PAGES: ServerSidePages,
    Capability.SIGHTINGS_IN_DATABASE: SightingsInDatabase,
    Capability.EXPORT_TEXT_IN_DATABASE: ExportTextInDatabase,
    Capability.CURRENT_ASSET_COUNT: CurrentAssetCount,
    Capability.TASK_PURGE: TaskPurge,
    Capability.FACT_RETENTION: FactRetention,
    Capability.ASSET_CONDITIONS_IN_DATABASE: AssetConditionsInDatabase,
    Capability.ASSET_MATCHES: AssetMatches,
    Capability.VALUE_KEY_WARMING: ValueKeyWarming,
}
