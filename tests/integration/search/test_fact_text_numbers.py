"""Text fact values numbered in first-seen order (migration 2200).

Each distinct certificate issuer and subject and HTTP title and server gets a number
when the distinct values table first sees it; the asset views' row triggers set each
row's numbers from its details, whoever writes the row, and the views' partial indexes
are on the numbers, so a new value's entries go to the indexes' right-hand end. The
migration numbers the rows a populated database holds, and its downgrade puts back the
md5 keys.
"""

from __future__ import annotations

import threading

import sqlalchemy as sa

from app import db, migrations
from app.db import normalise_url
from app.search.seed import seed_current_assets
from tests.support.search_documents import at, current_asset, execution_endpoint
from tests.support.sql import valid_indexes

BEFORE, REVISION = "20261204_2100", "20261204_2200"
VIEWS = ("search_assets_user", "search_assets_global")
COLUMNS = {
    "cert_issuer_number": ("tls", "issuer"),
    "cert_subject_number": ("tls", "subject_cn"),
    "title_number": ("http", "title"),
    "server_number": ("http", "server"),
}
INDEXES = {
    f"ix_{view}_{suffix}"
    for view in VIEWS
    for suffix in ("cert_issuer", "cert_subject", "http_title", "http_server")
}
SERVICES = (
    (22, "ssh", "OpenSSH", "9.6p1", "SSH-2.0-OpenSSH_9.6p1"),
    (443, "https", "nginx", "1.24.0", "HTTP/1.1 200 OK"),
)
# Every HTTPS asset: a common issuer, its own subject; a page on every fourth host.
DETAILS = """
    UPDATE {table} SET details = jsonb_build_object(
        'tls', jsonb_build_object('issuer', 'CN=Common CA', 'subject_cn', host(ip)))
        || CASE WHEN (ip - '10.0.0.0'::inet) % 4 = 0 THEN jsonb_build_object(
               'http', jsonb_build_object('title', 'Welcome ' || host(ip), 'server', 'nginx'))
           ELSE '{{}}'::jsonb END
     WHERE port = 443
"""


def _mismatches(conn: sa.Connection) -> list[tuple]:
    """View rows whose number of a field is not the number of the field's value."""
    found = []
    for view in VIEWS:
        for column, (section, key) in COLUMNS.items():
            value = (
                f"(CASE WHEN jsonb_typeof(v.details->'{section}'->'{key}') = 'string' "
                f"AND length(v.details->'{section}'->>'{key}') <= 1024 "
                f"THEN v.details->'{section}'->>'{key}' END)"
            )
            found += conn.execute(
                sa.text(
                    f"SELECT '{view}', '{column}', host(v.ip), v.port, v.{column}, f.number "
                    f"FROM {view} v LEFT JOIN search_asset_fact_texts f "
                    f"ON f.id = md5({value})::uuid "
                    f"WHERE v.{column} IS DISTINCT FROM f.number"
                )
            ).all()
    return found


def _view_index_definitions(conn: sa.Connection) -> dict[str, str]:
    """Every index of the views by name, as PostgreSQL spells it."""
    found = conn.execute(
        sa.text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = ANY(:v)"),
        {"v": list(VIEWS)},
    ).all()
    return dict(found)


def _index_definitions(conn: sa.Connection) -> list[str]:
    """The definitions of the eight value indexes (all of them, or the test fails)."""
    definitions = _view_index_definitions(conn)
    assert INDEXES <= definitions.keys()
    return [definitions[name] for name in sorted(INDEXES)]


def _other_index_definitions(conn: sa.Connection) -> set[str]:
    """Every other index of the views: the upgrade drops and builds these again around
    its rewrite, and must put back each exactly."""
    return {d for name, d in _view_index_definitions(conn).items() if name not in INDEXES}


def _numbered(conn: sa.Connection, column: str) -> int:
    return sum(
        conn.execute(sa.text(f"SELECT count({column}) FROM {view}")).scalar_one() for view in VIEWS
    )


def test_the_upgrade_numbers_a_populated_database_and_downgrade_restores_md5_keys(
    empty_database_url,
):
    migrations.upgrade(empty_database_url, BEFORE)
    engine = sa.create_engine(normalise_url(empty_database_url), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            seed_current_assets(
                conn, owner_id=1, execution_id=1, low=0, high=400, seen=at(0), services=SERVICES
            )
            for view in VIEWS:
                conn.execute(sa.text(DETAILS.format(table=view)))
            # A value the distinct values table lacks (written around migration 1800's
            # triggers): the upgrade adds it and numbers the row all the same.
            conn.execute(sa.text("ALTER TABLE search_assets_user DISABLE TRIGGER USER"))
            conn.execute(
                sa.text(
                    "UPDATE search_assets_user SET details = jsonb_build_object('http', "
                    "jsonb_build_object('server', 'Platypus/1.0')) "
                    "WHERE ip = '10.0.0.3' AND port = 22"
                )
            )
            conn.execute(sa.text("ALTER TABLE search_assets_user ENABLE TRIGGER USER"))
        with engine.connect() as conn:
            md5_indexes = valid_indexes(conn, *VIEWS)
            others = _other_index_definitions(conn)
        assert INDEXES <= md5_indexes
        assert len(others) >= 8

        migrations.upgrade(empty_database_url, REVISION)
        with engine.begin() as conn:
            assert valid_indexes(conn, *VIEWS) == md5_indexes
            assert _other_index_definitions(conn) == others
            assert (
                conn.execute(
                    sa.text(
                        "SELECT v.server_number = t.number FROM search_assets_user v "
                        "JOIN search_asset_fact_texts t ON t.text = 'Platypus/1.0' "
                        "WHERE v.ip = '10.0.0.3' AND v.port = 22"
                    )
                ).scalar_one()
                is True
            )
            definitions = _index_definitions(conn)
            assert all("md5" not in d and "_number" in d for d in definitions)
            assert _mismatches(conn) == []
            # 200 HTTPS assets in each view: issuer and subject; 50 of them with a page.
            assert _numbered(conn, "cert_subject_number") == 400
            assert _numbered(conn, "title_number") == 100
            assert (
                conn.execute(
                    sa.text("SELECT count(DISTINCT cert_issuer_number) FROM search_assets_user")
                ).scalar_one()
                == 1
            )
            # The triggers number what is written from here on.
            conn.execute(
                sa.text(
                    "UPDATE search_assets_global SET details = jsonb_build_object("
                    "'tls', jsonb_build_object('issuer', 'CN=Quokka Root', "
                    "'subject_cn', 'quokka.example')) WHERE ip = '10.0.0.1' AND port = 443"
                )
            )
            assert _mismatches(conn) == []

        migrations.downgrade(empty_database_url, BEFORE)
        with engine.begin() as conn:
            assert valid_indexes(conn, *VIEWS) == md5_indexes
            definitions = _index_definitions(conn)
            assert all("md5" in d for d in definitions)
            gone = conn.execute(
                sa.text(
                    "SELECT count(*) FROM information_schema.columns "
                    "WHERE column_name LIKE '%\\_number' AND table_name LIKE 'search\\_asset%'"
                )
            ).scalar_one()
            assert gone == 0
            # Migration 1800's statement triggers collect the values again.
            conn.execute(
                sa.text(
                    "UPDATE search_assets_user SET details = jsonb_build_object("
                    "'http', jsonb_build_object('title', 'Wombat Console')) "
                    "WHERE ip = '10.0.0.2' AND port = 443"
                )
            )
            assert (
                conn.execute(
                    sa.text(
                        "SELECT count(*) FROM search_asset_fact_texts WHERE text = 'Wombat Console'"
                    )
                ).scalar_one()
                == 1
            )
        migrations.upgrade(empty_database_url, REVISION)
        with engine.begin() as conn:
            assert _mismatches(conn) == []
    finally:
        engine.dispose()


def _set_details(conn: sa.Connection, view: str, ip: str, details: str) -> None:
    conn.execute(
        sa.text(
            f"UPDATE {view} SET details = CAST(:d AS jsonb) WHERE ip = CAST(:ip AS inet) "
            "AND port = 443"
        ),
        {"d": details, "ip": ip},
    )


def _number(conn: sa.Connection, view: str, ip: str, column: str) -> int | None:
    return conn.execute(
        sa.text(f"SELECT {column} FROM {view} WHERE ip = CAST(:ip AS inet) AND port = 443"),
        {"ip": ip},
    ).scalar_one()


def test_new_values_are_numbered_in_first_seen_order_and_follow_their_row(postgres_store):
    with db.transaction() as conn:
        seed_current_assets(
            conn, owner_id=1, execution_id=1, low=0, high=20, seen=at(0), services=SERVICES
        )
        seen = []
        for n, ip in enumerate(("10.0.0.1", "10.0.0.2", "10.0.0.3")):
            _set_details(
                conn, "search_assets_user", ip, f'{{"tls": {{"subject_cn": "first-{n}.test"}}}}'
            )
            seen.append(_number(conn, "search_assets_user", ip, "cert_subject_number"))
        # Each new value takes a number after every value seen before it.
        assert seen == sorted(seen) and len(set(seen)) == 3
        # The other view, the same value: the same number, and no new row of values.
        _set_details(
            conn, "search_assets_global", "10.0.0.5", '{"tls": {"subject_cn": "first-1.test"}}'
        )
        assert _number(conn, "search_assets_global", "10.0.0.5", "cert_subject_number") == seen[1]
        # A row whose value changes takes the new value's number; one whose certificate
        # goes has none, a page that comes has its own.
        _set_details(
            conn, "search_assets_user", "10.0.0.1", '{"tls": {"subject_cn": "first-2.test"}}'
        )
        assert _number(conn, "search_assets_user", "10.0.0.1", "cert_subject_number") == seen[2]
        _set_details(conn, "search_assets_user", "10.0.0.2", '{"http": {"server": "nginx"}}')
        assert _number(conn, "search_assets_user", "10.0.0.2", "cert_subject_number") is None
        assert _number(conn, "search_assets_user", "10.0.0.2", "server_number") is not None
        # A value over the length a search reads has no number (it is absent to searches).
        _set_details(
            conn, "search_assets_user", "10.0.0.3", f'{{"http": {{"title": "{"x" * 1025}"}}}}'
        )
        assert _number(conn, "search_assets_user", "10.0.0.3", "title_number") is None
        # An update that leaves details alone leaves the numbers alone.
        conn.execute(
            sa.text(
                "UPDATE search_assets_user SET banner = 'b' WHERE ip = '10.0.0.1' AND port = 443"
            )
        )
        assert _number(conn, "search_assets_user", "10.0.0.1", "cert_subject_number") == seen[2]
        assert _mismatches(conn) == []


def test_two_writers_of_one_new_value_get_one_number(postgres_store):
    with db.transaction() as conn:
        seed_current_assets(
            conn, owner_id=1, execution_id=1, low=0, high=20, seen=at(0), services=SERVICES
        )
    details = '{"tls": {"subject_cn": "shared.test"}}'
    first = db.get_engine().connect()
    try:
        first_tx = first.begin()
        _set_details(first, "search_assets_user", "10.0.0.1", details)
        # The second writer's insert of the same value waits on the first's key...
        errors: list[BaseException] = []

        def second_writer() -> None:
            try:
                with db.transaction() as conn:
                    _set_details(conn, "search_assets_global", "10.0.0.2", details)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=second_writer)
        thread.start()
        thread.join(timeout=1.0)
        assert thread.is_alive(), "the second writer should wait for the first's value"
        # ...and, once the first commits, reads its number rather than taking another.
        first_tx.commit()
        thread.join(timeout=30)
        assert not thread.is_alive() and errors == []
    finally:
        first.close()
    with db.transaction() as conn:
        one = _number(conn, "search_assets_user", "10.0.0.1", "cert_subject_number")
        other = _number(conn, "search_assets_global", "10.0.0.2", "cert_subject_number")
        assert one is not None and one == other
        assert (
            conn.execute(
                sa.text("SELECT count(*) FROM search_asset_fact_texts WHERE text = 'shared.test'")
            ).scalar_one()
            == 1
        )
        assert _mismatches(conn) == []


def _web(execution_id: int, n: int, *, seen: int, renewed: bool = False) -> dict:
    """Host ``n``'s HTTPS details: a common issuer, a subject and title per host (shared by
    its ports), a server per tenth host; a renewed certificate names another subject."""
    subject = f"renewed-{n}.test" if renewed else f"host-{n}.test"
    return {
        "details": {
            "tls": {"issuer": "CN=Common CA", "subject_cn": subject},
            "http": {"title": f"Portal {n}", "server": f"httpd/{n % 10}"},
        },
        "seen": at(seen),
    }


def _run_endpoint(execution_id: int, n: int, port: int, *, seen: int, renewed: bool = False):
    """Execution ``execution_id``'s sighting of host ``n``'s ``port`` with ``_web`` details."""
    return execution_endpoint(
        execution_id,
        f"10.1.{n // 200}.{n % 200}",
        port,
        owner_id=1,
        **_web(execution_id, n, seen=seen, renewed=renewed),
    )


def _publish_all(store, execution_id: int) -> None:
    after = None
    while True:
        page = store.publish_execution_page(
            execution_id, after_id=after, limit=400, max_bytes=1 << 20
        )
        assert page is not None
        page.raise_for_failures()
        if page.endpoints == 0:
            return
        after = page.last_id


def test_merges_number_what_they_write_through_pages_in_parts_and_shards(settings, engine):
    """Server-side pages split into concurrent parts (their hosts' values shared between
    parts) and the generic shards write the numbers themselves; a newer run's renewed
    certificate moves the row to the new subject's number, an older one does not."""
    from app.search.postgres_store import PostgresStore

    store = PostgresStore(settings.replace(elasticsearch={"bulk_max_concurrency": 3}))
    try:
        store.ensure_schema()
        first = [_run_endpoint(1, n, port, seen=10) for n in range(300) for port in (443, 8443)]
        store.write_execution_endpoints(first).raise_for_failures()
        _publish_all(store, 1)
        # A newer run renews a third of the certificates; an older one names others.
        newer = [_run_endpoint(2, n, 443, seen=20, renewed=True) for n in range(0, 300, 3)]
        older = [_run_endpoint(3, n, 8443, seen=5, renewed=True) for n in range(1, 300, 3)]
        store.write_execution_endpoints(newer + older).raise_for_failures()
        _publish_all(store, 2)
        _publish_all(store, 3)
        # The generic path: current-asset documents merged in shards of 7.
        shards = [
            current_asset(scope, f"10.2.0.{n}", 443, owner_id=1, **_web(4, n, seen=30))
            for n in range(40)
            for scope in ("global", "user")
        ]
        store.publish_current(shards, max_operations=7, max_bytes=1 << 20).raise_for_failures()
        with db.transaction() as conn:
            assert _mismatches(conn) == []
            renewed = conn.execute(
                sa.text(
                    "SELECT count(*) FROM search_assets_user u JOIN search_asset_fact_texts f "
                    "ON f.number = u.cert_subject_number WHERE f.text LIKE 'renewed-%'"
                )
            ).scalar_one()
            # Every value once: an issuer, 300 subjects and titles, 10 servers, and the
            # 200 renewed subjects both runs named (the older run's too: a value kept
            # whether or not a row takes it). The shards' hosts name known values.
            values = conn.execute(
                sa.text("SELECT count(*) FROM search_asset_fact_texts")
            ).scalar_one()
        assert renewed == 100
        assert values == 1 + 300 + 300 + 10 + 200
    finally:
        store.close()
